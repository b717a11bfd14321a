"""TEST-ONLY stand-in for kolla-ansible's kolla_container_facts (no container engine here).

Loaded through ANSIBLE_ACTION_PLUGINS by the genconfig test only: it reports that no container
exists, which is the truth on a machine without a container engine. Never ship it to operators.
"""

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Answer as kolla_container_facts would on a host without any container."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(changed=False, containers={}, volumes={})
        return result
