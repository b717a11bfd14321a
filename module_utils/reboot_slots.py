# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Fleet-wide reboot slots: how many GPU hosts may be down at once across every run of playbooks/host.yml.

AWX job slicing runs the playbook on N slices of the inventory in parallel; each slice plans its own waves and
knows nothing of the others. The slots are a counting semaphore in one directory on the control host (on shared
storage beside the plan directory when the slices run on several AWX nodes), so the slices together never reboot
more hosts at once than one wave of the whole fleet:

* ``slot-<i>`` (i in 0..capacity-1): a host rebooting now. Its content is JSON: the host, since when, and the run
  holding it (``host_lock.identity()``: control host, user, ansible-playbook pid and start time, boot id, machine
  id). A slot appears with its whole content or not at all: it is written to a temporary file and linked into
  place (link(2) fails with EEXIST as O_CREAT|O_EXCL does, and a reader never sees a half-written slot).
* ``stopped.json``: the record of a host whose reboot or verification failed (host, reason, time). A run that
  started before it was written gets no slot (the slices stop together); a run started after it (the operator's
  run once the cause is fixed) is not blocked by it, so nothing is cleaned up by hand.

``acquire`` gives a host the slot it holds already (a re-run after a crash), else a free index, else the slot of a
run that is gone on this control host (``host_lock.owner_alive`` is False: taken over); otherwise it raises
SlotsFull naming the holders. A wave takes its slots all at once, or none (``decide_wave``). Every read and write happens under a flock of ``<dir>/.lock``, so two runs cannot
take the same slot; the O_EXCL-like link is the second guard. ``decide`` is the pure rule; check mode asks it the
same question and writes nothing.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import tempfile

from ansible.module_utils import host_lock as hl

__all__ = ["SlotError", "SlotsFull", "RolloutStopped", "BadRecord", "STOP_FILE", "decide", "read_slots",
           "read_stop", "decide_wave", "acquire", "release", "stop", "describe_holder", "describe_stop"]

STOP_FILE = "stopped.json"
_PREFIX = "slot-"
_LOCK = ".lock"


class SlotError(Exception):
    """A refusal of the slots, worded for the operator."""


class SlotsFull(SlotError):
    """Every slot is held by a live run (or one on another control host); ``holders`` lists their records."""

    def __init__(self, holders, capacity):
        self.holders = holders
        self.capacity = capacity
        super().__init__(f"all {capacity} fleet-wide reboot slot(s) are held: "
                         + "; ".join(describe_holder(h) for h in holders))


class RolloutStopped(SlotError):
    """A host's reboot or verification failed after this run started; ``record`` is stopped.json."""

    def __init__(self, record):
        self.record = record
        super().__init__(describe_stop(record))


class BadRecord(SlotError):
    """A file in the slot directory that is not a slot or stop record."""


def _utc(moment):
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_holder(record):
    """A slot's holder in words: the host, the run, since when."""
    return f"{record.get('host', '?')} ({hl.describe(record)})"


def describe_stop(record):
    """A stop record in words: which host failed, when, why."""
    return (f"{record.get('host', '?')} failed at {record.get('since', '?')}: "
            f"{record.get('reason') or 'no reason given'}")


def _load(path):
    """The JSON object in ``path``, None when it is missing; BadRecord for anything else."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("host"), str):
        raise BadRecord(f"{path} is not a reboot slot record (a JSON object naming its host): remove it, after "
                        "checking that no run of playbooks/host.yml is rebooting that host")
    return data


def read_slots(directory):
    """{index: record} of the slots in ``directory`` (empty when it does not exist)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    slots = {}
    for name in names:
        if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
            record = _load(os.path.join(directory, name))
            if record is not None:
                slots[int(name[len(_PREFIX):])] = record
    return slots


def read_stop(directory):
    """The stop record, or None."""
    record = _load(os.path.join(directory, STOP_FILE))
    if record is not None and not isinstance(record.get("time"), (int, float)):
        raise BadRecord(f"{os.path.join(directory, STOP_FILE)} has no time: remove it once the failed host is fixed")
    return record


def decide(slots, host, capacity, here, alive=hl.owner_alive):
    """The pure rule for one host: ``(index, outcome, record before)``; ``decide_wave`` for a wave of one."""
    return decide_wave(slots, [host], capacity, here, alive)[host]


def decide_wave(slots, wave, capacity, here, alive=hl.owner_alive):
    """The pure rule: ``{host: (index, outcome, record before)}`` for the hosts of ``wave`` asking together for
    slots among ``capacity``, all or none.

    outcome is ``held`` (the host holds slot ``index`` already), ``free`` (a free index), ``stale`` (slot ``index``
    belongs to a run that is gone on this control host). Raises SlotsFull when the slots free now do not cover every
    host of the wave that holds none. All or none: under Ansible's linear strategy a wave's hosts take their slots in
    one task and go on together, so two runs whose waves each got part of what they need would wait on each other
    until the timeout. ``slots`` is {index: record}; ``here`` is this run's identity; ``alive(record, here)`` tells
    whether a holder's run still runs (True), is gone (False) or cannot be seen from here (None)."""
    if len(wave) > capacity:
        raise SlotError(f"a wave of {len(wave)} host(s) ({', '.join(wave)}) cannot fit in {capacity} fleet-wide "
                        "reboot slot(s): the wave size and the capacity come from one passthrough_host_reboot_batch")
    held = {record.get("host"): (index, record) for index, record in sorted(slots.items())}
    decided = {h: (held[h][0], "held", held[h][1]) for h in wave if h in held}
    # Gone holders free their slot; those above the capacity (a run with a larger wave) still count while alive.
    live = {i: r for i, r in slots.items() if r.get("run") == here.get("run") or alive(r, here) is not False}
    occupied = set(live) | {index for index, _outcome, _record in decided.values()}
    need = [h for h in wave if h not in decided]
    if len(occupied) + len(need) > capacity:
        raise SlotsFull([live[i] for i in sorted(live)], capacity)
    open_slots = [(i, "free", None) for i in range(capacity) if i not in slots]
    open_slots += [(i, "stale", slots[i]) for i in range(capacity) if i in slots and i not in occupied]
    decided.update(zip(need, open_slots))
    return decided


class _Locked:
    """A flock of ``<directory>/.lock`` for the life of a with-block. ``create``: make the directory when missing;
    ``lock`` false (check mode): no lock and no lock file, only reads follow."""

    def __init__(self, directory, create, lock=True):
        self.directory = directory
        self.create = create
        self.lock = lock
        self.handle = None

    def __enter__(self):
        if not self.lock:
            return self
        if not os.path.isdir(self.directory):
            if not self.create:
                return self
            os.makedirs(self.directory, mode=0o755, exist_ok=True)
        # Held open past this method: the with-block's life is the flock's. pylint: disable-next=consider-using-with
        self.handle = open(os.path.join(self.directory, _LOCK), "a", encoding="utf-8")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.handle is not None:
            self.handle.close()  # closing drops the flock


def _write_temp(directory, record):
    """A temporary file in ``directory`` holding ``record``; its path."""
    fd, tmp = tempfile.mkstemp(prefix=".slot.", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    return tmp


def _take(directory, index, record, replace):
    """Put ``record`` into slot ``index``: a new slot exclusively (EEXIST: taken meanwhile), a stale one by rename."""
    tmp = _write_temp(directory, record)
    path = os.path.join(directory, f"{_PREFIX}{index}")
    try:
        if replace:
            os.replace(tmp, path)
            return
        os.link(tmp, path)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise SlotError(f"{path} was taken by another run at the same moment: its flock did not hold "
                            "(a shared file system without locks?)") from exc
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def acquire(directory, host, capacity, here, run_started, now, check=False, alive=hl.owner_alive, wave=None):
    """Take a slot for ``host``, and with it for every other host of its ``wave`` (all or none, ``decide_wave``):
    the first host of a wave to ask takes the wave's slots, the others find theirs held. Returns ``host``'s
    ``(index, outcome, record before)``.

    Raises RolloutStopped when stopped.json is newer than ``run_started`` (seconds since the epoch), SlotsFull when
    the free slots do not cover the wave. ``now`` (seconds since the epoch) goes into the records; check mode
    writes nothing."""
    wave = [host] + [h for h in (wave or []) if h != host]
    with _Locked(directory, create=True, lock=not check):
        stop_record = read_stop(directory)
        if stop_record is not None and stop_record["time"] > run_started:
            raise RolloutStopped(stop_record)
        decided = decide_wave(read_slots(directory), wave, capacity, here, alive)
        for member, (index, outcome, before) in decided.items():
            # A slot the host holds is kept; its record names this run when it was another (a re-run after a crash).
            if not check and (outcome != "held" or before.get("run") != here.get("run")):
                _take(directory, index, dict(here, host=member, since=_utc(now), time=now),
                      replace=outcome != "free")
        return decided[host]


def release(directory, host, check=False):
    """Remove the slots ``host`` holds; returns their indexes (empty when it holds none)."""
    with _Locked(directory, create=False, lock=not check):
        held = sorted(i for i, r in read_slots(directory).items() if r.get("host") == host)
        if not check:
            for index in held:
                os.unlink(os.path.join(directory, f"{_PREFIX}{index}"))
        return held


def stop(directory, host, reason, now, here, check=False):
    """Write the stop record (the newest failure replaces an older one); returns it."""
    record = dict(here, host=host, reason=reason, since=_utc(now), time=now)
    if check:
        return record
    with _Locked(directory, create=True):
        os.replace(_write_temp(directory, record), os.path.join(directory, STOP_FILE))
    return record
