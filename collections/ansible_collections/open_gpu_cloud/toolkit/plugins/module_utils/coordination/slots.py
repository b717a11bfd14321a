# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Fleet-wide reboot slots and the stop record, on a backend (``backend.py``), by the rules of ``leases.py``.

* ``acquire``: the slots of a wave, all or none, carried by the run's lease; a stop record written after the run
  started refuses it (``RolloutStopped``); slots held by live runs refuse it (``SlotsFull``, naming them and when
  their leases run out: the caller waits, within its timeout);
* ``confirm``: renews the run's lease and proves the run still holds the host's slot - asked right before the
  reboot, so a run whose lease ran out (its keeper could not reach the service) does not reboot outside a slot;
* ``release``: gives back the host's slots of this run;
* ``stop``: writes the stop record (the newest failure replaces an older one).

Every change is a read, the pure decision, and a commit that succeeds only if nothing changed since the read (the
backend's transaction); a conflict reads again, a bounded number of times.
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases

__all__ = ["acquire", "confirm", "release", "stop", "holder_fields", "MAX_TRIES"]

# Commits that found the slots changed since their read, in a row, before giving up (each is another run's change
# landing first: with a handful of runs at once, a few at most).
MAX_TRIES = 25
HOLDER_KEYS = ("run", "controller", "controller_id", "boot", "user", "pid", "start_time")


def holder_fields(here):
    """The fields of a record that name its holder (``identity.identity``)."""
    return {key: here.get(key) for key in HOLDER_KEYS}


def _conflicts(backend, what):
    return leases.SlotError(f"{what} in {backend.shown}: the slots changed under {MAX_TRIES} tries in a row (many "
                            "runs at once?); run playbooks/host.yml again")


def acquire(backend, host, wave, capacity, here, run_started, lease, check=False, alive=ident.owner_alive):
    """Take a slot for ``host``, and with it for every other host of its ``wave`` (all or none). Returns ``host``'s
    ``(index, outcome, record before)`` (leases.decide_wave). Check mode decides and writes nothing."""
    wave = [host] + [h for h in wave if h != host]
    for _attempt in range(MAX_TRIES):
        view = backend.read()
        leases.check_stop(view.stop, run_started, view.now, backend.stop_removal())
        decided = leases.decide_wave(view.slots, wave, capacity, here, view.now, alive)
        puts = {index: dict(holder_fields(here), host=member, since=leases.utc(view.now))
                for member, (index, outcome, _before) in decided.items() if outcome != leases.OURS}
        if check or not puts or backend.commit(view, puts=puts, lease=lease):
            return decided[host]
    raise _conflicts(backend, f"no reboot slot for {host}")


def confirm(backend, host, here, lease):
    """Renew the run's lease and return ``(index, seconds left)`` of the slot the run holds for ``host``; LeaseLost
    when the lease ran out or the slot is no longer the run's."""
    left = backend.keepalive(lease)
    if left <= 0:
        raise be.LeaseLost(f"this run's lease in {backend.shown} ran out or was revoked, so {host}'s reboot slot is "
                           "no longer held (its keeper could not renew it in time)")
    view = backend.read()
    held = sorted(i for i, r in view.slots.items() if r.get("host") == host and r.get("run") == here.get("run"))
    if not held:
        raise be.LeaseLost(f"this run holds no reboot slot for {host} in {backend.shown} any more")
    return held[0], left


def release(backend, host, here, check=False):
    """Give back the slots this run holds for ``host``; returns their indexes (empty when it holds none)."""
    for _attempt in range(MAX_TRIES):
        view = backend.read()
        mine = sorted(i for i, r in view.slots.items() if r.get("host") == host and r.get("run") == here.get("run"))
        if check or not mine or backend.commit(view, deletes=mine):
            return mine
    raise _conflicts(backend, f"{host}'s reboot slot could not be given back")


def stop(backend, host, reason, here, now, check=False):
    """Write the stop record; returns it."""
    record = dict(holder_fields(here), host=host, reason=reason, since=leases.utc(now), time=now)
    if not check:
        backend.put_stop(record)
    return record
