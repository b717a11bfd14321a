# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/return_gpus.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.return_gpus import FilterModule  # noqa: F401
