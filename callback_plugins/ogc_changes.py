# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""List, at the end of a run, every task that changed something, per host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: ogc_changes
type: aggregate
short_description: Print what changed, per host, at the end of the run
description:
  - Collects the name of every task that reported C(changed) (in check mode, would change) and
    prints them per host when the playbook ends, so an operator sees at a glance what a run did.
  - Enabled in the project's ansible.cfg (C(callbacks_enabled = ogc_changes)).
requirements:
  - enabled in ansible.cfg or with ANSIBLE_CALLBACKS_ENABLED
"""

from ansible import context
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Aggregate callback: remembers changed tasks and prints them in v2_playbook_on_stats."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ogc_changes"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._changes: dict[str, list[str]] = {}
        self._check_mode = False

    def v2_playbook_on_start(self, playbook):
        self._check_mode = bool(context.CLIARGS.get("check", False))

    def v2_runner_on_ok(self, result):
        if not result._result.get("changed"):
            return
        host = result._host.get_name()
        delegated = result._result.get("_ansible_delegated_vars", {}).get("ansible_host")
        name = result._task.get_name().strip() or result._task.action
        if delegated and delegated != host:
            name += f" (on {delegated})"
        tasks = self._changes.setdefault(host, [])
        if name not in tasks:
            tasks.append(name)

    def v2_playbook_on_stats(self, stats):
        verb = "would change" if self._check_mode else "changed"
        if not self._changes:
            self._display.display(f"\nWHAT CHANGED: nothing {verb} on any host.")
            return
        lines = [f"\nWHAT CHANGED ({verb}, per host):"]
        for host in sorted(self._changes):
            lines.append(f"  {host}:")
            lines.extend(f"    - {task}" for task in self._changes[host])
        self._display.display("\n".join(lines))
