# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/fleet_report.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.fleet_report import FilterModule  # noqa: F401
