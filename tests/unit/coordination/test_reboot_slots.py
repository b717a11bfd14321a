"""Fleet-wide reboot slots: the reboot_slot task (plugins/action/reboot_slot.py: arguments, waiting, refusals,
check mode, a lost lease, a service that is gone) on the directory backend, many processes at once, and the waves'
all-or-none rule. The same on a real etcd, and the slices of real sliced runs, are in tests/integration/."""

import json
import multiprocessing
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import collection_plugin, load_source

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots
action = collection_plugin("action", "reboot_slot")
waves = collection_plugin("filter", "reboot_waves")


def holder(name, controller="ctl"):
    return {"run": ident.digest("test", name), "controller": controller, "controller_id": ident.digest(controller),
            "boot": ident.digest("boot"), "user": "op", "pid": 1, "start_time": 1}


HERE, OTHER = holder("a"), holder("b", controller="elsewhere")


class Clock:
    """time.time and time.sleep of a test: sleeping moves the clock."""

    def __init__(self, now=1000.0):
        self.now = now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def backend_at(tmp_path, clock=None):
    return be.FileBackend(str(tmp_path / "coordination"), clock=(clock or Clock()).time)


def hold(backend, host, here, ttl=600, capacity=1):
    lease = be.lease_id_of(here["run"])
    backend.grant(lease, ttl, here)
    return slots.acquire(backend, host, [], capacity, here, 0.0, lease)


def args(tmp_path, **extra):
    return action.check_args(dict(dict(url=f"file://{tmp_path}/coordination", capacity=1, run_started=100.0),
                                  **extra), "h1")


def session_of(backend, ttl=600):
    def session(store):
        lease = be.lease_id_of(HERE["run"])
        store.grant(lease, ttl, HERE)
        return lease
    return session


@pytest.mark.parametrize("bad, message", [
    ({"capacity": "2"}, "capacity='2' (str) must be an int"),
    ({"capacity": True}, "capacity=True (bool) must be an int"),
    ({"capacity": 0}, "capacity=0 (int) must be an int of at least 1"),
    ({"timeout": "60"}, "timeout='60' (str) must be a number"),
    ({"run_started": None}, "run_started=None (NoneType) must be a number"),
    ({"lease_ttl": 2}, "lease_ttl=2 (int) must be an int of at least 5"),
    ({"read_timeout": "10"}, "read_timeout='10' (str) must be a number"),
    ({"url": "slots"}, "passthrough_rollout_coordination_url (slots) is not a URL: give file:///<directory> or"),
    ({"url": "etcd3+http://root:pw@etcd:2379"}, "carries credentials"),
    ({"state": "held"}, "state='held' must be one of acquired, confirmed, released, stopped, finished"),
    ({"host": 3}, "host=3 (int) must be a string"),
    ({"bogus": 1}, "unsupported option(s): bogus"),
])
def test_bad_arguments_are_refused_not_converted(tmp_path, bad, message):
    with pytest.raises(leases.LeaseError) as exc:
        args(tmp_path, **bad)
    assert message in str(exc.value) and "pw@" not in str(exc.value)


def test_acquired_needs_a_capacity_and_a_start(tmp_path):
    with pytest.raises(action.SlotArgumentError, match="state=acquired needs capacity"):
        action.check_args({"url": f"file://{tmp_path}", "run_started": 1.0}, "h1")
    assert action.check_args({"url": f"file://{tmp_path}", "state": "released"}, "h1")["host"] == "h1"


def test_the_task_waits_then_fails_naming_the_holders_when_their_leases_run_out_and_the_fix(tmp_path):
    clock = Clock()
    backend = backend_at(tmp_path, clock)
    hold(backend, "h9", OTHER, ttl=600)
    result = action.slot_task(args(tmp_path, timeout=3), HERE, backend, clock=clock.time, sleep=clock.sleep,
                              session=session_of(backend))
    assert result["failed"] and result["waited"] == 3 and clock.now == 1003.0
    assert result["holders"][0]["host"] == "h9"
    assert result["msg"].startswith("h1: no fleet-wide reboot slot free after 3 s; all 1 fleet-wide reboot slot(s) "
                                    f"are held: h9 (run {OTHER['run']} of op on elsewhere")
    assert "its lease runs until 1970-01-01T00:26:40Z (597 s from now) unless renewed" in result["msg"]
    assert "raise passthrough_rollout_reboot_slot_timeout" in result["msg"]


def test_a_dead_holder_s_slot_frees_itself_when_its_lease_runs_out(tmp_path):
    clock = Clock()
    backend = backend_at(tmp_path, clock)
    hold(backend, "h9", OTHER, ttl=30)      # its run died: nobody renews it
    result = action.slot_task(args(tmp_path, timeout=60), HERE, backend, clock=clock.time, sleep=clock.sleep,
                              session=session_of(backend))
    assert not result.get("failed") and (result["slot"], result["outcome"]) == (0, "free") and result["waited"] == 30


def test_the_task_takes_the_slot_once_it_is_given_back(tmp_path):
    clock = Clock()
    backend = backend_at(tmp_path, clock)
    hold(backend, "h9", OTHER)

    def sleep(seconds):
        clock.sleep(seconds)
        slots.release(backend, "h9", OTHER)

    result = action.slot_task(args(tmp_path, timeout=60), HERE, backend, clock=clock.time, sleep=sleep,
                              session=session_of(backend))
    assert not result.get("failed") and (result["slot"], result["outcome"], result["waited"]) == (0, "free", 1.0)


def test_a_stop_record_fails_the_task_naming_the_failed_host(tmp_path):
    backend = backend_at(tmp_path)
    action.slot_task(args(tmp_path, state="stopped", host="gpu-001", reason="the verification failed"), OTHER,
                     backend, clock=lambda: 200.0)
    result = action.slot_task(args(tmp_path, timeout=60), HERE, backend, session=session_of(backend))
    assert result["failed"] and result["stopped"]["host"] == "gpu-001"
    assert ("h1: no reboot slot: gpu-001 failed at 1970-01-01T00:03:20Z: the verification failed" in result["msg"]
            and "The rollout stops on this run too" in result["msg"])
    assert not action.slot_task(args(tmp_path, run_started=300.0), HERE, backend,
                                session=session_of(backend)).get("failed")


def test_confirm_fails_once_the_lease_ran_out(tmp_path):
    clock = Clock()
    backend = backend_at(tmp_path, clock)
    action.slot_task(args(tmp_path), HERE, backend, clock=clock.time, session=session_of(backend, ttl=30))
    assert action.slot_task(args(tmp_path, state="confirmed"), HERE, backend)["slot"] == 0
    clock.sleep(31)
    result = action.slot_task(args(tmp_path, state="confirmed"), HERE, backend)
    assert result["failed"] and "lease in file://" in result["msg"] and "ran out or was revoked" in result["msg"]
    assert "The host is not rebooted outside a slot" in result["msg"]
    assert "(the keeper renews the run's lease every third of passthrough_rollout_lease_ttl, 60 s); on a control " \
        "host too loaded to renew within that (load average " in result["msg"]
    assert "raise passthrough_rollout_lease_ttl. The keeper's log says which: " in result["msg"]
    assert f"keeper-{HERE['run']}.log" in result["msg"]


class Gone:
    """A backend whose service cannot be reached."""

    shown = "etcd3+http://127.0.0.1:9"

    def __getattr__(self, name):
        def unreachable(*_args, **_kwargs):
            raise be.Unavailable(f"the coordination service {self.shown} cannot be reached (connect timeout 5 s, "
                                 "read timeout 10 s): connection refused")
        return unreachable


def test_a_service_that_is_gone_refuses_a_slot_and_only_warns_when_giving_back(tmp_path):
    result = action.slot_task(args(tmp_path), HERE, Gone(), session=lambda store: store.grant())
    assert result["failed"] and result["msg"].startswith("h1: the coordination service etcd3+http://127.0.0.1:9 "
                                                         "cannot be reached")
    assert "No reboot starts without a fleet-wide slot" in result["msg"]
    for state in ("released", "stopped", "finished"):
        done = action.slot_task(args(tmp_path, state=state), HERE, Gone())
        assert not done.get("failed") and "cannot be reached" in done["warnings"][0], state


def test_check_mode_reports_and_writes_nothing(tmp_path):
    path = tmp_path / "coordination"
    backend = backend_at(tmp_path)
    done = action.slot_task(args(tmp_path), HERE, backend, check=True)
    assert (done["slot"], done["outcome"]) == (0, "free") and not path.exists()
    hold(backend, "h9", OTHER)
    before = sorted(os.listdir(path))
    done = action.slot_task(args(tmp_path, timeout=60), HERE, backend, check=True)
    assert not done.get("failed") and done["outcome"] == "full" and "would wait" in done["msg"]
    assert sorted(os.listdir(path)) == before


def test_the_fleet_is_the_larger_of_the_play_and_the_plans():
    assert waves.fleet_size(["a", "b", "c"], [f"/p/{i}.json" for i in range(6)]) == 6
    assert waves.fleet_size(["a", "b"], []) == 2
    # A percentage of the fleet, not of the slice: 34% of 6 is 2 where 34% of the slice of 3 would be 1.
    assert waves.wave_size("34%", waves.fleet_size(["a", "b", "c"], ["x"] * 6)) == 2
    with pytest.raises(waves.AnsibleFilterError, match="plan_files must be a list"):
        waves.fleet_size(["a"], "x")


def test_a_wave_takes_its_slots_all_at_once_or_none(tmp_path):
    # Two runs (slices), waves of two, two slots. Taken one host at a time, each run's first host could hold one
    # slot and wait for its wave-mate's, which the other run holds: neither wave would ever go on. A wave's first
    # host takes the slots of the whole wave, or none.
    backend = backend_at(tmp_path)
    mine, theirs = (be.lease_id_of(h["run"]) for h in (HERE, OTHER))
    backend.grant(mine, 600, HERE)
    backend.grant(theirs, 600, OTHER)
    assert slots.acquire(backend, "a1", ["a1", "a2"], 2, HERE, 0.0, mine)[:2] == (0, "free")
    with pytest.raises(leases.SlotsFull):
        slots.acquire(backend, "b1", ["b1", "b2"], 2, OTHER, 0.0, theirs)
    assert sorted(r["host"] for r in backend.read().slots.values()) == ["a1", "a2"]
    # a2 finds its slot taken for it; then the wave ends, and the other run's wave takes both.
    assert slots.acquire(backend, "a2", ["a1", "a2"], 2, HERE, 0.0, mine)[:2] == (1, "ours")
    slots.release(backend, "a1", HERE)
    with pytest.raises(leases.SlotsFull):  # one slot free: not enough for a wave of two
        slots.acquire(backend, "b2", ["b1", "b2"], 2, OTHER, 0.0, theirs)
    slots.release(backend, "a2", HERE)
    assert slots.acquire(backend, "b2", ["b1", "b2"], 2, OTHER, 0.0, theirs)[:2] == (0, "free")
    assert {r["host"]: i for i, r in backend.read().slots.items()} == {"b2": 0, "b1": 1}


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 4), waves_=st.lists(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4,
                                                             unique=True), min_size=1, max_size=8))
def test_waves_never_take_more_than_the_capacity_and_take_all_or_none(tmp_path_factory, capacity, waves_):
    backend = be.FileBackend(str(tmp_path_factory.mktemp("waves") / "c"))
    runs = [holder("r0"), holder("r1")]
    for here in runs:
        backend.grant(be.lease_id_of(here["run"]), 600, here)
    for number, wave in enumerate(waves_):
        here = runs[number % 2]
        before = {(r["run"], r["host"]) for r in backend.read().slots.values()}
        try:
            slots.acquire(backend, wave[0], wave, capacity, here, 0.0, be.lease_id_of(here["run"]),
                          alive=lambda o, h: None)
        except leases.SlotError:
            assert {(r["run"], r["host"]) for r in backend.read().slots.values()} == before  # none taken
        else:
            after = {(r["run"], r["host"]) for r in backend.read().slots.values()}
            assert {(here["run"], h) for h in wave} <= after and after - {(here["run"], h) for h in wave} <= before
        assert len(backend.read().slots) <= capacity
        if number % 3 == 2:
            for host in wave:
                slots.release(backend, host, here)


def _compete(path, host, capacity, log):
    """One control-host process: take a slot, hold it a moment, note when, give it back."""
    here = dict(ident.identity(os.getpid()), run=ident.digest("compete", host))
    backend = be.FileBackend(path)
    lease = be.lease_id_of(here["run"])
    backend.grant(lease, 600, here)
    while True:
        try:
            slots.acquire(backend, host, [], capacity, here, 0.0, lease)
            break
        except leases.SlotsFull:
            time.sleep(0.01)
    start = time.time()
    time.sleep(0.05)
    end = time.time()
    slots.release(backend, host, here)
    backend.revoke(lease)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps([start, end]) + "\n")


def test_processes_competing_never_exceed_the_capacity(tmp_path):
    path, log = str(tmp_path / "coordination"), str(tmp_path / "held.jsonl")
    procs = [multiprocessing.Process(target=_compete, args=(path, f"h{i}", 2, log)) for i in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert all(proc.exitcode == 0 for proc in procs)
    with open(log, encoding="utf-8") as handle:
        spans = [json.loads(line) for line in handle]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _moment, step in events:
        running += step
        peak = max(peak, running)
    assert len(spans) == 8 and peak <= 2
    assert be.FileBackend(path).read().slots == {} and sorted(os.listdir(path)) == [".lock"]
