# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""One run of the host phase per GPU host at a time: the lock file on the host, held under a lease.

The lock is a file on the host (``/var/lib/open-gpu-cloud/passthrough_host.lock``, mode 0600, beside the state file,
so it survives the reboot the run itself makes) naming its holder (``identity``: digests, never the control host's
raw machine id) and carrying ``expires``: seconds since the epoch on the host's own clock, so every control host
judges it by one clock. The run renews it before each step that may take long (each tool, the reboot and the wait
for the host, each wave of the rollout), for that step's own timeout plus the lease (``passthrough_host_lock_lease``),
and gives it back when its run on the host ends. The rules are ``leases.holder_state``'s:

* free, or already this run's: taken (renewed);
* its lease ran out: taken over, from any control host;
* its run is gone from this control host (the process ended, or this control host rebooted): taken over at once;
* otherwise refused, naming the holder and when its lease runs out.

``HOST_SCRIPT`` reads and writes the file on the host under a flock of its directory (so two runs cannot both take
it), through a temporary file and a rename, in POSIX sh over the connection (no module process). It takes a free or
own lock itself and otherwise prints the record with the host's time; the rules above are decided here, on the
control host, and a takeover is written only if the record is still the one that was judged (its ``cksum``). It also
refuses a lock or state path that is a directory or a symbolic link, before anything is written.
"""

from __future__ import annotations

import json

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases

__all__ = ["LockError", "HOST_SCRIPT", "load", "dump", "answer", "record", "exchange", "describe", "VERDICTS",
           "EXPIRES"]

EXPIRES = "@EXPIRES@"
VERDICTS = ("ACQUIRED", "RENEWED", "TOOK_OVER", "HELD", "LOST", "RELEASED", "KEPT", "FREE", "BADPATH")


class LockError(leases.LeaseError):
    """A lock file or an answer this model refuses, worded for the operator."""


def record(here, since):
    """The lock record of the run ``here`` (its expiry is filled in on the host)."""
    return dict({key: here.get(key) for key in ("run", "controller", "controller_id", "boot", "user", "pid",
                                                "start_time")}, since=since, expires=EXPIRES)


def dump(owner):
    """The record as the lock file holds it; ``EXPIRES`` stands unquoted where the host writes its expiry."""
    return json.dumps(owner, indent=2, sort_keys=True).replace(f'"{EXPIRES}"', EXPIRES) + "\n"


def load(text, where):
    """The record a lock file holds; LockError for anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("run"), str) or not data["run"]:
        raise LockError(f"{where} is not a passthrough_host lock (a JSON object naming its run): remove it, after "
                        "checking that no run of the host phase is under way on this host")
    return data


# sh -c HOST_SCRIPT host_lock LOCK STATE OP RUN EXPECT SECONDS CHECK OWNER
#   OP: take | renew | release. EXPECT: the cksum of the record a takeover replaces (empty: none). SECONDS: the
#   lease, from now on the host's clock. OWNER: the new record (dump()), EXPIRES standing for the expiry.
# Prints the verdict (VERDICTS; BADPATH with the variable's role: lock or state), then "NOW <host time> <cksum of
# the record before>", then the record before (for HELD, LOST and TOOK_OVER).
HOST_SCRIPT = r"""
set -u
lock=$1 state=$2 op=$3 run=$4 expect=$5 seconds=$6 check=$7 owner=$8
umask 077
for path in "$lock" "$state"; do
  if [ -L "$path" ] || [ -d "$path" ]; then
    if [ "$path" = "$lock" ]; then echo "BADPATH lock"; else echo "BADPATH state"; fi
    if [ -L "$path" ]; then echo "symlink"; else echo "directory"; fi
    exit 0
  fi
done
dir=${lock%/*}
now=$(date +%s) || exit 3
if [ ! -d "$dir" ]; then
  if [ "$check" = 1 ] || [ "$op" != take ]; then
    if [ "$op" = take ]; then echo FREE; elif [ "$op" = renew ]; then echo LOST; else echo KEPT; fi
    echo "NOW $now -"
    exit 0
  fi
  mkdir -p "$dir" || exit 3
fi
exec 9<"$dir" || exit 3
flock 9 || exit 3
current=""
if [ -f "$lock" ]; then current=$(cat "$lock") || exit 3; fi
sum=-
if [ -n "$current" ]; then sum=$(printf '%s\n' "$current" | cksum | tr ' ' _); fi
case "$current" in *"\"run\": \"$run\""*) ours=1 ;; *) ours=0 ;; esac
say() { printf '%s\nNOW %s %s\n' "$1" "$now" "$sum"; if [ -n "$current" ]; then printf '%s\n' "$current"; fi; }
write() {
  if [ "$check" = 1 ]; then return 0; fi
  tmp="$dir/.host_lock.$$"
  case "$owner" in
    *@EXPIRES@*) new="${owner%%@EXPIRES@*}$((now + seconds))${owner#*@EXPIRES@}" ;;
    *) new=$owner ;;
  esac
  printf '%s' "$new" > "$tmp" && mv -f "$tmp" "$lock" || { rm -f "$tmp"; exit 3; }
}
if [ "$op" = release ]; then
  if [ "$ours" = 1 ]; then
    if [ "$check" != 1 ]; then rm -f "$lock" || exit 3; fi
    say RELEASED
  else
    say KEPT
  fi
  exit 0
fi
if [ "$ours" = 1 ]; then write; say RENEWED; exit 0; fi
if [ "$op" = renew ]; then say LOST; exit 0; fi
if [ -z "$current" ]; then
  write
  if [ "$check" = 1 ]; then say FREE; else say ACQUIRED; fi
  exit 0
fi
if [ -n "$expect" ] && [ "$expect" = "$sum" ]; then write; say TOOK_OVER; exit 0; fi
say HELD
"""


def answer(stdout, where):
    """``(verdict, host time, cksum, record before or None, detail)`` from HOST_SCRIPT's output; LockError for a
    record that is no lock, or an answer that is none.

    Over SSH with become the script runs on a terminal (Ansible's ``ssh -tt``): its lines end in CR LF, and the line
    break of the become prompt's success marker can be left before the verdict."""
    text = (stdout or "").replace("\r\n", "\n").replace("\r", "\n").lstrip()
    lines = text.split("\n")
    head = lines[0].strip().split()
    verdict = head[0] if head else ""
    if verdict not in VERDICTS:
        raise LockError(f"the lock {where} could not be read or written on the host: {stdout.strip() or 'no answer'}")
    if verdict == "BADPATH":
        return verdict, None, None, None, f"{head[1] if len(head) > 1 else '?'} {lines[1].strip() if len(lines) > 1 else ''}"
    now_line = lines[1].split() if len(lines) > 1 else []
    if len(now_line) != 3 or now_line[0] != "NOW" or not now_line[1].isdigit():
        raise LockError(f"the lock {where} could not be read on the host: {stdout.strip()}")
    rest = "\n".join(lines[2:]).strip()
    before = load(rest, where) if rest and verdict in ("HELD", "LOST", "TOOK_OVER", "RENEWED") else None
    return verdict, int(now_line[1]), now_line[2], before, None


def exchange(call, here, alive=ident.owner_alive):
    """One operation on the lock: ``call(expect)`` runs HOST_SCRIPT on the host and returns ``answer()``'s tuple.
    A record another run holds is judged by the lease rules (leases.holder_state, the host's time); one whose lease
    ran out or whose run is gone is taken over - written only if it is still the record judged (its cksum). Returns
    ``(verdict, host time, record before, its standing, detail)``."""
    verdict, now, total, before, detail = call("")
    standing = None
    if verdict == "HELD":
        standing = leases.holder_state(before, now, here, alive)
        if standing in (leases.EXPIRED, leases.GONE):
            verdict, now, _total, before, detail = call(total)
            if verdict == "HELD":  # renewed or replaced meanwhile: judged again, never taken
                standing = leases.holder_state(before, now, here, alive)
    return verdict, now, before, standing, detail


def describe(owner, now):
    """The holder of a lock in words, with its lease (the host's clock)."""
    return leases.describe_holder(owner, now)
