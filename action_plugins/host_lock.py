# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The host_lock task (library/host_lock.py documents it): one run of the host phase per host at a time. The rules are
in module_utils/host_lock.py.

The identity of this ansible-playbook run and the liveness of another run are answered here, on the control host,
where that run's process is; the lock file itself is read and written on the host by module_utils/host_lock.py's
HOST_SCRIPT (POSIX sh under a flock, no module process: the lock costs each host two short shell commands per run).
When another run holds the lock and is gone (its process on this control host ended, or this control host rebooted
since), the lock is taken over; otherwise the task fails, naming the other run and what to do.
"""

from __future__ import annotations

import datetime
import os
import runpy
import shlex

from ansible.plugins.action import ActionBase

# The project's module_utils/, imported as modules import it: the one route (plugin_utils/module_utils_route.py).
runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugin_utils",
                            "module_utils_route.py"))

from ansible.module_utils import boot_files as bf  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import host_lock as hl  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT_PATH = "/var/lib/open-gpu-cloud/passthrough_host.lock"


# The run's process (module_utils/host_lock.py, shared with action_plugins/reboot_slot.py).
run_pid = hl.run_pid


class ActionModule(ActionBase):
    """Take or release the host phase's lock for this run."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "root", "state"))
    _supports_check_mode = True

    def _host(self, real, state, owner, takeover=""):
        """HOST_SCRIPT on the host: (verdict, the record the lock held) or a failure dict."""
        args = [real, state, owner["run"], takeover, "1" if self._task.check_mode else "0", hl.dump(owner)]
        command = f"sh -c {shlex.quote(hl.HOST_SCRIPT)} host_lock {' '.join(shlex.quote(a) for a in args)}"
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc") != 0:
            verb = "take" if state == "held" else "release"
            why = (done.get("stderr") or done.get("stdout") or f"rc {done.get('rc')}").strip()
            raise hl.LockError(f"cannot {verb} the lock {real} on the host: {why}")
        return hl.answer(done.get("stdout", ""), real)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        state = args.get("state", "held")
        path = args.get("path", DEFAULT_PATH)
        host = (task_vars or {}).get("inventory_hostname", "?")
        result.update(changed=False, acquired=False, held_by=None, took_over=None, released=False)
        if state not in ("held", "released"):
            return dict(result, failed=True, msg=f"state must be held or released, not {state!r}")
        try:
            real = bf.host_path(args.get("root", "/"), path, "path (passthrough_host_lock_file)")
            here = hl.identity(run_pid())
            owner = dict(here, since=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            verdict, before = self._host(real, state, owner)
            alive = None
            if verdict == "HELD":
                alive = hl.owner_alive(before, here)
                if alive is False:
                    verdict, before = self._host(real, state, owner, takeover=before["run"])
        except (bf.BootFilesError, hl.LockError) as exc:
            return dict(result, failed=True, msg=f"{host}: {exc}")
        result.update(path=real, acquired=verdict in ("ACQUIRED", "TOOK_OVER", "FREE"), released=verdict == "RELEASED",
                      took_over=before if verdict == "TOOK_OVER" else None,
                      held_by=before if verdict == "HELD" else None)
        if verdict == "HELD":
            seen = ("it is still running" if alive else
                    "it ran on another control host, whose processes cannot be seen from here")
            result.update(failed=True, msg=(
                f"{host}: another run of the host phase holds the host's lock {path}: {hl.describe(before)}; {seen}. "
                "Two runs would reboot the host twice and one's reboot could land while the other rebuilds the "
                "initramfs, so this run stops before changing anything. Wait for that run to end, then run this play "
                f"again; if it is gone (its control host crashed), remove {path} on {host} first."))
        elif verdict == "TOOK_OVER":
            result["msg"] = f"took over the lock of {hl.describe(before)}: that run is gone"
        return result
