"""The coordination layer's rules (plugins/module_utils/coordination/): identities as digests, the lease rules of a record,
the reboot slots of a wave, the directory backend and the keeper's loop - examples, and a stateful property test
that drives the lock and the slots through random interleavings of take, renew, expire, release and crash. The
same slot rules on a real etcd are in tests/integration/coordination/."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule


from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import keeper
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import host_lock as hl


def run_of(name, controller="ctl-a", pid=1):
    """A holder identity (the fields identity.identity gives), named ``name``."""
    return {"run": ident.digest("test", name), "controller": controller, "controller_id": ident.digest(controller),
            "boot": ident.digest("boot", controller), "user": "op", "pid": pid, "start_time": 1}


A, B = run_of("a"), run_of("b", controller="ctl-b")


class Clock:
    """time.time and time.sleep of a test: sleeping moves the clock."""

    def __init__(self, now=1000.0):
        self.now = now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


# ---- identity -------------------------------------------------------------------------------------------------

def test_a_run_is_named_by_digests_never_by_the_machine_id(tmp_path):
    machine = "4f1a9c3e5d7b4e2f8a6c0d1e2f3a4b5c"
    (tmp_path / "machine-id").write_text(machine + "\n")
    here = ident.identity(os.getpid(), machine_id_path=str(tmp_path / "machine-id"))
    assert here["pid"] == os.getpid() and here["start_time"] == ident.process_start(os.getpid())
    assert all(len(here[key]) == 16 and int(here[key], 16) >= 0 for key in ("run", "controller_id", "boot"))
    assert machine not in json.dumps(here)
    boot = open("/proc/sys/kernel/random/boot_id", encoding="utf-8").read().strip()
    assert boot not in json.dumps(here)
    # Every task of the run names it the same; another machine id is another control host.
    assert ident.identity(os.getpid(), machine_id_path=str(tmp_path / "machine-id")) == here
    (tmp_path / "other").write_text("0" * 32 + "\n")
    other = ident.identity(os.getpid(), machine_id_path=str(tmp_path / "other"))
    assert other["controller_id"] != here["controller_id"] and other["run"] != here["run"]


def test_a_run_is_alive_while_its_process_runs_on_this_control_host():
    here = ident.identity(os.getpid())
    assert ident.owner_alive(here, here) is True
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    assert ident.owner_alive(dict(here, pid=int(child.stdout)), here) is False           # a process that ended
    assert ident.owner_alive(dict(here, start_time=here["start_time"] - 1), here) is False  # the pid reused
    assert ident.owner_alive(dict(here, boot=ident.digest("an earlier boot")), here) is False  # rebooted since
    assert ident.owner_alive(dict(here, controller_id=ident.digest("elsewhere")), here) is None  # not seen here
    assert ident.owner_alive({"run": "x"}, here) is None                                     # a record of nowhere


# ---- the lease rules ------------------------------------------------------------------------------------------

def alive_unless(*gone):
    """An owner_alive stand-in: the runs named are gone, every other run is alive (or unseen)."""
    return lambda owner, here: False if owner.get("run") in gone else None


def test_holder_state_free_ours_expired_gone_held():
    record = dict(B, expires=2000.0)
    assert leases.holder_state(None, 1000, A) == leases.FREE
    assert leases.holder_state(dict(A, expires=0), 1000, A) == leases.OURS          # ours even when it ran out
    assert leases.holder_state(record, 2000, A, alive_unless()) == leases.EXPIRED  # at its expiry: free to take
    assert leases.holder_state(record, 1999, A, alive_unless(B["run"])) == leases.GONE
    assert leases.holder_state(record, 1999, A, alive_unless()) == leases.HELD
    assert leases.holder_state(dict(B), 0, A, alive_unless()) == leases.EXPIRED      # no lease: an earlier version
    assert leases.holder_state(dict(B, expires="2000"), 0, A) == leases.EXPIRED     # not a number: no lease


def test_a_holder_is_described_with_when_its_lease_runs_out():
    text = leases.describe_holder(dict(B, host="h1", since="2026-11-26T07:00:00Z", expires=1060.0), 1000.0)
    assert text.startswith(f"h1 (run {B['run']} of op on ctl-b (ansible-playbook pid 1), holding it since "
                           "2026-11-26T07:00:00Z; its lease runs until 1970-01-01T00:17:40Z (60 s from now)")
    assert "its lease ran out at" in leases.describe_holder(dict(B, expires=900.0), 1000.0)
    assert "with no lease" in leases.describe_holder(dict(B), 1000.0)


def test_a_wave_keeps_its_own_slots_takes_free_expired_and_gone_ones_and_refuses_live_ones():
    live = dict(B, host="h9", expires=2000.0)
    assert leases.decide_wave({0: dict(A, host="h1", expires=2000.0)}, ["h1"], 1, A, 1000, alive_unless()) == \
        {"h1": (0, leases.OURS, dict(A, host="h1", expires=2000.0))}
    assert leases.decide_wave({0: live}, ["h1"], 2, A, 1000, alive_unless()) == {"h1": (1, leases.FREE, None)}
    assert leases.decide_wave({0: live}, ["h1"], 1, A, 2000, alive_unless()) == {"h1": (0, leases.EXPIRED, live)}
    assert leases.decide_wave({0: live}, ["h1"], 1, A, 1000, alive_unless(B["run"])) == \
        {"h1": (0, leases.GONE, live)}
    with pytest.raises(leases.SlotsFull) as full:
        leases.decide_wave({0: live}, ["h1"], 1, A, 1000, alive_unless())
    assert full.value.holders == [live] and "h9 (run " in str(full.value) and "1000 s from now" in str(full.value)
    # A live holder above the capacity (a run with a larger wave) still counts.
    with pytest.raises(leases.SlotsFull):
        leases.decide_wave({3: live}, ["h1"], 1, A, 1000, alive_unless())
    # Another run's record for the same host is not this run's slot.
    with pytest.raises(leases.SlotsFull):
        leases.decide_wave({0: dict(live, host="h1")}, ["h1"], 1, A, 1000, alive_unless())
    with pytest.raises(leases.SlotError, match="a wave of 3 host"):
        leases.decide_wave({}, ["a", "b", "c"], 2, A, 1000)


def test_a_stop_record_stops_the_runs_that_started_before_it():
    stop = {"host": "gpu-001", "since": "x", "time": 200.0, "reason": "the verification failed"}
    with pytest.raises(leases.RolloutStopped, match="gpu-001 failed at x: the verification failed"):
        leases.check_stop(stop, 100.0)
    leases.check_stop(stop, 300.0)
    leases.check_stop(None, 0.0)


# ---- the directory backend and the slots on it ------------------------------------------------------------------

@pytest.fixture
def store(tmp_path):
    clock = Clock()
    return be.FileBackend(str(tmp_path / "coordination"), clock=clock.time), clock


def granted(backend, here, ttl=60):
    lease = be.lease_id_of(here["run"])
    backend.grant(lease, ttl, here)
    return lease


def test_slots_are_carried_by_a_lease_and_the_files_are_private(store):
    backend, clock = store
    lease = granted(backend, A)
    assert slots.acquire(backend, "h1", ["h2"], 2, A, 0.0, lease) == (0, leases.FREE, None)
    index, outcome, before = slots.acquire(backend, "h2", ["h1"], 2, A, 0.0, lease)
    assert (index, outcome, before["host"]) == (1, leases.OURS, "h2")
    path = backend.path
    assert os.stat(path).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(path)) == [".lock", f"lease-{lease}", "slot-0", "slot-1"]
    assert all(os.stat(os.path.join(path, n)).st_mode & 0o777 == 0o600 for n in os.listdir(path))
    record = json.loads(open(os.path.join(path, "slot-0"), encoding="utf-8").read())
    assert record["run"] == A["run"] and record["lease"] == str(lease) and "machine_id" not in record
    assert slots.release(backend, "h1", A) == [0] and slots.release(backend, "h1", A) == []
    # The lease runs out unless renewed: what it carries is free; the next change clears it.
    clock.sleep(59)
    assert backend.keepalive(lease) == 60
    clock.sleep(61)
    assert backend.keepalive(lease) == -1 and backend.read().slots == {}
    other = granted(backend, B)
    assert slots.acquire(backend, "h3", [], 1, B, 0.0, other) == (0, leases.FREE, None)
    assert sorted(os.listdir(path)) == [".lock", f"lease-{other}", "slot-0"]


def test_a_live_lease_is_never_taken_and_its_refusal_says_when_it_runs_out(store):
    backend, clock = store
    slots.acquire(backend, "h9", [], 1, B, 0.0, granted(backend, B, ttl=120))
    clock.sleep(30)
    with pytest.raises(leases.SlotsFull, match=r"h9 \(run .* its lease runs until 1970-01-01T00:18:40Z \(90 s "):
        slots.acquire(backend, "h1", [], 1, A, 0.0, granted(backend, A))
    clock.sleep(90)  # it ran out: any run may take it
    assert slots.acquire(backend, "h1", [], 1, A, 0.0, granted(backend, A))[:2] == (0, leases.FREE)


def test_a_run_that_lost_its_lease_takes_nothing(store):
    backend, clock = store
    lease = granted(backend, A, ttl=10)
    clock.sleep(11)
    with pytest.raises(be.LeaseLost):
        slots.acquire(backend, "h1", [], 1, A, 0.0, lease)
    with pytest.raises(be.LeaseLost, match="ran out or was revoked"):
        slots.confirm(backend, "h1", A, lease)


def test_confirm_renews_and_proves_the_slot(store):
    backend, clock = store
    lease = granted(backend, A, ttl=60)
    slots.acquire(backend, "h1", [], 1, A, 0.0, lease)
    clock.sleep(50)
    assert slots.confirm(backend, "h1", A, lease) == (0, 60)
    with pytest.raises(be.LeaseLost, match="holds no reboot slot for h2"):
        slots.confirm(backend, "h2", A, lease)


def test_the_stop_record_and_revoking(store):
    backend, _clock = store
    lease = granted(backend, A)
    slots.acquire(backend, "h1", [], 2, A, 0.0, lease)
    # (The store's clock reads 1000: a record dated within leases.CLOCK_SKEW of it; one further ahead is refused
    # as from the future, tests/unit/coordination/test_foreign_record_rules.py.)
    record = slots.stop(backend, "h1", "the verification failed", A, 1200.0)
    assert backend.read().stop == record and record["time"] == 1200.0
    with pytest.raises(leases.RolloutStopped):
        slots.acquire(backend, "h2", [], 2, B, 1199.0, granted(backend, B))
    backend.revoke(lease)
    assert backend.read().slots == {} and backend.read().stop == record   # the stop record is history, not a hold


def test_a_symlink_or_a_file_is_refused_and_a_foreign_file_named(tmp_path):
    os.symlink(str(tmp_path), str(tmp_path / "link"))
    with pytest.raises(be.BackendError, match="is a symbolic link"):
        be.FileBackend(str(tmp_path / "link")).read()
    (tmp_path / "file").write_text("")
    with pytest.raises(be.BackendError, match="exists and is not a directory"):
        be.FileBackend(str(tmp_path / "file")).read()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "stopped.json").write_text("[]")
    with pytest.raises(be.BackendError, match=r"stopped.json is not a record .*: remove it, after checking"):
        be.FileBackend(str(tmp_path / "c")).read()


@pytest.mark.parametrize("url, message", [
    ("etcd3+http://admin:s3cret@etcd:2379", "carries credentials"),
    ("etcd3+https://user@etcd:2379", "carries credentials"),
    ("redis://:s3cret@redis:6379", "carries credentials"),
    ("http://etcd:2379", "uses a scheme this version does not read"),
    ("file://relative/dir", "must be file:///<absolute directory>"),
    ("file:///", "must name an absolute directory other than /"),
    ("/var/lib/open-gpu-cloud/coordination", "is not a URL: give file:///var/lib/open-gpu-cloud/coordination"),
    ("etcd3+http://etcd:2379?ca_cert=/x", "only go with etcd3+https"),
    ("etcd3+https://etcd:2379?cert_cert=/x", "give cert_cert and cert_key together"),
    ("etcd3+http://etcd:2379?token=abc", "unknown option(s) token"),
    ("etcd3+http://etcd:99999", "a bad host or port"),
])
def test_bad_urls_are_refused_naming_the_variable_and_never_a_secret(url, message):
    with pytest.raises(be.BackendError) as exc:
        be.parse_url(url)
    text = str(exc.value)
    assert text.startswith("passthrough_rollout_coordination_url") and message in text
    assert "s3cret" not in text and "abc" not in text


def test_good_urls():
    assert be.parse_url("file:///var/lib/ogc/coordination/") == ("file", {"path": "/var/lib/ogc/coordination"},
                                                                 "file:///var/lib/ogc/coordination")
    kind, settings_, shown = be.parse_url("etcd3+https://etcd.example:2379/fleet-a?ca_cert=/ca&cert_cert=/c&cert_key=/k")
    assert kind == "etcd" and shown == "etcd3+https://etcd.example:2379/fleet-a"
    assert settings_ == {"host": "etcd.example", "port": 2379, "protocol": "https", "prefix": "/fleet-a",
                         "ca_cert": "/ca", "cert_cert": "/c", "cert_key": "/k"}
    assert be.parse_url("etcd3+http://10.0.0.5")[1]["prefix"] == "/open-gpu-cloud"


def test_an_etcd_url_without_etcd3gw_is_refused_naming_the_package_and_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "etcd3gw", None)  # what a control host without the package gives the import
    kind, settings_, shown = be.parse_url("etcd3+http://etcd.example:2379")
    with pytest.raises(be.BackendError) as exc:
        be.EtcdBackend(settings_, shown)
    assert str(exc.value) == ("passthrough_rollout_coordination_url (etcd3+http://etcd.example:2379) names etcd, and the "
                              "Python package etcd3gw is not installed on the control host: install it (pip install "
                              "etcd3gw; the execution environment has it)")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


# ---- the keeper ------------------------------------------------------------------------------------------------

class FakeBackend:
    """A backend whose keepalive answers from a script: a number, or an exception to raise."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.revoked = []
        self.calls = 0

    def keepalive(self, lease):
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else 60
        if isinstance(answer, Exception):
            raise answer
        return answer

    def revoke(self, lease):
        self.revoked.append(lease)


def run_keeper(tmp_path, backend, run_alive, ttl=30):
    clock = Clock(0.0)
    path = tmp_path / "keeper.json"
    path.write_text("{}")
    logged = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ident, "process_start", lambda pid, proc="/proc": 7 if run_alive(clock.now) else None)
        status = keeper.keep(backend, 42, ttl, 1234, 7, str(path), clock=clock.time, sleep=clock.sleep,
                             log=logged.append)
    return status, clock.now, logged, path.exists()


def test_the_keeper_renews_while_the_run_lives_then_revokes(tmp_path):
    backend = FakeBackend([])
    status, ended, logged, left = run_keeper(tmp_path, backend, lambda now: now < 100)
    assert status == 0 and 100 <= ended < 101 and backend.revoked == [42] and not left
    assert backend.calls == 9  # every third of the TTL: at 10, 20, ... 90 s
    assert "the run (pid 1234) has ended: lease revoked" in logged[-1]


def test_the_keeper_gives_up_once_the_service_was_unreachable_for_the_ttl(tmp_path):
    down = be.Unavailable("the coordination service etcd3+http://127.0.0.1:1 cannot be reached")
    backend = FakeBackend([60] + [down] * 100)
    status, ended, logged, _left = run_keeper(tmp_path, backend, lambda now: True)
    assert status == 1 and 40 <= ended <= 42 and backend.revoked == []
    assert "could not be reached for 30 s: the lease is lost" in logged[-1]


def test_the_keeper_stops_when_its_lease_is_gone(tmp_path):
    status, _ended, logged, _left = run_keeper(tmp_path, FakeBackend([-1]), lambda now: True)
    assert status == 1 and "ran out or was revoked" in logged[-1]


def test_a_keeper_is_started_once_per_run_and_stopped_by_its_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    backend = be.FileBackend(str(tmp_path / "coordination"))
    here = ident.identity(os.getpid())
    url = f"file://{tmp_path}/coordination"
    lease, started = keeper.ensure(url, here, 30, backend=backend)
    try:
        assert started and keeper.ensure(url, here, 30, backend=backend) == (lease, False)
        record = keeper.running(keeper.pidfile(here["run"]))
        assert record["lease"] == lease and os.stat(keeper.pidfile(here["run"])).st_mode & 0o777 == 0o600
        assert os.stat(keeper.runtime_dir()).st_mode & 0o777 == 0o700
        assert backend.remaining(lease) > 0
    finally:
        assert keeper.stop(here["run"])
    assert backend.remaining(lease) == -1 and not os.path.exists(keeper.pidfile(here["run"]))


# ---- random interleavings ---------------------------------------------------------------------------------------

RUNS = [run_of(f"r{i}", controller="ctl-a" if i < 2 else "ctl-b", pid=100 + i) for i in range(4)]
HOSTS = ["h0", "h1", "h2", "h3", "h4"]


class Coordination(RuleBasedStateMachine):
    """Four runs (two on each of two control hosts) on one directory backend and one host lock, with a clock. Each
    step is one of: a run takes slots for a wave, renews its lease, gives a host's slot back, or crashes (stops
    renewing: its process is gone, which only its own control host can see); the clock moves on (leases run out);
    a run takes, renews or releases the host's lock (the real host script, judged as the action plugin judges). No
    live record of one run is ever taken by another, and the invariants hold after every step."""

    TTL = 30
    CAPACITY = 2

    def __init__(self):
        super().__init__()
        import tempfile  # pylint: disable=import-outside-toplevel
        self.clock = Clock(1000.0)
        self.backend = be.FileBackend(tempfile.mkdtemp(prefix="coordination-"), clock=self.clock.time)
        self.crashed = set()
        # The host: its lock and state files, and its clock (date(1) reads the test's time).
        host = tempfile.mkdtemp(prefix="host-")
        self.lock = os.path.join(host, "var", "lib", "open-gpu-cloud", "passthrough_host.lock")
        self.state = os.path.join(host, "var", "lib", "open-gpu-cloud", "passthrough_host.json")
        self.shim = os.path.join(host, "bin")
        os.makedirs(self.shim)
        with open(os.path.join(self.shim, "date"), "w", encoding="utf-8") as handle:
            handle.write(f"#!/bin/sh\ncat {self.shim}/now\n")
        os.chmod(os.path.join(self.shim, "date"), 0o755)
        self.host = host

    def alive(self, owner, here):
        """What a control host sees of a run: gone if it crashed and ran on the asker's control host."""
        if owner.get("controller_id") != here.get("controller_id"):
            return None
        return owner.get("run") not in self.crashed

    @rule(run=st.integers(0, 3), wave=st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2, unique=True))
    def take_slots(self, run, wave):
        here = RUNS[run]
        if here["run"] in self.crashed:
            return
        lease = be.lease_id_of(here["run"])
        self.backend.grant(lease, self.TTL, here)
        before = self.backend.read()
        try:
            decided = slots.acquire(self.backend, wave[0], wave, self.CAPACITY, here, 0.0, lease, alive=self.alive)
        except leases.SlotsFull:
            after = self.backend.read()
            assert {i: r["run"] for i, r in after.slots.items()} == {i: r["run"] for i, r in before.slots.items()}
            return
        taken = self.backend.read().slots
        mine = {r["host"] for r in taken.values() if r["run"] == here["run"]}
        assert set(wave) <= mine and decided[0] in taken
        # Nothing live of another run was taken: whatever was replaced had run out or its run was gone.
        for index, record in before.slots.items():
            if record["run"] != here["run"] and taken.get(index, {}).get("run") == here["run"]:
                assert leases.holder_state(record, before.now, here, self.alive) in (leases.EXPIRED, leases.GONE)

    @rule(run=st.integers(0, 3))
    def renew(self, run):
        if RUNS[run]["run"] not in self.crashed:
            self.backend.keepalive(be.lease_id_of(RUNS[run]["run"]))

    @rule(run=st.integers(0, 3), host=st.sampled_from(HOSTS))
    def release(self, run, host):
        if RUNS[run]["run"] not in self.crashed:
            slots.release(self.backend, host, RUNS[run])

    @rule(run=st.integers(0, 3))
    def crash(self, run):
        self.crashed.add(RUNS[run]["run"])

    @rule(seconds=st.sampled_from([1, 10, 29, 31, 61]))
    def time_passes(self, seconds):
        self.clock.sleep(seconds)

    @rule(run=st.integers(0, 3), op=st.sampled_from(["take", "renew", "release"]))
    def host_lock(self, run, op):
        """The real host script on a lock file, the host's clock this test's (a date(1) stand-in on its PATH), and
        the action plugin's decision (host_lock.exchange)."""
        here = RUNS[run]
        if here["run"] in self.crashed:
            return
        with open(os.path.join(self.shim, "now"), "w", encoding="utf-8") as handle:
            handle.write(f"{int(self.clock.now)}\n")
        owner = hl.dump(hl.record(here, "since"))

        def call(expect):
            done = subprocess.run(["sh", "-c", hl.HOST_SCRIPT, "host_lock", self.lock, self.state, op, here["run"],
                                   expect, str(self.TTL), "0", owner], capture_output=True, text=True, check=True,
                                  env=dict(os.environ, PATH=f"{self.shim}:{os.environ['PATH']}"))
            return hl.answer(done.stdout, self.lock)

        before = json.loads(open(self.lock, encoding="utf-8").read()) if os.path.exists(self.lock) else None
        state = leases.holder_state(before, int(self.clock.now), here, self.alive)
        verdict, _now, _before, _standing, _detail = hl.exchange(call, here, self.alive)
        after = json.loads(open(self.lock, encoding="utf-8").read()) if os.path.exists(self.lock) else None
        if verdict in ("ACQUIRED", "RENEWED", "TOOK_OVER"):
            assert after["run"] == here["run"] and after["expires"] == int(self.clock.now) + self.TTL
            assert state in (leases.FREE, leases.OURS, leases.EXPIRED, leases.GONE)
        elif verdict == "HELD":
            assert state == leases.HELD and after == before
        elif verdict == "RELEASED":
            assert state == leases.OURS and after is None
        else:
            assert verdict in ("LOST", "KEPT") and state != leases.OURS and after == before

    @invariant()
    def never_more_live_holders_than_the_capacity(self):
        view = self.backend.read()
        assert len(view.slots) <= self.CAPACITY
        assert all(r["expires"] > view.now for r in view.slots.values())
        hosts = [(r["run"], r["host"]) for r in view.slots.values()]
        assert len(hosts) == len(set(hosts))

    @invariant()
    def a_crashed_run_holds_nothing_once_its_lease_ran_out(self):
        view = self.backend.read()
        for record in view.slots.values():
            if record["run"] in self.crashed:
                assert record["expires"] > view.now  # only until its lease runs out

    @invariant()
    def the_host_lock_is_private(self):
        if os.path.exists(self.lock):
            assert os.stat(self.lock).st_mode & 0o777 == 0o600

    def teardown(self):
        import shutil  # pylint: disable=import-outside-toplevel
        shutil.rmtree(self.backend.path, ignore_errors=True)
        shutil.rmtree(self.host, ignore_errors=True)


Coordination.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_random_interleavings_of_take_renew_expire_release_and_crash = Coordination.TestCase
