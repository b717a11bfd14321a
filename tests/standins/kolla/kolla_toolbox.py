"""TEST-ONLY stand-in for kolla-ansible's kolla_toolbox (it runs modules inside a container).

Loaded through ANSIBLE_ACTION_PLUGINS by the genconfig test only: it answers like a fresh cloud
(no resources, e.g. no hypervisor registered yet). Never ship it to operators.
"""

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Answer as kolla_toolbox would against an empty cloud."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(changed=False, resources=[])
        return result
