# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/gpu_health.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.gpu_health import FilterModule  # noqa: F401
