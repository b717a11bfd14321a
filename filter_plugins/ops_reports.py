# Short names for the filters of open_gpu_cloud.toolkit's plugins/filter/ops_reports.py.
from ansible_collections.open_gpu_cloud.toolkit.plugins.filter.ops_reports import FilterModule  # noqa: F401
