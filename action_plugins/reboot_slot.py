# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The reboot_slot task (library/reboot_slot.py documents it): fleet-wide reboot slots on the control host, so the
slices of an AWX sliced job together never reboot more GPU hosts at once than one wave of the fleet. The rules are
in module_utils/reboot_slots.py.

It runs here, on the control host, where the slot directory is and where the identity of this ansible-playbook run
and the liveness of another run can be answered (no module process: waiting for a slot polls a directory).
``slot_task`` is the whole task as a function of its arguments, so it is tested without a play.
"""

from __future__ import annotations

import datetime
import os
import runpy
import time

from ansible.plugins.action import ActionBase

# The project's module_utils/, imported as modules import it: the one route (plugin_utils/module_utils_route.py).
runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugin_utils",
                            "module_utils_route.py"))

from ansible.module_utils import host_lock as hl  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import reboot_slots as rs  # noqa: E402  pylint: disable=wrong-import-position

STATES = ("acquired", "released", "stopped")
# Seconds between two looks at the slot directory while waiting (a listing of a few small files).
POLL = 1.0


class SlotArgumentError(rs.SlotError):
    """An argument of the task this plugin refuses (a wrong type is refused, never converted)."""


def _number(args, name, minimum):
    value = args[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise SlotArgumentError(f"{name}={value!r} ({type(value).__name__}) must be a number of at least {minimum}")
    return value


def check_args(args, host):
    """The task's arguments, checked: a dict with defaults filled in; SlotArgumentError names the bad one."""
    unknown = sorted(set(args) - {"path", "host", "state", "capacity", "timeout", "run_started", "reason", "wave"})
    if unknown:
        raise SlotArgumentError(f"unsupported option(s): {', '.join(unknown)}")
    done = dict(dict(host=host, state="acquired", timeout=0, reason="", wave=[]), **args)
    if not isinstance(done["wave"], list) or not all(isinstance(h, str) and h for h in done["wave"]):
        raise SlotArgumentError(f"wave={done['wave']!r} ({type(done['wave']).__name__}) must be a list of host names "
                                "(the hosts rebooting with this one: ansible_play_batch)")
    for name in ("path", "host", "state", "reason"):
        if not isinstance(done.get(name), str):
            raise SlotArgumentError(f"{name}={done.get(name)!r} ({type(done.get(name)).__name__}) must be a string")
    if not os.path.isabs(done["path"]):
        raise SlotArgumentError(f"path={done['path']!r} must be an absolute path (the slot directory on the control "
                                "host, passthrough_host_reboot_slots_dir)")
    if not done["host"]:
        raise SlotArgumentError("host must not be empty")
    if done["state"] not in STATES:
        raise SlotArgumentError(f"state={done['state']!r} must be one of {', '.join(STATES)}")
    if done["state"] == "acquired":
        for name in ("capacity", "run_started"):
            if name not in done:
                raise SlotArgumentError(f"state=acquired needs {name}")
        if isinstance(done["capacity"], bool) or not isinstance(done["capacity"], int) or done["capacity"] < 1:
            raise SlotArgumentError(f"capacity={done['capacity']!r} ({type(done['capacity']).__name__}) must be an "
                                    "int of at least 1 (the fleet-wide wave size)")
        _number(done, "run_started", 0)
        _number(done, "timeout", 0)
    return done


def _utc(moment):
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot_task(args, here, check=False, clock=time.time, sleep=time.sleep):
    """The task's result for ``args`` (check_args's: for args["host"]), asked by the run ``here`` (host_lock.identity):
    a dict as Ansible returns it (failed and msg on a refusal)."""
    path, state = args["path"], args["state"]
    result = dict(changed=False, path=path, slot=None, outcome=None, took_over=None, holders=[], stopped=None,
                  released=[], waited=0)
    if state == "released":
        result["released"] = rs.release(path, args["host"], check=check)
        return result
    if state == "stopped":
        result["stopped"] = rs.stop(path, args["host"], args["reason"], clock(), here, check=check)
        return result
    start = clock()
    while True:
        try:
            index, outcome, before = rs.acquire(path, args["host"], args["capacity"], here, args["run_started"],
                                                clock(), check=check, wave=args["wave"])
        except rs.RolloutStopped as exc:
            record = exc.record
            return dict(result, failed=True, stopped=record, waited=round(clock() - start, 1), msg=(
                f"{args['host']}: no reboot slot: {rs.describe_stop(record)} (the fleet-wide stop record "
                f"{os.path.join(path, rs.STOP_FILE)}, written after this run started at {_utc(args['run_started'])}). "
                f"The rollout stops on this slice too: {args['host']} is left untouched. Fix {record.get('host')}, "
                "then run playbooks/host.yml again: a run started after the failure is not held back by the record."))
        except rs.SlotsFull as exc:
            waited = clock() - start
            result.update(holders=exc.holders, waited=round(waited, 1))
            if check:
                return dict(result, outcome="full", msg=(
                    f"{args['host']}: would wait for a fleet-wide reboot slot: {exc}"))
            if waited < args["timeout"]:
                sleep(min(POLL, args["timeout"] - waited))
                continue
            files = ", ".join(os.path.join(path, f"slot-{i}") for i in range(len(exc.holders)))
            return dict(result, failed=True, msg=(
                f"{args['host']}: no fleet-wide reboot slot free after {args['timeout']} s; {exc}. Those reboots are "
                "still under way (or their run is on another control host, which cannot be checked from here). Wait "
                "for them and run playbooks/host.yml again, or raise passthrough_host_reboot_slot_timeout; when a "
                f"holder's run is gone (its control host crashed), remove its slot file ({files})."))
        result.update(slot=index, outcome=outcome, waited=round(clock() - start, 1),
                      took_over=before if outcome == "stale" else None)
        if outcome == "stale":
            verb = "would take" if check else "took"
            result["msg"] = f"{verb} over the reboot slot {index} of {rs.describe_holder(before)}: that run is gone"
        return result


class ActionModule(ActionBase):
    """Acquire or release a fleet-wide reboot slot, or write the fleet-wide stop record."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", "?")
        try:
            args = check_args(dict(self._task.args), host)
            return dict(result, **slot_task(args, hl.identity(hl.run_pid()), check=self._task.check_mode))
        except (rs.SlotError, OSError) as exc:
            return dict(result, changed=False, failed=True, msg=f"{host}: reboot slot: {exc}")
