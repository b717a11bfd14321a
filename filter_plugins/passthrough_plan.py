# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/passthrough_plan.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.passthrough_plan import FilterModule  # noqa: F401
