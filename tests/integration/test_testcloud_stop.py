"""Stop means stopped: `scripts/testcloud.sh stop` on a cloud started `--with-compute`, and the lifetime limit, end
every process the cloud started, forked workers in sessions of their own included (nova-scheduler's and
nova-conductor's oslo.service workers, RabbitMQ's Erlang VM, MariaDB, gunicorn's workers).

A process belongs to a cloud when its environment carries the cloud's marker (OGC_TESTCLOUD_DIR=<its directory>,
set for every server it starts) or its working directory is inside the cloud's directory; the scan below reads
both from /proc, independently of what the cloud recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ogc_testlib import ROOT, TestCloudHandle

pytestmark = pytest.mark.integration
SUPERVISE = os.path.join(ROOT, "scripts", "testcloud", "supervise.py")


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def processes_of(directory, marker="OGC_TESTCLOUD_DIR"):
    """{pid: command line} of the live processes whose environment has MARKER=DIRECTORY or whose working
    directory is inside DIRECTORY (deleted or not)."""
    directory = os.path.realpath(directory)
    wanted = f"{marker}={directory}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat or stat.rsplit(b")", 1)[1].split()[0] == b"Z":
            continue  # gone, or a zombie: nothing runs
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            cwd = ""
        if wanted in _read(f"/proc/{entry}/environ").split(b"\0") or cwd == directory or \
                cwd.startswith(directory + os.sep):
            found[int(entry)] = _read(f"/proc/{entry}/cmdline").replace(b"\0", b" ").decode(errors="replace")
    return found


def test_stop_ends_every_process_of_a_compute_cloud(tmp_path):
    cloud = TestCloudHandle(tmp_path / "cloud")
    cloud.script("start", "--lifetime", "900", "--with-compute")
    try:
        running = processes_of(cloud.dir)
        commands = "\n".join(running.values())
        # The scan sees the cloud's processes, the forked ones included (else an empty scan below proves nothing).
        for name in ("mariadbd", "beam.smp", "gunicorn", "nova-scheduler: ServiceWrapper worker(0)",
                     "nova-conductor", "ogc_nova_compute.py", "supervise.py"):
            assert name in commands, f"{name} not found among the cloud's processes:\n{commands}"
        # Each runs below a supervisor, which stops it with the cloud and after the lifetime.
        for pid in running:
            assert supervisor_of(pid), f"{running[pid]} (pid {pid}) runs below no supervise.py"
    finally:
        cloud.script("stop")
    left = processes_of(cloud.dir)
    assert left == {}, f"still running after stop: {left}"


def supervisor_of(pid):
    """The supervise.py process PID runs under (itself when it is one), or None."""
    while pid > 1:
        if SUPERVISE.encode() in _read(f"/proc/{pid}/cmdline").split(b"\0"):
            return pid
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            return None
        pid = int(stat.rsplit(b")", 1)[1].split()[1])
    return None


# A server that forks a worker into a session of its own, which ignores SIGTERM, then exits first: what
# cotyledon's master and a worker stuck in its graceful stop did to coreutils `timeout`.
ESCAPING_SERVER = """
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["lifetime", "stop"])
def test_the_supervisor_ends_a_worker_that_escaped_its_session(tmp_path, how):
    env = dict(os.environ, OGC_TESTCLOUD_DIR=str(tmp_path))
    lifetime = "2" if how == "lifetime" else "600"
    proc = subprocess.Popen([sys.executable, SUPERVISE, lifetime, "1", "--", sys.executable, "-c", ESCAPING_SERVER],
                            cwd=tmp_path, env=env, start_new_session=True)
    try:
        deadline = time.time() + 30
        while len(processes_of(tmp_path)) < 3 and time.time() < deadline:  # supervisor, server, worker
            time.sleep(0.1)
        assert len(processes_of(tmp_path)) == 3, processes_of(tmp_path)
        if how == "stop":
            proc.terminate()
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == (124 if how == "lifetime" else 128 + 15)
    assert processes_of(tmp_path) == {}
