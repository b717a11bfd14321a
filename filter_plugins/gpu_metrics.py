# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/gpu_metrics.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.gpu_metrics import FilterModule  # noqa: F401
