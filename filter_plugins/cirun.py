# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/cirun.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.cirun import FilterModule  # noqa: F401
