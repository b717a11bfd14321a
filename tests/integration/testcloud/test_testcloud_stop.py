"""Stop means stopped: the supervisor every test cloud server runs under (scripts/testcloud/supervise.py) ends a
worker that escaped into a session of its own, at the lifetime limit and on stop.

That `scripts/testcloud.sh stop` on a cloud started `--with-compute` ends every process it started (forked workers
in sessions of their own included: nova-scheduler's and nova-conductor's oslo.service workers, RabbitMQ's Erlang VM,
MariaDB, gunicorn's workers) is checked on the compute cloud the ops tests share, when it starts and when it stops
(tests/integration/ops/conftest.py): a cloud started only to be stopped would cost a whole start."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ogc_testlib import SUPERVISE, processes_of

pytestmark = pytest.mark.integration


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
