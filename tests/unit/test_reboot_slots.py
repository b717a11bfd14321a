"""Fleet-wide reboot slots: module_utils/reboot_slots.py (the rule, the files, many processes at once) and the
reboot_slot task (action_plugins/reboot_slot.py: arguments, waiting, refusals, check mode). The slices of a real
sliced run are in tests/integration/test_fleet_waves.py."""

import json
import multiprocessing
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible.module_utils import host_lock as hl
from ansible.module_utils import reboot_slots as rs
from ogc_testlib import load_source

action = load_source("reboot_slot_action", "action_plugins/reboot_slot.py")
waves = load_source("reboot_waves", "filter_plugins/reboot_waves.py")

HERE = {"run": "run-a", "machine_id": "m", "boot_id": "b", "pid": 1, "start_time": 1, "user": "op",
        "controller": "ctl"}
OTHER = dict(HERE, run="run-b", pid=2)


def alive_unless(*gone):
    """An owner_alive stand-in: the runs named are gone, every other run is alive."""
    return lambda owner, here: owner.get("run") not in gone


def test_decide_keeps_the_host_s_slot_takes_free_then_stale_then_refuses():
    slots = {0: dict(OTHER, host="h1")}
    assert rs.decide(slots, "h1", 1, HERE, alive_unless()) == (0, "held", slots[0])
    assert rs.decide(slots, "h2", 2, HERE, alive_unless()) == (1, "free", None)
    assert rs.decide(slots, "h2", 1, HERE, alive_unless("run-b")) == (0, "stale", slots[0])
    with pytest.raises(rs.SlotsFull) as full:
        rs.decide(slots, "h2", 1, HERE, alive_unless())
    assert full.value.holders == [slots[0]] and "h1 (run run-b of op on ctl" in str(full.value)
    # Another control host's run cannot be seen from here: never stale.
    assert pytest.raises(rs.SlotsFull, rs.decide, slots, "h2", 1, HERE, lambda o, h: None)
    # A live holder above the capacity (a run with a larger wave) still counts.
    assert pytest.raises(rs.SlotsFull, rs.decide, {3: dict(OTHER, host="h9")}, "h2", 1, HERE, alive_unless())
    # This run's own hosts are alive whatever the check says.
    assert pytest.raises(rs.SlotsFull, rs.decide, {0: dict(HERE, host="h1")}, "h2", 1, HERE, alive_unless("run-a"))


def test_acquire_release_and_the_files(tmp_path):
    path = str(tmp_path / "slots")
    assert rs.acquire(path, "h1", 2, HERE, 100.0, 200.0) == (0, "free", None)
    assert rs.acquire(path, "h1", 2, HERE, 100.0, 201.0) == (0, "held", json.loads((tmp_path / "slots/slot-0")
                                                                                  .read_text()))
    record = json.loads((tmp_path / "slots" / "slot-0").read_text())
    assert record["host"] == "h1" and record["run"] == "run-a" and record["since"] == "1970-01-01T00:03:20Z"
    assert rs.acquire(path, "h2", 2, HERE, 100.0, 202.0)[:2] == (1, "free")
    with pytest.raises(rs.SlotsFull):
        rs.acquire(path, "h3", 2, HERE, 100.0, 203.0)
    assert rs.release(path, "h1") == [0] and rs.release(path, "h1") == []
    assert rs.acquire(path, "h3", 2, HERE, 100.0, 204.0)[:2] == (0, "free")
    assert sorted(os.listdir(path)) == [".lock", "slot-0", "slot-1"]  # no temporary file left


def test_a_re_run_after_a_crash_keeps_its_slot_under_its_own_name(tmp_path):
    path = str(tmp_path)
    rs.acquire(path, "h1", 1, OTHER, 100.0, 200.0)
    assert rs.acquire(path, "h1", 1, HERE, 300.0, 301.0)[:2] == (0, "held")
    assert json.loads((tmp_path / "slot-0").read_text())["run"] == "run-a"


def test_a_gone_run_s_slot_is_taken_over(tmp_path):
    path = str(tmp_path)
    rs.acquire(path, "h1", 1, OTHER, 100.0, 200.0)
    index, outcome, before = rs.acquire(path, "h2", 1, HERE, 100.0, 201.0, alive=alive_unless("run-b"))
    assert (index, outcome, before["host"]) == (0, "stale", "h1")
    assert json.loads((tmp_path / "slot-0").read_text())["host"] == "h2"


def test_a_stop_newer_than_the_run_refuses_an_older_one_does_not(tmp_path):
    path = str(tmp_path)
    rs.stop(path, "h1", "verification failed", 500.0, OTHER)
    with pytest.raises(rs.RolloutStopped) as stopped:
        rs.acquire(path, "h2", 2, HERE, 400.0, 501.0)
    assert stopped.value.record["host"] == "h1" and "h1 failed at 1970-01-01T00:08:20Z: verification failed" in str(
        stopped.value)
    assert rs.acquire(path, "h2", 2, HERE, 600.0, 601.0)[:2] == (0, "free")  # the operator's next run


def test_check_mode_writes_nothing(tmp_path):
    path = str(tmp_path / "slots")
    assert rs.acquire(path, "h1", 1, HERE, 1.0, 2.0, check=True) == (0, "free", None)
    rs.stop(path, "h1", "x", 3.0, HERE, check=True)
    assert rs.release(path, "h1", check=True) == [] and not os.path.exists(path)
    rs.acquire(path, "h1", 1, HERE, 1.0, 2.0)
    assert rs.release(path, "h1", check=True) == [0] and os.path.exists(os.path.join(path, "slot-0"))


def test_a_foreign_file_is_refused_by_name(tmp_path):
    (tmp_path / "slot-0").write_text("not json")
    with pytest.raises(rs.BadRecord, match="slot-0 is not a reboot slot record"):
        rs.acquire(str(tmp_path), "h1", 1, HERE, 1.0, 2.0)
    (tmp_path / "slot-0").unlink()
    (tmp_path / "stopped.json").write_text(json.dumps({"host": "h1"}))
    with pytest.raises(rs.BadRecord, match="has no time"):
        rs.acquire(str(tmp_path), "h1", 1, HERE, 1.0, 2.0)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 3),
       steps=st.lists(st.tuples(st.sampled_from(["acquire", "release", "die"]), st.integers(0, 5)), max_size=40))
def test_any_interleaving_never_has_more_holders_than_the_capacity(tmp_path_factory, capacity, steps):
    """Hosts h0..h5, each of its own run; "die" ends a host's run (its slot goes stale). Whatever the order, the live
    holders never exceed the capacity, and a host that got a slot holds exactly one."""
    path = str(tmp_path_factory.mktemp("slots"))
    gone = set()
    for verb, number in steps:
        host, run = f"h{number}", f"run-{number}"
        if verb == "die":
            gone.add(run)
        elif verb == "release":
            rs.release(path, host)
        elif run not in gone:
            try:
                rs.acquire(path, host, capacity, dict(HERE, run=run), 0.0, 1.0, alive=alive_unless(*gone))
            except rs.SlotsFull:
                pass
        slots = rs.read_slots(path)
        live = [r for r in slots.values() if r["run"] not in gone]
        assert len(live) <= capacity
        assert len({r["host"] for r in slots.values()}) == len(slots)


def _compete(path, host, capacity, log):
    """One control-host process: take a slot, hold it a moment, note when, give it back."""
    here = dict(hl.identity(os.getpid()), run=f"run-{host}")
    while True:
        try:
            rs.acquire(path, host, capacity, here, 0.0, time.time())
            break
        except rs.SlotsFull:
            time.sleep(0.01)
    start = time.time()
    time.sleep(0.05)
    end = time.time()
    rs.release(path, host)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps([start, end]) + "\n")


def test_processes_competing_never_exceed_the_capacity(tmp_path):
    path, log = str(tmp_path / "slots"), str(tmp_path / "held.jsonl")
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
    assert rs.read_slots(path) == {}


# ---- the task (action_plugins/reboot_slot.py) -------------------------------------------------------------------

def args(tmp_path, **extra):
    return action.check_args(dict(dict(path=str(tmp_path), capacity=1, run_started=100.0), **extra), "h1")


@pytest.mark.parametrize("bad, message", [
    ({"capacity": "2"}, "capacity='2' (str) must be an int"),
    ({"capacity": True}, "capacity=True (bool) must be an int"),
    ({"capacity": 0}, "capacity=0 (int) must be an int of at least 1"),
    ({"timeout": "60"}, "timeout='60' (str) must be a number"),
    ({"run_started": None}, "run_started=None (NoneType) must be a number"),
    ({"path": "slots"}, "path='slots' must be an absolute path"),
    ({"state": "held"}, "state='held' must be one of acquired, released, stopped"),
    ({"host": 3}, "host=3 (int) must be a string"),
    ({"bogus": 1}, "unsupported option(s): bogus"),
])
def test_bad_arguments_are_refused_not_converted(tmp_path, bad, message):
    with pytest.raises(action.SlotArgumentError) as exc:
        args(tmp_path, **bad)
    assert message in str(exc.value)


def test_acquired_needs_a_capacity_and_a_start(tmp_path):
    with pytest.raises(action.SlotArgumentError, match="state=acquired needs capacity"):
        action.check_args({"path": str(tmp_path), "run_started": 1.0}, "h1")
    assert action.check_args({"path": str(tmp_path), "state": "released"}, "h1")["host"] == "h1"


class Clock:
    """time.time and time.sleep of a test: sleeping moves the clock."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_task_waits_then_fails_naming_the_holders_and_the_fix(tmp_path):
    rs.acquire(str(tmp_path), "h9", 1, OTHER, 0.0, 900.0)
    clock = Clock()
    result = action.slot_task(args(tmp_path, timeout=3), dict(HERE, machine_id="elsewhere"), clock=clock.time,
                              sleep=clock.sleep)
    assert result["failed"] and result["waited"] == 3 and clock.now == 1003.0
    assert result["holders"][0]["host"] == "h9"
    assert result["msg"].startswith("h1: no fleet-wide reboot slot free after 3 s; all 1 fleet-wide reboot slot(s) "
                                    "are held: h9 (run run-b of op on ctl")
    assert "holding it since 1970-01-01T00:15:00Z" in result["msg"]
    assert "raise passthrough_host_reboot_slot_timeout" in result["msg"] and f"{tmp_path}/slot-0" in result["msg"]


def test_the_task_takes_the_slot_once_it_is_given_back(tmp_path):
    rs.acquire(str(tmp_path), "h9", 1, OTHER, 0.0, 900.0)
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        rs.release(str(tmp_path), "h9")

    # Seen from another control host, h9's run cannot be checked: its slot is waited for, not taken over.
    result = action.slot_task(args(tmp_path, timeout=60), dict(HERE, machine_id="elsewhere"), clock=clock.time,
                              sleep=sleep)
    assert not result.get("failed") and (result["slot"], result["outcome"], result["waited"]) == (0, "free", 1.0)


def test_a_stop_record_fails_the_task_naming_the_failed_host(tmp_path):
    action.slot_task(args(tmp_path, state="stopped", host="gpu-001", reason="the verification failed"), OTHER,
                     clock=lambda: 200.0)
    result = action.slot_task(args(tmp_path, timeout=60), HERE)
    assert result["failed"] and result["stopped"]["host"] == "gpu-001"
    assert ("h1: no reboot slot: gpu-001 failed at 1970-01-01T00:03:20Z: the verification failed" in result["msg"]
            and "The rollout stops on this slice too" in result["msg"])
    assert not action.slot_task(args(tmp_path, run_started=300.0), HERE).get("failed")


def test_check_mode_reports_and_writes_nothing(tmp_path):
    path = tmp_path / "slots"
    done = action.slot_task(action.check_args({"path": str(path), "capacity": 1, "run_started": 1.0}, "h1"), HERE,
                            check=True)
    assert (done["slot"], done["outcome"]) == (0, "free") and not path.exists()
    rs.acquire(str(path), "h9", 1, OTHER, 0.0, 900.0)
    done = action.slot_task(action.check_args({"path": str(path), "capacity": 1, "run_started": 1.0,
                                               "timeout": 60}, "h1"), dict(HERE, machine_id="elsewhere"), check=True)
    assert not done.get("failed") and done["outcome"] == "full" and "would wait" in done["msg"]
    assert sorted(os.listdir(path)) == [".lock", "slot-0"]


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
    path = str(tmp_path / "slots")
    assert rs.acquire(path, "a1", 2, HERE, 0.0, 1.0, wave=["a1", "a2"])[:2] == (0, "free")
    with pytest.raises(rs.SlotsFull):
        rs.acquire(path, "b1", 2, OTHER, 0.0, 2.0, wave=["b1", "b2"], alive=alive_unless())
    assert sorted(r["host"] for r in rs.read_slots(path).values()) == ["a1", "a2"]
    # a2 finds its slot taken for it; then the wave ends, and the other run's wave takes both.
    assert rs.acquire(path, "a2", 2, HERE, 0.0, 3.0, wave=["a1", "a2"])[:2] == (1, "held")
    rs.release(path, "a1")
    with pytest.raises(rs.SlotsFull):  # one slot free: not enough for a wave of two
        rs.acquire(path, "b2", 2, OTHER, 0.0, 4.0, wave=["b1", "b2"], alive=alive_unless())
    rs.release(path, "a2")
    assert rs.acquire(path, "b2", 2, OTHER, 0.0, 5.0, wave=["b1", "b2"], alive=alive_unless())[:2] == (0, "free")
    assert {r["host"]: i for i, r in rs.read_slots(path).items()} == {"b2": 0, "b1": 1}


def test_a_wave_larger_than_the_slots_is_refused(tmp_path):
    with pytest.raises(rs.SlotError, match="a wave of 3 host"):
        rs.acquire(str(tmp_path), "a1", 2, HERE, 0.0, 1.0, wave=["a1", "a2", "a3"])


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 4), waves=st.lists(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4,
                                                            unique=True), min_size=1, max_size=8))
def test_waves_never_take_more_than_the_capacity_and_take_all_or_none(tmp_path_factory, capacity, waves):
    path = str(tmp_path_factory.mktemp("waves"))
    for number, wave in enumerate(waves):
        before = {r["host"] for r in rs.read_slots(path).values()}
        try:
            rs.acquire(path, wave[0], capacity, dict(HERE, run=f"run-{number % 2}"), 0.0, 1.0, wave=wave,
                       alive=alive_unless())
        except rs.SlotError:
            after = {r["host"] for r in rs.read_slots(path).values()}
            assert after == before  # none taken
        else:
            after = {r["host"] for r in rs.read_slots(path).values()}
            assert set(wave) <= after and after - set(wave) <= before  # all taken, nothing else
        assert len(rs.read_slots(path)) <= capacity
        if number % 3 == 2:
            for host in wave:
                rs.release(path, host)
