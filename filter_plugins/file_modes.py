# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/file_modes.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.file_modes import FilterModule  # noqa: F401
