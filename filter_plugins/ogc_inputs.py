# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/ogc_inputs.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.ogc_inputs import FilterModule  # noqa: F401
