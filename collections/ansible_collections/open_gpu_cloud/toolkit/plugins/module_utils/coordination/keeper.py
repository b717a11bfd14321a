# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The keeper of a run's lease: a process on the control host that renews the lease while the run lives.

Each Ansible task is a process that ends with the task, so a lease taken by one task would run out while later ones
work (the drain, the reboot, the wait for the host). The first task of a run that needs the lease (``ensure``, from
the reboot_slot task) grants it - its id derived from the run, so every task of the run names the same one - and
starts the keeper, in a session of its own, recording its pid and start time in a private directory of the control
host. The keeper then:

* renews the lease every third of its TTL;
* watches the run's ansible-playbook process (its pid and start time): once the run has ended - done, failed,
  interrupted, or killed - it revokes the lease, so what the run held is free at once, and exits;
* on SIGTERM (``stop``: by its pid) revokes the lease and exits;
* when the service cannot be reached, keeps trying every second until the lease would have run out, then exits:
  the lease is lost, and the run's next step (``slots.confirm`` before a reboot) refuses.

If the whole control host dies, the keeper dies with it and nobody renews the lease: it runs out after its TTL and
what the run held is free for every other control host.
"""

from __future__ import annotations

import signal

# Run as the keeper (``python -m`` this module): a stop asked while the imports below load is kept, not lost; the
# keeper revokes its lease and exits.
STOPPING = []
if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: STOPPING.append("SIGTERM"))

import fcntl  # noqa: E402  pylint: disable=wrong-import-position
import json  # noqa: E402  pylint: disable=wrong-import-position
import os  # noqa: E402  pylint: disable=wrong-import-position
import stat  # noqa: E402  pylint: disable=wrong-import-position
import subprocess  # noqa: E402  pylint: disable=wrong-import-position
import sys  # noqa: E402  pylint: disable=wrong-import-position
import tempfile  # noqa: E402  pylint: disable=wrong-import-position
import time  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import (  # noqa: E402
    backend as be, identity as ident)  # pylint: disable=wrong-import-position

__all__ = ["runtime_dir", "pidfile", "running", "ensure", "keep", "stop", "main"]

MARKER = "open-gpu-cloud-keeper"
# This module's import name, also when it runs as the keeper (``python -m`` names it __main__).
MODULE = __spec__.name if __name__ == "__main__" else __name__
# Seconds a new keeper has to start and say it is ready.
START_TIMEOUT = 15


def runtime_dir():
    """This user's private directory for keepers' pid files and logs (0700, created when missing)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = os.path.join(base, f"open-gpu-cloud-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise be.BackendError(f"{path} must be a directory of this user's alone (mode 0700), for the lease keepers' "
                              "pid files: remove it, or set XDG_RUNTIME_DIR to such a directory")
    return path


def pidfile(run):
    return os.path.join(runtime_dir(), f"keeper-{run}.json")


def running(path):
    """The keeper record of ``path`` when its process still runs, else None."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or ident.process_start(record.get("pid")) != record.get("start"):
        return None
    return record


def ensure(url, here, ttl, timeouts=(10, 30), python=None, backend=None):
    """Grant the run's lease and start its keeper, unless a keeper of this run already runs. Returns
    ``(lease, started)``. The grant and the start happen under a flock of the run's pid file, so the hosts of a
    wave asking at once start one keeper."""
    backend = backend or be.open_backend(url, *timeouts)
    lease = be.lease_id_of(here["run"])
    path = pidfile(here["run"])
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "r+") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if running(path):
            return lease, False
        backend.grant(lease, ttl, {k: here.get(k) for k in ("run", "controller", "controller_id", "user", "pid")})
        log_path = path[:-len(".json")] + ".log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [python or sys.executable, "-m", MODULE, MARKER, "--url", url, "--lease", str(lease),
                 "--ttl", str(ttl), "--pid", str(here["pid"]), "--start", str(here["start_time"]),
                 "--pidfile", path, "--connect-timeout", str(timeouts[0]), "--read-timeout", str(timeouts[1])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
                env=_keeper_environment())
        # The keeper writes its pid file once it is ready (its SIGTERM handler in place, its backend open).
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            record = running(path)
            if record is not None and record.get("pid") == proc.pid:
                return lease, True
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        proc.kill()
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            tail = " ".join(handle.read().split()[-60:])
        raise be.BackendError(f"the lease keeper did not start within {START_TIMEOUT} s (its log {log_path}: "
                              f"{tail or 'empty'})")


def _write_pidfile(path, lease, url):
    """The keeper's own record: written once it is ready, removed as it exits."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w",
              encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "start": ident.process_start(os.getpid()), "lease": lease, "url": url},
                  handle)
    os.replace(tmp, path)


def _keeper_environment():
    """The keeper's environment: this one, with the directory holding this collection's ``ansible_collections``
    first on PYTHONPATH, so ``python -m`` finds this module wherever the collection is installed."""
    root = os.path.abspath(__file__)
    for _level in MODULE.split("."):
        root = os.path.dirname(root)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def stop(run, wait=10.0):
    """Stop the keeper of run ``run`` by its pid (it revokes the lease as it goes); True when one was running."""
    path = pidfile(run)
    record = running(path)
    if record is None:
        return False
    os.kill(record["pid"], signal.SIGTERM)
    deadline = time.time() + wait
    while time.time() < deadline and ident.process_start(record["pid"]) == record["start"]:
        time.sleep(0.05)
    return True


def keep(backend, lease, ttl, run_pid, run_start, path, clock=time.monotonic, sleep=time.sleep, log=None,
         stopping=()):
    """The keeper's loop (see the module's docstring); returns its exit status. ``stopping`` becomes true when the
    keeper is asked to stop (main's SIGTERM handler appends to it). ``log``: where its lines go (its log file)."""
    log = log or _log_line
    interval = max(1.0, ttl / 3.0)
    last_ok = clock()
    renew_at = last_ok + interval

    def finish(status, why):
        log(f"keeper of lease {lease}: {why}")
        if status == 0:
            try:
                backend.revoke(lease)
            except be.BackendError as exc:
                log(f"keeper of lease {lease}: could not revoke it ({exc}); it runs out by itself")
        try:
            os.unlink(path)
        except OSError:
            pass
        return status

    while True:
        if stopping:
            return finish(0, "stopped by SIGTERM: lease revoked")
        if ident.process_start(run_pid) != run_start:
            return finish(0, f"the run (pid {run_pid}) has ended: lease revoked")
        now = clock()
        if now >= renew_at:
            try:
                left = backend.keepalive(lease)
            except be.BackendError as exc:
                if now - last_ok >= ttl:
                    return finish(1, f"the service could not be reached for {ttl} s: the lease is lost ({exc})")
                renew_at = now + 1.0
                continue
            if left <= 0:
                return finish(1, "the lease ran out or was revoked: nothing left to keep")
            last_ok, renew_at = now, now + interval
        sleep(min(0.5, max(0.05, renew_at - clock())))


def _log_line(text):
    """A line of the keeper's log (its standard output, which ``ensure`` points at the log file), with the time."""
    sys.stdout.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")
    sys.stdout.flush()


def main(argv, stopping=None):
    """The keeper's command line (``python -m`` this module): MARKER --url URL --lease ID --ttl S --pid P --start T
    --pidfile PATH --connect-timeout S --read-timeout S. ``stopping``: the list a SIGTERM handler installed first
    thing appends to (one is installed here otherwise)."""
    args = dict(zip(argv[1::2], argv[2::2])) if argv and argv[0] == MARKER else {}
    try:
        backend = be.open_backend(args["--url"], float(args["--connect-timeout"]), float(args["--read-timeout"]))
        lease, ttl = int(args["--lease"]), float(args["--ttl"])
        run_pid, run_start = int(args["--pid"]), int(args["--start"])
        path = args["--pidfile"]
    except (KeyError, ValueError, be.BackendError) as exc:
        sys.stderr.write(f"usage: python -m {MODULE} {MARKER} --url URL --lease ID --ttl S --pid P --start T "
                         f"--pidfile PATH --connect-timeout S --read-timeout S ({exc})\n")
        return 2
    if stopping is None:
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM"))
    _write_pidfile(path, lease, backend.shown)
    return keep(backend, lease, ttl, run_pid, run_start, path, stopping=stopping,
                log=_log_line)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], STOPPING))
