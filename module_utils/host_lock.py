# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""One run of the host phase per host at a time: the rules of the host's lock file.

The lock is a file on the host (``/var/lib/open-gpu-cloud/passthrough_host.lock``, beside the state file, so it
survives the reboot the run itself makes) naming its owner: the ansible-playbook run on the control host, identified
by the control host's machine id and boot id, the run's process id and that process's start time (``identity``).
No process on the host lives as long as the run (each task is a module process of its own), so the lock cannot be a
held file descriptor; it is a record whose owner is checked:

* the lock is free (no file), or already ours (the same run: the rollout's second play) - take it;
* its owner ran on this control host and is gone - its pid is not running, runs another program (another start
  time), or the control host rebooted since (another boot id): the lock is stale, and it is taken over;
* otherwise (a live run here, or a run on another control host, whose processes cannot be seen from here) the run
  is refused, naming the other run (who, where, since when) and the fix.

A run releases its lock when it ends on the host (success or failure); a run that was killed leaves it behind, stale
as soon as its process is gone. ``HOST_SCRIPT`` reads and writes the file on the host, under a flock of the lock's
directory (so two runs cannot both take it; a flock dies with its process), writing through a temporary file and a
rename; it is POSIX sh run over the connection as it is, with no module process (a module run costs a host about
0.3 s of CPU, twice per run). ``action_plugins/host_lock.py`` runs it, adds the identity and the liveness check,
which only the control host can make; ``library/host_lock.py`` documents the task.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import multiprocessing
import os
import socket

__all__ = ["LockError", "HOST_SCRIPT", "identity", "run_pid", "process_start", "owner_alive", "describe", "load",
           "dump", "answer"]

FIELDS = ("run", "controller", "user", "pid", "start_time", "boot_id", "machine_id")


class LockError(Exception):
    """A lock file or an owner record this model refuses, worded for the operator."""


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(pid, proc="/proc"):
    """The start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22), or None when no such
    process runs."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[19])  # field 22 counts from 1, with pid and comm before the ")"
    except (IndexError, ValueError):
        return None


def run_pid():
    """The ansible-playbook process of this run, seen from an action plugin: a task runs in a worker process the run
    forked (multiprocessing), whose parent it is; in the run's own process, this process."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None else os.getpid()


def identity(pid, proc="/proc", machine_id_path="/etc/machine-id"):
    """The owner record of the run whose process is ``pid`` (on this machine, the control host)."""
    record = {
        "controller": socket.gethostname(),
        "user": getpass.getuser(),
        "pid": int(pid),
        "start_time": process_start(pid, proc),
        "boot_id": _read(os.path.join(proc, "sys", "kernel", "random", "boot_id")),
        "machine_id": _read(machine_id_path),
    }
    key = json.dumps([record["machine_id"], record["boot_id"], record["pid"], record["start_time"]])
    record["run"] = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return record


def owner_alive(owner, here):
    """Whether the run of the record ``owner`` still runs, seen from the control host whose identity is ``here``:
    True, False (gone: its process ended or was replaced, or this control host rebooted since), or None (it ran on
    another control host: its processes cannot be seen from here)."""
    if not owner.get("machine_id") or owner.get("machine_id") != here.get("machine_id"):
        return None
    if owner.get("boot_id") != here.get("boot_id"):
        return False
    start = process_start(owner.get("pid"))
    return start is not None and start == owner.get("start_time")


def describe(owner):
    """The run of a lock record, in words: who, where, which process, since when."""
    return (f"run {owner.get('run', '?')} of {owner.get('user', '?')} on {owner.get('controller', '?')} "
            f"(ansible-playbook pid {owner.get('pid', '?')}), holding it since {owner.get('since', '?')}")


def load(text, where):
    """The owner record a lock file holds; raises LockError for anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("run"), str) or not data["run"]:
        raise LockError(f"{where} is not a passthrough_host lock (a JSON object naming its run): remove it, after "
                        "checking that no run of the host phase is under way on this host")
    return data


def dump(owner):
    return json.dumps(owner, indent=2, sort_keys=True) + "\n"


# The host's side: sh -c HOST_SCRIPT host_lock LOCK STATE RUN TAKEOVER CHECK OWNER (the new owner record). It prints
# a verdict - ACQUIRED (free, or ours already), TOOK_OVER (it named TAKEOVER), HELD (another run's), RELEASED, KEPT
# (not ours to release), FREE (check mode, no lock) - then the record the lock held before. Records are compared by
# their run id as dump() writes it ("run": "<id>").
HOST_SCRIPT = r"""
set -u
lock=$1 state=$2 run=$3 takeover=$4 check=$5 owner=$6
dir=${lock%/*}
if [ ! -d "$dir" ]; then
  if [ "$check" = 1 ]; then echo FREE; exit 0; fi
  mkdir -p "$dir" || exit 3
fi
exec 9<"$dir" || exit 3
flock 9 || exit 3
current=""
if [ -f "$lock" ]; then current=$(cat "$lock") || exit 3; fi
names() { case "$1" in *"\"run\": \"$2\""*) return 0 ;; esac; return 1; }
if [ "$state" = released ]; then
  if [ -n "$current" ] && names "$current" "$run"; then
    if [ "$check" != 1 ]; then rm -f "$lock" || exit 3; fi
    echo RELEASED
  else
    echo KEPT
  fi
  exit 0
fi
if [ -z "$current" ] || names "$current" "$run"; then verdict=ACQUIRED
elif [ -n "$takeover" ] && names "$current" "$takeover"; then verdict=TOOK_OVER
else printf 'HELD\n%s\n' "$current"; exit 0
fi
if [ "$check" != 1 ] && { [ -z "$current" ] || ! names "$current" "$run"; }; then
  tmp="$dir/.host_lock.$$"
  printf '%s\n' "$owner" > "$tmp" && chmod 644 "$tmp" && mv -f "$tmp" "$lock" || { rm -f "$tmp"; exit 3; }
fi
printf '%s\n%s\n' "$verdict" "$current"
"""


def answer(stdout, where):
    """``(verdict, record before or None)`` from HOST_SCRIPT's output; LockError for a record that is no lock.

    Over SSH with become the script runs on a terminal (Ansible's ``ssh -tt``): its lines end in CR LF, and the line
    break of the become prompt's success marker can be left before the verdict."""
    text = (stdout or "").replace("\r\n", "\n").replace("\r", "\n").lstrip()
    verdict, _, rest = text.partition("\n")
    verdict = verdict.strip()
    if verdict not in ("ACQUIRED", "TOOK_OVER", "HELD", "RELEASED", "KEPT", "FREE"):
        raise LockError(f"the lock {where} could not be read or written on the host: {stdout.strip() or 'no answer'}")
    return verdict, (load(rest, where) if rest.strip() and verdict in ("TOOK_OVER", "HELD") else None)
