# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/reboot_waves.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.reboot_waves import FilterModule  # noqa: F401
