"""kolla-ansible's steps for a run, as a filter: a thin adapter over plugins/module_utils/kolla/deploy_state.py.

* ``last | open_gpu_cloud.toolkit.kolla_deploy_steps(now, every_host, targets, steps, reconfigure_steps, force)``:
  ``{steps, limit, unlimited_steps, state}``.
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.kolla import deploy_state

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""


def kolla_deploy_steps(last, now, every_host, targets, steps, reconfigure_steps, force=False):
    """The steps to run, their limit and the state to record (module_utils/kolla/deploy_state.py)."""
    try:
        return deploy_state.plan_steps(last, now, every_host, targets, steps, reconfigure_steps, force)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """kolla-ansible deploy filters."""

    def filters(self):
        return {"kolla_deploy_steps": kolla_deploy_steps}
