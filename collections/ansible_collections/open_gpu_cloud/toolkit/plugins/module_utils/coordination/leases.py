# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The rules of records held under a lease (pure: the clock and the liveness of a run are arguments).

A record (the GPU host's lock, a fleet-wide reboot slot) names its holder (``identity``) and carries ``expires``:
seconds since the epoch on the clock of the place it lives (the GPU host's for its lock, the backend's for a slot),
after which nobody holds it. The holder renews it while it works; a holder that dies stops renewing, and the record
is free once its lease has run out. For a record ``holder_state`` says:

* ``free``: there is none;
* ``ours``: this run holds it (it is renewed, or given back);
* ``expired``: its lease ran out - any run, on any control host, may take it;
* ``gone``: its lease runs, but its run is gone from this control host (its process ended, or this control host
  rebooted since): taken at once by a run of the same control host, which can prove it;
* ``held``: a live lease of another run (or of a run on another control host, which cannot be seen from here):
  never taken; the refusal names the holder and when its lease runs out.

A record without an expiry (a lock of a version without leases) counts as expired.

Reboot slots (``decide_wave``): at most ``capacity`` hosts reboot at once across every run; the hosts of a wave take
their slots together, all or none (under Ansible's linear strategy a wave's hosts go on together, so two runs whose
waves each got part of what they need would wait on each other until their timeout). A stop record written after a
run started refuses that run any slot (``check_stop``); one dated further ahead of this control host's clock than
``CLOCK_SKEW`` (a control host whose clock is wrong, or a record planted) is refused as what it is
(``StopFromFuture``), naming both clocks, instead of holding back every run until that time.
"""

from __future__ import annotations

import datetime
import math

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident

__all__ = ["FREE", "OURS", "EXPIRED", "GONE", "HELD", "TAKEABLE", "LeaseError", "SlotError", "SlotsFull",
           "RolloutStopped", "StopFromFuture", "CLOCK_SKEW", "utc", "holder_state", "describe_holder", "describe_stop", "decide_wave", "check_stop",
           "expiry_of"]

FREE, OURS, EXPIRED, GONE, HELD = "free", "ours", "expired", "gone", "held"
TAKEABLE = (FREE, EXPIRED, GONE)


class LeaseError(Exception):
    """A refusal of the coordination layer, worded for the operator."""


class SlotError(LeaseError):
    """A refusal of the reboot slots."""


class SlotsFull(SlotError):
    """The free slots do not cover the wave; ``holders`` are the live records in the way."""

    def __init__(self, holders, capacity, now):
        self.holders = holders
        self.capacity = capacity
        super().__init__(f"all {capacity} fleet-wide reboot slot(s) are held: "
                         + "; ".join(describe_holder(h, now) for h in holders))


class RolloutStopped(SlotError):
    """A host's reboot or verification failed after this run started; ``record`` is the stop record."""

    def __init__(self, record):
        self.record = record
        super().__init__(describe_stop(record))


class StopFromFuture(SlotError):
    """The stop record is dated ahead of this control host's clock by more than CLOCK_SKEW."""

    def __init__(self, record, now, removal):
        self.record = record
        ahead = record["time"] - now
        super().__init__(
            f"the fleet-wide stop record is dated {utc(record['time'])} by the clock of "
            f"{record.get('controller', '?')}, {ahead:.0f} s ahead of this control host's clock "
            f"({utc(now)}; more than the {CLOCK_SKEW} s two clocks may differ): {describe_stop(record)}. A record "
            "from the future would hold back every run started before that time. Check the clocks of "
            f"{record.get('controller', '?')} and of this control host (timedatectl; chronyc tracking), then, "
            f"once no run of playbooks/host.yml is rebooting a host, remove the record ({removal}) and run again")


# Seconds two control hosts' clocks may differ (Kerberos's default): a stop record dated further ahead than that is
# refused as from the future (StopFromFuture).
CLOCK_SKEW = 300


def utc(moment):
    """Seconds since the epoch as ``2026-11-26T07:00:00Z``."""
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_of(record):
    """The record's expiry (seconds since the epoch), or -inf when it has none (a record of a version without
    leases: expired)."""
    value = record.get("expires") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return -math.inf
    return float(value)


def holder_state(record, now, here, alive=ident.owner_alive):
    """What ``record`` is to the run ``here`` at ``now`` (on the record's clock): FREE, OURS, EXPIRED, GONE or HELD.
    ``alive(record, here)`` says whether its run still runs (True), is gone (False) or cannot be seen (None)."""
    if record is None:
        return FREE
    if record.get("run") and record.get("run") == here.get("run"):
        return OURS
    if expiry_of(record) <= now:
        return EXPIRED
    if alive(record, here) is False:
        return GONE
    return HELD


def describe_holder(record, now):
    """A record's holder in words: the host (for a slot), the run, since when, when its lease runs out."""
    host = f"{record['host']} " if record.get("host") else ""
    expires = expiry_of(record)
    if expires == -math.inf:
        lease = "with no lease (a record of an earlier version)"
    elif expires <= now:
        lease = f"its lease ran out at {utc(expires)}"
    else:
        lease = f"its lease runs until {utc(expires)} ({int(math.ceil(expires - now))} s from now) unless renewed"
    words = f"{ident.describe(record)}, holding it since {record.get('since', '?')}; {lease}"
    return f"{host}({words})" if host else words


def describe_stop(record):
    """A stop record in words: which host failed, when, why."""
    return (f"{record.get('host', '?')} failed at {record.get('since', '?')}: "
            f"{record.get('reason') or 'no reason given'}")


def check_stop(stop, run_started, now=None, removal="remove it"):
    """Raise RolloutStopped when the stop record ``stop`` (or None) was written after ``run_started`` (seconds since
    the epoch): the rollout of a run that started before a failure stops too; a later run is not held back.
    StopFromFuture when the record is dated more than CLOCK_SKEW seconds after ``now`` (this control host's clock;
    ``removal``: how the operator removes the record)."""
    if stop is None or isinstance(stop.get("time"), bool) or not isinstance(stop.get("time"), (int, float)):
        return
    if now is not None and stop["time"] > now + CLOCK_SKEW:
        raise StopFromFuture(stop, now, removal)
    if stop["time"] > run_started:
        raise RolloutStopped(stop)


def decide_wave(slots, wave, capacity, here, now, alive=ident.owner_alive):
    """``{host: (index, outcome, record before)}`` for the hosts of ``wave`` asking together for slots among
    ``capacity``, all or none; raises SlotsFull when the slots that can be had do not cover every host of the wave
    that holds none yet.

    ``slots`` is ``{index: record}`` (each naming its ``host`` and holder, with ``expires``); ``here`` this run's
    identity; ``now`` the slots' clock. outcome is ``ours`` (this run holds slot ``index`` for the host already),
    ``free``, ``expired`` or ``gone`` (holder_state). A live record of another run counts against the capacity
    wherever it is (a run with a larger capacity may hold an index above this one's)."""
    if len(wave) > capacity:
        raise SlotError(f"a wave of {len(wave)} host(s) ({', '.join(wave)}) cannot fit in {capacity} fleet-wide "
                        "reboot slot(s): the wave size and the capacity come from one passthrough_rollout_reboot_batch")
    states = {index: holder_state(record, now, here, alive) for index, record in slots.items()}
    decided = {}
    for index in sorted(slots):
        host = slots[index].get("host")
        if states[index] == OURS and host in wave and host not in decided:
            decided[host] = (index, OURS, slots[index])
    occupied = {index for index, state in states.items() if state in (OURS, HELD)}
    need = [host for host in wave if host not in decided]
    if len(occupied) + len(need) > capacity:
        holders = [slots[i] for i in sorted(occupied) if states[i] == HELD] or [slots[i] for i in sorted(occupied)]
        raise SlotsFull(holders, capacity, now)
    open_slots = [(index, FREE if index not in slots else states[index], slots.get(index))
                  for index in range(capacity) if index not in occupied]
    decided.update(zip(need, open_slots))
    return decided
