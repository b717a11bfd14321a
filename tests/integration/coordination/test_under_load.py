"""The coordination layer's bounds on a busy control host, on both backends (a directory, and a real etcd on
127.0.0.1: tests/helpers/etcd_server.py), while a bounded CPU load of the test's own (tests/helpers/cpu_load.py: one
busy loop per core and one more, each stopping by itself within seconds) runs: a keeper whose start takes longer than
the lease allows its first renewal (a start stand-in that waits before it runs Python) still keeps a lease of the
least TTL past twice that TTL, as the task starting it renews the lease meanwhile; a keeper not ready within its
start window fails naming the bound, the time measured and the load, revokes the lease and leaves no log behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ogc_testlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from cpu_load import CpuLoad  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import (  # noqa: E402
    backend as be, identity as ident, keeper, slots)  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration

TTL = be.MIN_TTL  # the least TTL the project takes: its first renewal is due 1.7 s after the grant
SLOW_START = 4.0  # seconds the keeper's start takes here: past the TTL's first third, and its second


@pytest.fixture
def slow_python(tmp_path):
    """A Python that takes SLOW_START seconds to start: what a loaded control host does to the keeper's start."""
    path = tmp_path / "slow-python"
    path.write_text(f"#!/bin/sh\nsleep {SLOW_START}\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """The run: a process of its own (the test ends it), the keepers' files in a private directory of the test's."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # pylint: disable=consider-using-with
    yield proc
    proc.kill()
    proc.wait()


def test_a_lease_of_the_least_ttl_outlives_a_slow_keeper_start_under_load(url, run, slow_python):
    backend = be.open_backend(url)
    here = ident.identity(run.pid)
    with CpuLoad(processes=(os.cpu_count() or 1) + 1, seconds=TTL * 2 + SLOW_START + 15) as load:  # killed on leaving
        started = time.monotonic()
        lease, fresh = keeper.ensure(url, here, TTL, backend=backend, python=slow_python, start_timeout=30)
        took = time.monotonic() - started
        assert fresh and took >= SLOW_START and load.running()
        assert backend.remaining(lease) > 0      # renewed by the task meanwhile: the TTL passed during the start
        slots.acquire(backend, "h1", [], 1, here, 0.0, lease)
        time.sleep(TTL * 2)                      # twice the TTL under load: the keeper renews it
        assert backend.remaining(lease) > 0 and [r["host"] for r in backend.read().slots.values()] == ["h1"]
        assert load.running()
    run.kill()
    run.wait()
    deadline = time.monotonic() + 10
    while (backend.remaining(lease) > 0 or os.listdir(keeper.runtime_dir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert backend.remaining(lease) == -1 and backend.read().slots == {} and os.listdir(keeper.runtime_dir()) == []


def test_a_keeper_not_ready_within_its_window_fails_naming_the_bound_the_time_and_the_load(url, run, slow_python):
    backend = be.open_backend(url)
    here = ident.identity(run.pid)
    with CpuLoad(processes=(os.cpu_count() or 1) + 1, seconds=15):  # killed on leaving the block
        started = time.monotonic()
        with pytest.raises(be.BackendError) as exc:
            keeper.ensure(url, here, TTL, backend=backend, python=slow_python, start_timeout=2)
        assert time.monotonic() - started < 2 + 5
    text = str(exc.value)
    assert text.startswith("the lease keeper was not ready within 2 s (passthrough_rollout_keeper_start_timeout): ")
    measured = float(text.split("): ", 1)[1].split(" s measured", 1)[0])
    assert 2 <= measured < 7 and "since the lease was granted, on a control host with load average " in text
    assert "this task renewed the lease meanwhile at [1.7" in text
    assert "Raise passthrough_rollout_keeper_start_timeout (or run fewer jobs at once on this control host)" in text
    assert backend.remaining(be.lease_id_of(here["run"])) == -1   # revoked: nothing is held by a run that failed
    assert not os.path.exists(keeper.log_path(here["run"]))       # its output is in the message, not left behind
