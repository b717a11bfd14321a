"""The run's scope, as a filter: a thin adapter over plugins/module_utils/common/run_scope.py.

* ``ansible_play_hosts_all | open_gpu_cloud.toolkit.ogc_run_scope(groups, ansible_limit, playbook, inventories,
  needs_gpu_hosts, needs_control_host)``: ``{limited, control_host, gpu_hosts, kolla_hosts, errors}``; the limit is split as Ansible
  splits a host pattern.
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import run_scope as scope

try:
    from ansible.errors import AnsibleFilterError
    from ansible.inventory.manager import split_host_pattern
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

    def split_host_pattern(pattern):
        return [part.strip() for part in pattern.split(",")]


def run_scope(play_hosts, groups, limit=None, playbook="site.yml", inventories=(), needs_gpu_hosts=True,
              needs_control_host=True):
    """The run's GPU hosts and whether the control host is in it (module_utils/common/run_scope.py)."""
    try:
        patterns = split_host_pattern(limit) if isinstance(limit, str) and limit else []
        return scope.run_scope(list(play_hosts or []), dict(groups or {}), limit or None, patterns, playbook,
                               list(inventories or []), needs_gpu_hosts, needs_control_host)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """Run scope filters."""

    def filters(self):
        return {"ogc_run_scope": run_scope}
