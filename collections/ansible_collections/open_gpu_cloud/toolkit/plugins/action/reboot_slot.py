# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The reboot_slot task (plugins/modules/reboot_slot.py documents it): fleet-wide reboot slots, so every run of
playbooks/host.yml at once (the slices of an AWX sliced job, on one control host or several) together never reboots
more GPU hosts than one wave of the fleet. The rules are in plugins/module_utils/coordination/ (leases.py, slots.py), the
records on the backend ``url`` names (backend.py), the run's lease kept by its keeper (keeper.py).

It runs here, on the control host, where the identity of this ansible-playbook run and the liveness of another run
are answered. ``slot_task`` is the whole task as a function of its arguments, so it is tested without a play.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import keeper
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots

STATES = ("acquired", "confirmed", "released", "stopped", "finished")
OPTIONS = ("url", "host", "state", "capacity", "timeout", "run_started", "reason", "wave", "lease_ttl",
           "connect_timeout", "read_timeout", "keeper_start_timeout")
# Seconds between two looks at the slots while waiting for one.
POLL = 1.0


class SlotArgumentError(leases.SlotError):
    """An argument of the task this plugin refuses (a wrong type is refused, never converted)."""


def _number(done, name, minimum, kind=(int, float)):
    value = done[name]
    if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
        what = "an int" if kind is int else "a number"
        raise SlotArgumentError(f"{name}={value!r} ({type(value).__name__}) must be {what} of at least {minimum}")
    return value


def _keeper_log(here):
    """Where the run's keeper logs (keeper.log_path), or where to look when that cannot be said."""
    try:
        return keeper.log_path(here["run"])
    except (be.BackendError, OSError):
        return f"keeper-{here['run']}.log in the keepers' runtime directory"


def check_args(args, host):
    """The task's arguments, checked: a dict with defaults filled in; SlotArgumentError names the bad one."""
    unknown = sorted(set(args) - set(OPTIONS))
    if unknown:
        raise SlotArgumentError(f"unsupported option(s): {', '.join(unknown)}")
    done = dict(dict(host=host, state="acquired", timeout=0, reason="", wave=[], lease_ttl=60, connect_timeout=5,
                     read_timeout=10, keeper_start_timeout=keeper.START_TIMEOUT), **args)
    if not isinstance(done["wave"], list) or not all(isinstance(h, str) and h for h in done["wave"]):
        raise SlotArgumentError(f"wave={done['wave']!r} ({type(done['wave']).__name__}) must be a list of host names "
                                "(the hosts rebooting with this one: ansible_play_batch)")
    for name in ("url", "host", "state", "reason"):
        if not isinstance(done.get(name), str):
            raise SlotArgumentError(f"{name}={done.get(name)!r} ({type(done.get(name)).__name__}) must be a string")
    kind, _settings, shown = be.parse_url(done["url"])
    if not done["host"]:
        raise SlotArgumentError("host must not be empty")
    if done["state"] not in STATES:
        raise SlotArgumentError(f"state={done['state']!r} must be one of {', '.join(STATES)}")
    for name in ("connect_timeout", "read_timeout", "keeper_start_timeout"):
        _number(done, name, 1)
    _number(done, "lease_ttl", 5, kind=int)
    problem = be.ttl_problem(kind, done["lease_ttl"], shown)
    if problem:
        raise SlotArgumentError(problem)
    if done["state"] == "acquired":
        for name in ("capacity", "run_started"):
            if name not in done:
                raise SlotArgumentError(f"state=acquired needs {name}")
        _number(done, "capacity", 1, kind=int)
        _number(done, "run_started", 0)
        _number(done, "timeout", 0)
    return done


def slot_task(args, here, backend, check=False, clock=time.time, sleep=time.sleep, session=None):
    """The task's result for ``args`` (check_args's, for args["host"]), asked by the run ``here``
    (identity.identity) of ``backend``: a dict as Ansible returns it (failed and msg on a refusal).
    ``session(backend)`` grants the run's lease and starts its keeper (keeper.ensure) and returns the lease id."""
    host, state = args["host"], args["state"]
    lease = be.lease_id_of(here["run"])
    result = dict(changed=False, url=backend.shown, slot=None, outcome=None, took_over=None, holders=[],
                  stopped=None, released=[], waited=0)
    try:
        if state == "released":
            result["released"] = slots.release(backend, host, here, check=check)
            return result
        if state == "stopped":
            result["stopped"] = slots.stop(backend, host, args["reason"], here, clock(), check=check)
            return result
        if state == "finished":
            if not check:
                result["keeper_stopped"] = keeper.stop(here["run"])
                backend.revoke(lease)
            return result
        if state == "confirmed":
            if not check:
                result["slot"], result["lease_left"] = slots.confirm(backend, host, here, lease)
            return result
        if not check:
            lease = session(backend) if session else lease
    except be.LeaseLost as exc:
        return dict(result, failed=True, msg=(
            f"{host}: {exc}. The host is not rebooted outside a slot; its turn stops here. Check that the "
            f"coordination service {backend.shown} stays reachable from this control host (the keeper renews the "
            f"run's lease every third of passthrough_rollout_lease_ttl, {args['lease_ttl']} s); on a control host too "
            f"loaded to renew within that (load average {keeper.load()}), raise passthrough_rollout_lease_ttl. The "
            f"keeper's log says which: {_keeper_log(here)}. Then run playbooks/host.yml again."))
    except be.Unavailable as exc:
        if state in ("released", "stopped", "finished"):
            what = {"released": "its reboot slot frees itself when this run's lease runs out",
                    "stopped": "the stop record was not written: the other runs are not held back by it",
                    "finished": "this run's lease was not revoked: it runs out by itself"}[state]
            return dict(result, warnings=[f"{host}: {exc}; {what} (at most passthrough_rollout_lease_ttl seconds "
                                          "after this run ends)."])
        return dict(result, failed=True, msg=(
            f"{host}: {exc}. No reboot starts without a fleet-wide slot, so {host} is left as it is (not drained, not "
            "rebooted). Bring the coordination service back (or point passthrough_rollout_coordination_url at a "
            "reachable one), then run playbooks/host.yml again: whatever this run held is freed when its lease runs "
            "out."))
    start = clock()
    while True:
        try:
            index, outcome, before = slots.acquire(backend, host, args["wave"], args["capacity"], here,
                                                   args["run_started"], lease, check=check)
        except leases.RolloutStopped as exc:
            record = exc.record
            return dict(result, failed=True, stopped=record, waited=round(clock() - start, 1), msg=(
                f"{host}: no reboot slot: {leases.describe_stop(record)} (the fleet-wide stop record in "
                f"{backend.shown}, written after this run started at {leases.utc(args['run_started'])}). The rollout "
                f"stops on this run too: {host} is left untouched. Fix {record.get('host')}, then run "
                "playbooks/host.yml again: a run started after the failure is not held back by the record."))
        except leases.StopFromFuture as exc:
            return dict(result, failed=True, stopped=exc.record, waited=round(clock() - start, 1), msg=(
                f"{host}: no reboot slot: {exc} ({backend.shown}). {host} is left untouched."))
        except leases.SlotsFull as exc:
            waited = clock() - start
            result.update(holders=exc.holders, waited=round(waited, 1))
            if check:
                return dict(result, outcome="full", msg=f"{host}: would wait for a fleet-wide reboot slot: {exc}")
            if waited < args["timeout"]:
                sleep(min(POLL, args["timeout"] - waited))
                continue
            return dict(result, failed=True, msg=(
                f"{host}: no fleet-wide reboot slot free after {args['timeout']} s; {exc}. Those reboots are still "
                "under way, or their run is gone and its lease has not run out yet. Wait for them (a holder whose run "
                "died frees its slot when its lease runs out, at the time named) and run playbooks/host.yml again, "
                "or raise passthrough_rollout_reboot_slot_timeout."))
        except be.LeaseLost as exc:
            return dict(result, failed=True, msg=f"{host}: {exc}. Run playbooks/host.yml again.")
        except be.Unavailable as exc:
            return dict(result, failed=True, msg=(
                f"{host}: {exc}. No reboot starts without a fleet-wide slot, so {host} is left as it is (not drained, "
                "not rebooted). Bring the coordination service back (or point passthrough_rollout_coordination_url at "
                "a reachable one), then run playbooks/host.yml again: whatever this run held is freed when its lease "
                "runs out."))
        result.update(slot=index, outcome=outcome, waited=round(clock() - start, 1),
                      took_over=before if outcome in (leases.EXPIRED, leases.GONE) else None)
        if outcome in (leases.EXPIRED, leases.GONE):
            verb = "would take" if check else "took"
            why = "its lease ran out" if outcome == leases.EXPIRED else "that run is gone"
            result["msg"] = (f"{verb} over the reboot slot {index} of "
                             f"{leases.describe_holder(before, clock())}: {why}")
        return result


class ActionModule(ActionBase):
    """Acquire, confirm or release a fleet-wide reboot slot, or write the fleet-wide stop record."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", "?")
        try:
            args = check_args(dict(self._task.args), host)
            timeouts = (args["connect_timeout"], args["read_timeout"])
            backend = be.open_backend(args["url"], *timeouts)
            backend.check()
            here = ident.identity(ident.run_pid())

            def session(store):
                return keeper.ensure(args["url"], here, args["lease_ttl"], timeouts, backend=store,
                                     start_timeout=args["keeper_start_timeout"])[0]

            return dict(result, **slot_task(args, here, backend, check=self._task.check_mode, session=session))
        except (leases.LeaseError, OSError) as exc:
            return dict(result, changed=False, failed=True, msg=f"{host}: reboot slot: {exc}")
