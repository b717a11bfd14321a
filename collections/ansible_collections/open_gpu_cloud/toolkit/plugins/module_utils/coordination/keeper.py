# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The keeper of a run's lease: a process on the control host that renews the lease while the run lives.

Each Ansible task is a process that ends with the task, so a lease taken by one task would run out while later ones
work (the drain, the reboot, the wait for the host). The first task of a run that needs the lease (``ensure``, from
the reboot_slot task) grants it - its id derived from the run, so every task of the run names the same one - and
starts the keeper, in a session of its own, recording its pid and start time in a private directory of the control
host. The keeper then:

* renews the lease every third of its TTL, the first time a third of the TTL after the grant (at once when its own
  start took longer; the task that started it renews the lease itself until it is ready);
* watches the run's ansible-playbook process (its pid and start time): once the run has ended - done, failed,
  interrupted, or killed - it revokes the lease, so what the run held is free at once, and exits;
* on SIGTERM (``stop``: by its pid) revokes the lease and exits;
* when the service cannot be reached, keeps trying every second until the lease would have run out, then exits:
  the lease is lost, and the run's next step (``slots.confirm`` before a reboot) refuses.

It removes its files as it ends with its run (its pid file, its log, the run's lock file); what a killed keeper
leaves, or the log of one that lost its lease, is removed by the next run on this control host once the run is gone
(``sweep``). The files live in a directory of this user's alone (``runtime_dir``).

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
import getpass  # noqa: E402  pylint: disable=wrong-import-position
import json  # noqa: E402  pylint: disable=wrong-import-position
import os  # noqa: E402  pylint: disable=wrong-import-position
import re  # noqa: E402  pylint: disable=wrong-import-position
import stat  # noqa: E402  pylint: disable=wrong-import-position
import subprocess  # noqa: E402  pylint: disable=wrong-import-position
import sys  # noqa: E402  pylint: disable=wrong-import-position
import tempfile  # noqa: E402  pylint: disable=wrong-import-position
import time  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import (  # noqa: E402
    locations)  # pylint: disable=wrong-import-position
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import (  # noqa: E402
    backend as be, identity as ident)  # pylint: disable=wrong-import-position

__all__ = ["runtime_dir", "pidfile", "log_path", "running", "sweep", "ensure", "keep", "stop", "main", "load"]

MARKER = "open-gpu-cloud-keeper"
# This module's import name, also when it runs as the keeper (``python -m`` names it __main__).
MODULE = __spec__.name if __name__ == "__main__" else __name__
# Seconds a new keeper has by default to start and say it is ready (passthrough_rollout_keeper_start_timeout). The
# lease cannot run out meanwhile: the task starting it renews the lease itself every third of its TTL until the
# keeper is ready, so this bounds only how long a control host may take to start a Python process.
START_TIMEOUT = 60
# The variable that sets it, named where a keeper misses it.
START_VARIABLE = "passthrough_rollout_keeper_start_timeout"
TTL_VARIABLE = "passthrough_rollout_lease_ttl"
# Seconds the keeper at its end waits for the run's flock before it removes the run's lock file (it is left for the
# next run to remove when some task of the run holds it that long).
CLEANUP_WAIT = 5.0
_NAME = re.compile(r"^keeper-([0-9a-f]{16})\.")


def _private(path):
    """Whether ``path`` is a directory of this user's alone (not a link, mode without group or other bits)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not stat.S_IMODE(info.st_mode) & 0o077


def _made_private(path):
    """``path`` made (0700) when missing; whether it is then a directory of this user's alone."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    return _private(path)


def runtime_dir():
    """This user's private directory for the keepers' pid, lock and log files (0700, created when missing):

    * ``$XDG_RUNTIME_DIR/open-gpu-cloud-<uid>`` when XDG_RUNTIME_DIR is set (systemd's /run/user/<uid>); refused
      when another user could write it;
    * else ``<tmp>/open-gpu-cloud-<uid>``, unless another user made that name first (any local user can, in /tmp):
      then ``~/.ansible/open-gpu-cloud-keepers-<control host digest>``, under the home that only this user owns (where
      Ansible keeps its own local temporary files), so a name taken in /tmp stops no rollout.
    """
    name = f"open-gpu-cloud-{os.geteuid()}"
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        problem = locations.foreign_write_problem(base, "XDG_RUNTIME_DIR")
        path = os.path.join(base, name)
        if problem is None and not _made_private(path):
            problem = locations.foreign_write_problem(path, "the keepers' runtime directory", ancestors=False) or (
                f"the keepers' runtime directory {path} is not a directory of {getpass.getuser()}'s with mode 0700")
        if problem:
            raise be.BackendError(f"{problem}. The lease keepers' pid files live there: fix it, or unset "
                                  "XDG_RUNTIME_DIR")
        return path
    shared = os.path.join(tempfile.gettempdir(), name)
    if _made_private(shared) and locations.foreign_write_problem(shared, "") is None:
        return shared  # (a TMPDIR whose directories above are open to others without the sticky bit is not used)
    home = os.path.join(os.path.expanduser("~"), ".ansible")
    path = os.path.join(home, f"open-gpu-cloud-keepers-{ident.identity(os.getpid())['controller_id']}")
    problem = locations.foreign_write_problem(home, "the home's Ansible directory")
    if problem is None:
        os.makedirs(home, 0o700, exist_ok=True)
        if _made_private(path):
            return path
        problem = f"{path} is not a directory of {getpass.getuser()}'s alone (mode 0700)"
    taken = locations.foreign_write_problem(shared, "the keepers' runtime directory", ancestors=False) or (
        f"{shared} is not a directory of {getpass.getuser()}'s alone (mode 0700)")
    raise be.BackendError(f"no private directory for the lease keepers' pid files: {taken}; and {problem}. Set "
                          "XDG_RUNTIME_DIR to a directory of this user's alone (mode 0700, e.g. /run/user/"
                          f"{os.geteuid()}), or remove {shared} (made by another user) and run again")


def pidfile(run):
    return os.path.join(runtime_dir(), f"keeper-{run}.json")


def log_path(run):
    """The keeper's log of run ``run`` (kept after a keeper that lost its lease, until the next run's sweep)."""
    return os.path.join(runtime_dir(), f"keeper-{run}.log")


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


def _lock(path, wait, blocking=True):
    """The run's lock file ``path`` opened and flocked (created when missing): its handle, or None when it could not
    be had within ``wait`` seconds (at once, when not ``blocking``). A lock file removed while this waited for it
    (the run's keeper or the next run's sweep removes it under the flock) is opened again, so two tasks never hold
    two lock files of one run."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            return None
        handle = os.fdopen(fd, "r+")
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not blocking or time.monotonic() >= deadline:
                    handle.close()
                    return None
                time.sleep(0.02)
        try:
            if os.lstat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()
        if time.monotonic() >= deadline:
            return None


def _run_files(directory, run):
    """The names of run ``run``'s files in ``directory``: pid file, its temporary files, log; the lock last."""
    names = sorted(n for n in os.listdir(directory) if n.startswith(f"keeper-{run}.") and not n.endswith(".lock"))
    return names + [f"keeper-{run}.json.lock"]


def _remove(directory, names):
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass


def _run_gone(record, here):
    """Whether the run that a lock file's ``record`` names has ended (seen from the control host ``here``); None
    when it ran on another control host (a home shared between control hosts): not for this one to judge."""
    if not isinstance(record, dict) or not record.get("controller_id"):
        return True
    if record.get("controller_id") != here.get("controller_id"):
        return None
    if record.get("boot") != here.get("boot"):
        return True
    return ident.process_start(record.get("pid")) != record.get("start_time")


def sweep(here, directory=None):
    """Remove the files that keepers of ended runs left in the runtime directory (a keeper killed with its run, a
    keeper that lost its lease): those of every run of this control host whose keeper does not run, whose lock no task
    holds, and whose ansible-playbook process is gone. Returns the runs whose files were removed."""
    directory = directory or runtime_dir()
    removed = []
    runs = {match.group(1) for match in map(_NAME.match, os.listdir(directory)) if match}
    for run in sorted(runs - {here.get("run")}):
        if running(os.path.join(directory, f"keeper-{run}.json")):
            continue
        lock = os.path.join(directory, f"keeper-{run}.json.lock")
        if not os.path.exists(lock):
            _remove(directory, _run_files(directory, run)[:-1])
            removed.append(run)
            continue
        handle = _lock(lock, 0, blocking=False)
        if handle is None:
            continue  # a task of that run holds it: the run lives
        with handle:
            try:
                record = json.loads(handle.read() or "null")
            except ValueError:
                record = None
            if _run_gone(record, here) and not running(os.path.join(directory, f"keeper-{run}.json")):
                _remove(directory, _run_files(directory, run))
                removed.append(run)
    return removed


def ensure(url, here, ttl, timeouts=(10, 30), python=None, backend=None, start_timeout=START_TIMEOUT,
           clock=time.monotonic):
    """Grant the run's lease and start its keeper, unless a keeper of this run already runs. Returns
    ``(lease, started)``. The grant and the start happen under a flock of the run's lock file, so the hosts of a
    wave asking at once start one keeper; the files of ended runs are swept first (``sweep``).

    While the new keeper starts, this renews the lease itself every third of ``ttl`` (counted from the grant), so a
    start slowed by a loaded control host never lets the lease run out; a keeper not ready within ``start_timeout``
    seconds is killed, the lease revoked, and the refusal names the bound, the time measured, the load and the fix."""
    backend = backend or be.open_backend(url, *timeouts)
    lease = be.lease_id_of(here["run"])
    path = pidfile(here["run"])
    guard = _lock(path + ".lock", start_timeout + 10)
    if guard is None:
        raise be.BackendError(
            f"the lease keeper's lock {path}.lock was not free within {start_timeout + 10} s ({START_VARIABLE} plus "
            f"10 s): another task of this run is starting its keeper on a control host too loaded to do it in time "
            f"(load average {load()}). Raise {START_VARIABLE}, or run fewer jobs at once on this control host")
    with guard:
        if running(path):
            return lease, False
        sweep(here, os.path.dirname(path))
        guard.seek(0)
        guard.truncate()
        guard.write(json.dumps({k: here.get(k) for k in ("run", "controller_id", "boot", "pid", "start_time")}))
        guard.flush()
        granted_wall, granted = time.time(), clock()
        backend.grant(lease, ttl, {k: here.get(k) for k in ("run", "controller", "controller_id", "user", "pid")})
        log_file = path[:-len(".json")] + ".log"
        with open(os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600), "ab") as log:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [python or sys.executable, "-m", MODULE, MARKER, "--url", url, "--lease", str(lease),
                 "--ttl", str(ttl), "--pid", str(here["pid"]), "--start", str(here["start_time"]),
                 "--pidfile", path, "--connect-timeout", str(timeouts[0]), "--read-timeout", str(timeouts[1]),
                 "--granted", repr(granted_wall)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
                env=_keeper_environment())
        # The keeper writes its pid file once it is ready (its SIGTERM handler in place, its backend open).
        interval = max(1.0, ttl / 3.0)
        renew_at, renewed = granted + interval, []
        while clock() - granted < start_timeout:
            record = running(path)
            if record is not None and record.get("pid") == proc.pid:
                return lease, True
            if proc.poll() is not None:
                break
            if clock() >= renew_at:
                backend.keepalive(lease)  # the keeper is late: keep its lease meanwhile
                renewed.append(round(clock() - granted, 1))
                renew_at = clock() + interval
            time.sleep(0.02)
        measured = clock() - granted
        exited = proc.poll()
        proc.kill()
        proc.wait(10)
        try:
            backend.revoke(lease)
        except be.BackendError:
            pass  # it runs out by itself, after the TTL
        with open(log_file, encoding="utf-8", errors="replace") as handle:
            tail = " ".join(handle.read().split()[-60:])
        _remove(os.path.dirname(path), [os.path.basename(log_file)])
        if exited is not None:
            raise be.BackendError(f"the lease keeper exited ({exited}) {measured:.1f} s after it was started, before "
                                  f"it was ready: {tail or 'it said nothing'}")
        kept = f"; this task renewed the lease meanwhile at {renewed} s" if renewed else ""
        raise be.BackendError(
            f"the lease keeper was not ready within {start_timeout} s ({START_VARIABLE}): {measured:.1f} s measured "
            f"since the lease was granted, on a control host with load average {load()} over {os.cpu_count()} "
            f"CPU(s){kept}; the lease is revoked and nothing was taken. Raise {START_VARIABLE} (or run fewer jobs at "
            f"once on this control host), then run playbooks/host.yml again. Its output: {tail or 'empty'}")


def load():
    """The control host's load average (1, 5, 15 minutes), as words for a message."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


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


def _clean_up(path):
    """The keeper's files removed as it ends with its run: its pid file, its log, and the run's lock file - the lock
    last, under its flock (a task of the run that still holds it keeps it; the next run's sweep removes it)."""
    directory, base = os.path.split(path)
    stem = base[:-len(".json")] if base.endswith(".json") else base
    handle = _lock(path + ".lock", CLEANUP_WAIT)
    if handle is None:
        _remove(directory, [base, stem + ".log"])
        return
    with handle:
        _remove(directory, [base, stem + ".log", base + ".lock"])


def keep(backend, lease, ttl, run_pid, run_start, path, clock=time.monotonic, sleep=time.sleep, log=None,
         stopping=(), granted_age=0.0):
    """The keeper's loop (see the module's docstring); returns its exit status. ``stopping`` becomes true when the
    keeper is asked to stop (main's SIGTERM handler appends to it). ``log``: where its lines go (its log file).
    ``granted_age``: seconds since the lease was granted when the keeper got here (its start on a loaded control
    host): the first renewal is due a third of the TTL after the grant, not after the keeper's start (at once when
    that has passed).

    A keeper that ends with its run (status 0) revokes the lease and removes its files; one that lost its lease
    (status 1) keeps its log for the operator (the next run's sweep removes it once this run is gone)."""
    log = log or _log_line
    interval = max(1.0, ttl / 3.0)
    last_ok = clock() - max(0.0, granted_age)
    renew_at = last_ok + interval

    def finish(status, why):
        log(f"keeper of lease {lease}: {why}")
        if status == 0:
            try:
                backend.revoke(lease)
            except be.BackendError as exc:
                log(f"keeper of lease {lease}: could not revoke it ({exc}); it runs out by itself")
            _clean_up(path)
        else:
            _remove(os.path.dirname(path), [os.path.basename(path)])
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
                return finish(1, (
                    f"the lease ran out or was revoked: nothing left to keep (last renewed {now - last_ok:.1f} s "
                    f"before, measured; its TTL {ttl:g} s, {TTL_VARIABLE}). When this control host was too loaded "
                    f"to renew it within the TTL (load average {load()}), raise {TTL_VARIABLE}"))
            if now - last_ok > 2 * interval:
                log(f"keeper of lease {lease}: renewed {now - last_ok:.1f} s after the last renewal, not every "
                    f"{interval:.1f} s (a third of {TTL_VARIABLE} {ttl:g} s): this control host is loaded (load "
                    f"average {load()}); the lease runs out if that reaches {ttl:g} s")
            last_ok, renew_at = now, now + interval
        sleep(min(0.5, max(0.05, renew_at - clock())))


def _log_line(text):
    """A line of the keeper's log (its standard output, which ``ensure`` points at the log file), with the time."""
    sys.stdout.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")
    sys.stdout.flush()


def main(argv, stopping=None):
    """The keeper's command line (``python -m`` this module): MARKER --url URL --lease ID --ttl S --pid P --start T
    --pidfile PATH --connect-timeout S --read-timeout S [--granted T]. ``stopping``: the list a SIGTERM handler installed first
    thing appends to (one is installed here otherwise)."""
    args = dict(zip(argv[1::2], argv[2::2])) if argv and argv[0] == MARKER else {}
    try:
        backend = be.open_backend(args["--url"], float(args["--connect-timeout"]), float(args["--read-timeout"]))
        lease, ttl = int(args["--lease"]), float(args["--ttl"])
        run_pid, run_start = int(args["--pid"]), int(args["--start"])
        path = args["--pidfile"]
        granted = float(args.get("--granted", time.time()))
    except (KeyError, ValueError, be.BackendError) as exc:
        sys.stderr.write(f"usage: python -m {MODULE} {MARKER} --url URL --lease ID --ttl S --pid P --start T "
                         f"--pidfile PATH --connect-timeout S --read-timeout S ({exc})\n")
        return 2
    if stopping is None:
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM"))
    _write_pidfile(path, lease, backend.shown)
    return keep(backend, lease, ttl, run_pid, run_start, path, stopping=stopping,
                log=_log_line, granted_age=time.time() - granted)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], STOPPING))
