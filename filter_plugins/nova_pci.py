# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/nova_pci.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.nova_pci import FilterModule  # noqa: F401
