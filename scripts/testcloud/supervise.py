#!/usr/bin/env python3
"""Run one test cloud server and every process it starts, and stop them all: on SIGTERM or after a lifetime.

    supervise.py LIFETIME GRACE -- COMMAND [ARG...]

coreutils ``timeout`` signals its child and its own process group only, and exits as soon as its child does.
A server that forks workers into a session of their own escapes both: oslo.service's threading backend
(cotyledon, nova-scheduler and nova-conductor in 2026.1) calls setsid() in its master process, whose
``ServiceWrapper worker(N)`` children then outlive a master that exits first. This supervisor is a child
subreaper (prctl PR_SET_CHILD_SUBREAPER): every process started below it stays its descendant, even one
whose parent died (the kernel re-parents orphans to it, not to init), whatever session or group it made.

On SIGTERM (``testcloud.sh stop``), SIGINT, or when LIFETIME seconds have passed, it sends SIGTERM to every
descendant, then SIGKILL to those still there after GRACE seconds, and exits when none is left. When the
command exits by itself, the descendants it left behind are stopped the same way. Exit status: the command's,
or 124 when the lifetime ended it (as ``timeout`` does). Linux only (/proc, prctl).
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
LIFETIME_EXPIRED = 124


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def descendants(root):
    """PIDs of every live process below ROOT, from /proc (parent links)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def reap():
    """Collect every exited child (orphans re-parented here included); {pid: status}."""
    done = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def signal_all(sig):
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_all(grace):
    """SIGTERM every descendant, SIGKILL what is left after GRACE seconds; returns once none is left."""
    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants(os.getpid()):
        reap()
        if time.monotonic() > deadline:
            signal_all(signal.SIGKILL)
        time.sleep(0.1)
    reap()


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__.split("\n\n", 2)[1], file=sys.stderr)
        return 2
    lifetime, grace, command = float(argv[0]), float(argv[1]), argv[3:]
    become_subreaper()
    asked = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: asked.append(signum))
    child = subprocess.Popen(command)  # pylint: disable=consider-using-with
    deadline = time.monotonic() + lifetime
    status = None
    while status is None and not asked and time.monotonic() < deadline:
        time.sleep(0.2)
        status = reap().get(child.pid)
    if status is None:
        stop_all(grace)
        return LIFETIME_EXPIRED if not asked else 128 + asked[0]
    stop_all(grace)  # what the command left behind
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
