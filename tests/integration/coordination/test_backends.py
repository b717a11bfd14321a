"""The coordination backends on the real thing: the same rules of leases and reboot slots on a directory and on a
real etcd (Debian's etcd-server on 127.0.0.1, tests/helpers/etcd_server.py), with real time; many processes at
once; a keeper that renews a lease while its run lives and revokes it when the run ends; and a service that is gone
or hangs, which fails within its timeouts naming itself."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from ogc_testlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from etcd_server import EtcdServer  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import keeper

TTL = 5  # seconds: above etcd's least lease TTL, short enough to wait for


def holder(name):
    return {"run": ident.digest("test", name), "controller": f"ctl-{name}", "controller_id": ident.digest(name),
            "boot": ident.digest("boot", name), "user": "op", "pid": 1, "start_time": 1}


def runs(url):
    """Two runs of this test alone (etcd's leases are not under a key prefix: each test's runs are its own)."""
    return holder(f"a {url}"), holder(f"b {url}")


def grant(backend, here, ttl=TTL):
    lease = be.lease_id_of(here["run"])
    assert backend.grant(lease, ttl, here) is True
    return lease


def test_leases_are_granted_once_renewed_and_revoked(url):
    backend = be.open_backend(url)
    A, _ = runs(url)  # pylint: disable=invalid-name
    lease = grant(backend, A)
    assert backend.grant(lease, TTL, A) is False             # another task of the same run
    assert 0 < backend.remaining(lease) <= TTL
    assert backend.keepalive(lease) == TTL
    backend.revoke(lease)
    assert backend.remaining(lease) == -1 and backend.keepalive(lease) == -1
    backend.revoke(lease)                                      # twice: nothing to give back


def test_a_wave_takes_all_or_none_a_live_holder_is_refused_and_an_unrenewed_one_runs_out(url):
    backend = be.open_backend(url)
    A, B = runs(url)  # pylint: disable=invalid-name
    mine, theirs = grant(backend, A), grant(backend, B)
    assert slots.acquire(backend, "a1", ["a1", "a2"], 2, A, 0.0, mine)[:2] == (0, leases.FREE)
    assert slots.acquire(backend, "a2", ["a1", "a2"], 2, A, 0.0, mine)[:2] == (1, leases.OURS)
    with pytest.raises(leases.SlotsFull, match=r"a1 \(run .* its lease runs until .* unless renewed"):
        slots.acquire(backend, "b1", [], 2, B, 0.0, theirs, alive=lambda o, h: None)
    assert slots.release(backend, "a1", A) == [0]
    with pytest.raises(leases.SlotsFull):                      # a wave of two: one free slot is not enough
        slots.acquire(backend, "b1", ["b1", "b2"], 2, B, 0.0, theirs, alive=lambda o, h: None)
    # A's run stops renewing (it died): its slot frees itself when the lease runs out; B renews its own meanwhile.
    deadline = time.time() + TTL + 5
    while time.time() < deadline:
        backend.keepalive(theirs)
        try:
            taken = slots.acquire(backend, "b1", ["b1", "b2"], 2, B, 0.0, theirs, alive=lambda o, h: None)
            break
        except leases.SlotsFull:
            time.sleep(0.5)
    else:
        pytest.fail("a lease that was not renewed did not run out")
    assert taken[1] == leases.FREE
    assert sorted(r["host"] for r in backend.read().slots.values()) == ["b1", "b2"]


def test_the_stop_record_holds_back_the_runs_that_started_before_it(url):
    backend = be.open_backend(url)
    A, B = runs(url)  # pylint: disable=invalid-name
    lease = grant(backend, A)
    record = slots.stop(backend, "gpu-001", "the verification failed", B, time.time())
    assert backend.read().stop == record
    with pytest.raises(leases.RolloutStopped, match="gpu-001 failed at .*: the verification failed"):
        slots.acquire(backend, "h1", [], 1, A, record["time"] - 10, lease)
    assert slots.acquire(backend, "h1", [], 1, A, record["time"] + 1, lease)[:2] == (0, leases.FREE)


def test_a_commit_over_a_stale_view_is_refused(url):
    backend = be.open_backend(url)
    A, B = runs(url)  # pylint: disable=invalid-name
    mine, theirs = grant(backend, A), grant(backend, B)
    stale = backend.read()
    slots.acquire(backend, "b1", [], 2, B, 0.0, theirs)
    assert backend.commit(stale, puts={0: dict(slots.holder_fields(A), host="a1", since="x")}, lease=mine) is False
    assert [r["host"] for r in backend.read().slots.values()] == ["b1"]


def test_a_run_whose_lease_ran_out_takes_nothing(url):
    backend = be.open_backend(url)
    A, _ = runs(url)  # pylint: disable=invalid-name
    lease = grant(backend, A)
    backend.revoke(lease)
    with pytest.raises(be.LeaseLost):
        slots.acquire(backend, "h1", [], 1, A, 0.0, lease)
    assert backend.read().slots == {}


def _compete(url, host, capacity, log):
    """One run: take a slot, hold it a moment, note when, give it back."""
    here = holder(f"compete-{host} {url}")
    backend = be.open_backend(url)
    lease = be.lease_id_of(here["run"])
    backend.grant(lease, 60, here)
    while True:
        try:
            slots.acquire(backend, host, [], capacity, here, 0.0, lease)
            break
        except leases.SlotsFull:
            time.sleep(0.02)
    start = time.time()
    time.sleep(0.2)
    end = time.time()
    slots.release(backend, host, here)
    backend.revoke(lease)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps([start, end]) + "\n")


def test_runs_competing_never_exceed_the_capacity(url, tmp_path):
    log = str(tmp_path / "held.jsonl")
    procs = [multiprocessing.Process(target=_compete, args=(url, f"h{i}", 2, log)) for i in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert all(proc.exitcode == 0 for proc in procs)
    with open(log, encoding="utf-8") as handle:
        spans = [json.loads(line) for line in handle]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _moment, step in events:
        running += step
        peak = max(peak, running)
    assert len(spans) == 6 and peak <= 2 and be.open_backend(url).read().slots == {}


def test_a_keeper_keeps_its_run_s_lease_past_the_ttl_and_revokes_it_when_the_run_ends(url, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    # The run: a process of its own, which the test ends.
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # pylint: disable=consider-using-with
    try:
        here = ident.identity(run.pid)
        backend = be.open_backend(url)
        lease, started = keeper.ensure(url, here, TTL, backend=backend)
        assert started
        slots.acquire(backend, "h1", [], 1, here, 0.0, lease)
        time.sleep(TTL * 2)                                   # twice the TTL: renewed meanwhile
        assert backend.remaining(lease) > 0 and [r["host"] for r in backend.read().slots.values()] == ["h1"]
    finally:
        run.kill()
        run.wait()
    deadline = time.time() + 10
    while backend.remaining(lease) > 0 and time.time() < deadline:
        time.sleep(0.2)
    assert backend.remaining(lease) == -1 and backend.read().slots == {}      # revoked at once, not after the TTL
    # The keeper removed every file of the run as it ended (its pid file, its log, the run's lock file): the run's
    # end is told by the lease revoked at once (its reason in the log: tests/unit/coordination's keeper tests).
    deadline = time.time() + 10
    while os.listdir(keeper.runtime_dir()) and time.time() < deadline:
        time.sleep(0.1)
    assert os.listdir(keeper.runtime_dir()) == []


def test_a_service_that_is_gone_fails_at_once_naming_itself(etcd, tmp_path):
    gone = EtcdServer(tmp_path)  # never started: nothing listens on its port
    backend = be.open_backend(gone.url, connect_timeout=2, read_timeout=2)
    started = time.time()
    with pytest.raises(be.Unavailable) as exc:
        backend.read()
    assert time.time() - started < 5
    assert str(exc.value).startswith(f"the coordination service etcd3+http://127.0.0.1:{gone.client_port}/ogc-test "
                                     "cannot be reached (connect timeout 2 s, read timeout 2 s)")


def test_a_service_that_accepts_and_never_answers_fails_after_the_read_timeout():
    """A listener that accepts connections and says nothing: the request ends after the read timeout."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        accepted = []
        threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
        backend = be.open_backend(f"etcd3+http://127.0.0.1:{server.getsockname()[1]}", connect_timeout=2,
                                  read_timeout=2)
        started = time.time()
        with pytest.raises(be.Unavailable, match="cannot be reached .*read timeout 2 s"):
            backend.keepalive(1)
        assert accepted and 1.5 < time.time() - started < 6


def test_the_lease_ttl_limit_checked_before_any_host_is_etcd_s_own(etcd):
    """backend.MAX_TTL["etcd"], which the rollout's check entry point holds the TTL to, is what the real etcd takes."""
    backend = be.open_backend(f"{etcd.url}/ttl-limit")
    largest, beyond = be.lease_id_of(ident.digest("ttl", "largest")), be.lease_id_of(ident.digest("ttl", "beyond"))
    assert backend.grant(largest, be.MAX_TTL["etcd"], {}) is True
    try:
        assert backend.remaining(largest) > be.MAX_TTL["etcd"] - 60
        with pytest.raises(be.BackendError, match="too large lease TTL"):
            backend.grant(beyond, be.MAX_TTL["etcd"] + 1, {})
    finally:
        backend.revoke(largest)
    assert be.ttl_problem("etcd", be.MAX_TTL["etcd"], backend.shown) is None
    assert "outside what" in be.ttl_problem("etcd", be.MAX_TTL["etcd"] + 1, backend.shown)


def test_the_wave_limit_checked_before_any_host_is_etcd_s_own(etcd):
    """backend.MAX_WAVE["etcd"], which the rollout holds a wave to (check entry point, then the planned waves), is
    what the real etcd takes in the one transaction that gives a wave its slots: a wave of 128 hosts gets them, one
    of 129 is refused by etcd itself."""
    backend = be.open_backend(f"{etcd.url}/wave-limit")
    here = holder("wave-limit")
    lease = grant(backend, here, ttl=60)
    try:
        largest = [f"gpu-{n:03d}" for n in range(be.MAX_WAVE["etcd"])]
        assert slots.acquire(backend, largest[0], largest, len(largest), here, 0.0, lease)[:2] == (0, leases.FREE)
        assert len(backend.read().slots) == be.MAX_WAVE["etcd"]
        slots_taken = [slots.release(backend, host, here) for host in largest]
        assert all(slots_taken) and not backend.read().slots
        beyond = largest + ["gpu-128"]
        with pytest.raises(be.BackendError, match="too many operations in txn request"):
            slots.acquire(backend, beyond[0], beyond, len(beyond), here, 0.0, lease)
    finally:
        backend.revoke(lease)
    assert be.wave_problem("etcd", be.MAX_WAVE["etcd"], backend.shown) is None
    assert "one transaction of at most 128 operations" in be.wave_problem("etcd", 129, backend.shown)
    assert be.wave_problem("file", 10_000, "file:///srv/coordination") is None
