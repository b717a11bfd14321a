# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""The host_lock module's action plugin: the run's identity and the liveness of another run, which only the control
host can tell (module_utils/host_lock.py has the rules).

It fills the module's ``owner`` with this ansible-playbook run (control host, user, pid and start time, boot id and
machine id), runs the module on the host, and when another run holds the lock asks whether that run is gone (its
process on this control host ended, or this control host rebooted): then the lock is taken over; otherwise the task
fails, naming the other run and what to do.
"""

from __future__ import annotations

import multiprocessing
import os

import ansible.module_utils
from ansible.plugins.action import ActionBase

# The project's module_utils/ (ansible.cfg `module_utils`), importable here as modules import it.
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils import host_lock as hl  # noqa: E402  pylint: disable=wrong-import-position


def run_pid():
    """The ansible-playbook process of this run: a task runs in a worker process the run forked (multiprocessing),
    whose parent it is; in the run's own process, this process."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None else os.getpid()


class ActionModule(ActionBase):
    """Take or release the host phase's lock for this run."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "root", "state"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        here = hl.identity(run_pid())
        args["owner"] = here
        answer = self._execute_module(module_name="host_lock", module_args=args, task_vars=task_vars)
        held_by = answer.get("held_by")
        if not answer.get("failed") and args.get("state", "held") == "held" and held_by:
            alive = hl.owner_alive(held_by, here)
            if alive is False:
                answer = self._execute_module(module_name="host_lock", module_args=dict(args, takeover=held_by["run"]),
                                              task_vars=task_vars)
                held_by = answer.get("held_by")
            if held_by and not answer.get("failed"):
                host = (task_vars or {}).get("inventory_hostname", "?")
                path = args.get("path", "/var/lib/open-gpu-cloud/passthrough_host.lock")
                seen = ("it is still running" if alive else
                        "it ran on another control host, whose processes cannot be seen from here")
                answer.update(failed=True, msg=(
                    "%s: another run of the host phase holds the host's lock %s: %s; %s. Two runs would reboot the "
                    "host twice and one's reboot could land while the other rebuilds the initramfs, so this run "
                    "stops before changing anything. Wait for that run to end, then run this play again; if it is "
                    "gone (its control host crashed), remove %s on %s first."
                    % (host, path, hl.describe(held_by), seen, path, host)))
        result.update(answer)
        return result
