# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The host_lock task (plugins/modules/host_lock.py documents it): one run of the host phase per host at a time, under a
lease. The rules are in plugins/module_utils/coordination/host_lock.py and leases.py.

The identity of this ansible-playbook run and the liveness of another run are answered here, on the control host,
where that run's process is; the lock file itself is read and written on the host by HOST_SCRIPT (POSIX sh under a
flock, no module process). A lock whose lease ran out, or whose run is gone from this control host, is taken over;
otherwise the task fails naming the holder, when its lease runs out, and what to do.
"""

from __future__ import annotations

import datetime
import shlex

from ansible.plugins.action import ActionBase

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import host_lock as hl
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases

DEFAULT_PATH = "/var/lib/open-gpu-cloud/passthrough_host.lock"
DEFAULT_STATE = "/var/lib/open-gpu-cloud/passthrough_host.json"
OPS = {"held": "take", "renewed": "renew", "released": "release"}
VARIABLES = {"lock": "passthrough_host_lock_file", "state": "passthrough_host_state_file"}


class ActionModule(ActionBase):
    """Take, renew or release the host phase's lock for this run."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "root", "state", "lease", "state_file", "host"))
    _supports_check_mode = True

    def _host(self, real, state_real, op, owner, seconds, expect=""):
        """HOST_SCRIPT on the host: answer()'s tuple."""
        args = [real, state_real, op, owner["run"], expect, str(seconds), "1" if self._task.check_mode else "0",
                hl.dump(owner)]
        command = f"sh -c {shlex.quote(hl.HOST_SCRIPT)} host_lock {' '.join(shlex.quote(a) for a in args)}"
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc") != 0:
            why = (done.get("stderr") or done.get("stdout") or f"rc {done.get('rc')}").strip()
            raise hl.LockError(f"cannot {op} the lock {real} on the host: {why}")
        return hl.answer(done.get("stdout", ""), real)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        state = args.get("state", "held")
        path = args.get("path", DEFAULT_PATH)
        state_file = args.get("state_file", DEFAULT_STATE)
        host = args.get("host") or (task_vars or {}).get("inventory_hostname", "?")
        seconds = args.get("lease", 900)
        result.update(changed=False, acquired=False, held_by=None, took_over=None, released=False, expires=None)
        if state not in OPS:
            return dict(result, failed=True, msg=f"{host}: state must be held, renewed or released, not {state!r}")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            return dict(result, failed=True, msg=(
                f"{host}: lease={seconds!r} ({type(seconds).__name__}) must be an int of at least 1 (seconds: "
                "passthrough_host_lock_lease)"))
        try:
            real = bf.host_path(args.get("root", "/"), path, "path (passthrough_host_lock_file)")
            state_real = bf.host_path(args.get("root", "/"), state_file, "state_file (passthrough_host_state_file)")
            here = ident.identity(ident.run_pid())
            owner = hl.record(here, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            verdict, now, before, standing, detail = hl.exchange(
                lambda expect: self._host(real, state_real, OPS[state], owner, seconds, expect), here)
        except (bf.BootFilesError, hl.LockError) as exc:
            return dict(result, failed=True, msg=f"{host}: {exc}")
        if verdict == "BADPATH":
            role, kind = detail.split(" ", 1)
            shown = path if role == "lock" else state_file
            return dict(result, failed=True, msg=(
                f"{host}: {VARIABLES[role]} ({shown}) is a {kind} on the host, not a file: nothing was written. Give "
                f"{VARIABLES[role]} the path of a file of its own (the default is "
                f"{DEFAULT_PATH if role == 'lock' else DEFAULT_STATE}), then run this play again."))
        expires = None if verdict in ("HELD", "LOST", "KEPT", "RELEASED") or now is None else now + seconds
        result.update(path=real, acquired=verdict in ("ACQUIRED", "TOOK_OVER", "FREE", "RENEWED"),
                      released=verdict == "RELEASED", took_over=before if verdict == "TOOK_OVER" else None,
                      held_by=before if verdict in ("HELD", "LOST") else None,
                      expires=leases.utc(expires) if expires else None)
        if verdict == "HELD":
            seen = {leases.HELD: ("it is still running on this control host"
                                  if ident.owner_alive(before, here) else
                                  f"it runs on another control host ({before.get('controller', '?')}), whose processes "
                                  "cannot be seen from here")}.get(standing, "")
            until = leases.expiry_of(before)
            result.update(failed=True, msg=(
                f"{host}: another run of the host phase holds the host's lock {path}: "
                f"{hl.describe(before, now)}; {seen}. Two runs would reboot the host twice and one's reboot could "
                "land while the other rebuilds the initramfs, so this run stops before changing anything. Wait for "
                f"that run to end, then run this play again: once its lease has run out ({leases.utc(until)}) any "
                f"control host takes the lock over. If that run is gone and you cannot wait, remove {path} on {host} "
                "(after checking that no run of the host phase is under way on it), then run this play again."))
        elif verdict == "LOST":
            holder = f"it is now held by {hl.describe(before, now)}" if before else "the lock file is gone"
            result.update(failed=True, msg=(
                f"{host}: this run no longer holds the host's lock {path}: {holder}. Its lease ran out before it was "
                "renewed (a step took longer than its timeout and passthrough_host_lock_lease), or the file was "
                "removed by hand; this run stops here on the host rather than act beside another. Run this play "
                "again once no other run is under way on the host."))
        elif verdict == "TOOK_OVER":
            why = "its lease ran out" if leases.expiry_of(before) <= now else "that run is gone"
            result["msg"] = f"took over the lock of {hl.describe(before, now)}: {why}"
        return result
