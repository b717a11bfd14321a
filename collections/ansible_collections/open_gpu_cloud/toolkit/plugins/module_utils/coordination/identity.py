# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Who a run is: the ansible-playbook process on a control host, named by digests.

A record a run leaves (the GPU host's lock, a reboot slot, the stop record) names its holder by

* ``run``: a digest of the control host's machine id, its boot id, the run's process id and that process's start
  time - unique per run, stable for the whole run (every task of it computes the same);
* ``controller_id``: a digest of the control host's machine id alone (an application-specific id, as systemd's
  ``sd_id128_get_machine_app_specific`` makes one: it tells two records of one control host apart from those of
  another, and cannot be turned back into the machine id);
* ``boot``: a digest of the machine id and the boot id (a control host that rebooted since has another);
* the words an operator reads: the control host's name, the user, the process id and its start time.

The raw machine id and boot id are never written or shown. ``owner_alive`` answers, from the control host, whether
the run of a record still runs: True, False (gone: its process ended or was replaced, or this control host rebooted
since) or None (another control host's run: its processes cannot be seen from here).
"""

from __future__ import annotations

import getpass
import hashlib
import multiprocessing
import os
import socket

__all__ = ["identity", "process_start", "run_pid", "owner_alive", "describe", "digest"]

_APP = b"open-gpu-cloud coordination"


def digest(*parts):
    """16 hex digits of SHA-256 over this application's key and ``parts`` (strings): an id that names without
    revealing what it was made from."""
    data = b"\0".join([_APP] + [str(p).encode("utf-8") for p in parts])
    return hashlib.sha256(data).hexdigest()[:16]


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(pid, proc="/proc"):
    """The start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22), or None when no such
    process runs (a zombie, which has ended and waits only to be reaped, runs no more)."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        if fields[0] in ("Z", "X"):  # field 3: the process state
            return None
        return int(fields[19])  # field 22 counts from 1, with pid and comm before the ")"
    except (IndexError, ValueError):
        return None


def run_pid():
    """The ansible-playbook process of this run, seen from an action plugin: a task runs in a worker process the run
    forked (multiprocessing), whose parent it is; in the run's own process, this process."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None else os.getpid()


def identity(pid, proc="/proc", machine_id_path="/etc/machine-id"):
    """The holder record of the run whose process is ``pid`` on this machine (the control host)."""
    machine = _read(machine_id_path)
    boot = _read(os.path.join(proc, "sys", "kernel", "random", "boot_id"))
    start = process_start(pid, proc)
    return {
        "run": digest("run", machine, boot, int(pid), start),
        "controller": socket.gethostname(),
        "controller_id": digest("machine", machine),
        "boot": digest("boot", machine, boot),
        "user": getpass.getuser(),
        "pid": int(pid),
        "start_time": start,
    }


def owner_alive(owner, here, proc="/proc"):
    """Whether the run of the record ``owner`` still runs, seen from the control host whose identity is ``here``:
    True, False (gone) or None (it ran on another control host, or the record does not say where)."""
    if not owner.get("controller_id") or owner.get("controller_id") != here.get("controller_id"):
        return None
    if owner.get("boot") != here.get("boot"):
        return False
    start = process_start(owner.get("pid"), proc)
    return start is not None and start == owner.get("start_time")


def describe(owner):
    """The run of a record, in words: which run, whose, where, which process."""
    return (f"run {owner.get('run', '?')} of {owner.get('user', '?')} on {owner.get('controller', '?')} "
            f"(ansible-playbook pid {owner.get('pid', '?')})")
