"""Records the project did not write, and a stop record from the future: a file in the coordination directory that
is no record of the project's is not read; a stop record dated further ahead of this control host's clock than
leases.CLOCK_SKEW is refused as from the future, naming both clocks and how to remove it, not taken for a failure
that holds back every run until then. The same on a real etcd (a foreign key put under the prefix):
tests/integration/coordination/test_foreign_records.py."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ogc_testlib import collection_plugin

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots

action = collection_plugin("action", "reboot_slot")


def holder(name, controller="ctl-a"):
    return {"run": ident.digest("test", name), "controller": controller, "controller_id": ident.digest(controller),
            "boot": ident.digest("boot"), "user": "op", "pid": 1, "start_time": 1}


A, B = holder("a"), holder("b", controller="ctl-b")


class Clock:
    def __init__(self, now):
        self.now = now

    def time(self):
        return self.now


def test_a_stop_record_from_the_future_is_named_with_both_clocks_and_how_to_remove_it(tmp_path):
    clock = Clock(1_800_000_000.0)   # 2027-01-15T08:00:00Z
    backend = be.FileBackend(str(tmp_path / "coordination"), clock=clock.time)
    slots.stop(backend, "gpu-007", "the verification failed", B, clock.now + 86_400)  # ctl-b's clock a day ahead
    lease = be.lease_id_of(A["run"])
    backend.grant(lease, 60, A)
    with pytest.raises(leases.StopFromFuture) as exc:
        slots.acquire(backend, "h1", [], 1, A, clock.now - 10, lease)
    assert str(exc.value) == (
        "the fleet-wide stop record is dated 2027-01-16T08:00:00Z by the clock of ctl-b, 86400 s ahead of this control "
        "host's clock (2027-01-15T08:00:00Z; more than the 300 s two clocks may differ): gpu-007 failed at "
        "2027-01-16T08:00:00Z: the verification failed. A record from the future would hold back every run started "
        "before that time. Check the clocks of ctl-b and of this control host (timedatectl; chronyc tracking), then, "
        "once no run of playbooks/host.yml is rebooting a host, remove the record "
        f"(rm {tmp_path}/coordination/stopped.json) and run again")
    # The task: failed, naming it, the host untouched (no slot taken).
    done = action.slot_task(action.check_args(dict(url=f"file://{tmp_path}/coordination", capacity=1,
                                                   run_started=clock.now - 10), "h1"),
                            A, backend, clock=clock.time, session=lambda store: lease)
    assert done["failed"] and done["msg"].startswith("h1: no reboot slot: the fleet-wide stop record is dated "
                                                     "2027-01-16T08:00:00Z by the clock of ctl-b, 86400 s ahead")
    assert backend.read().slots == {}


def test_a_stop_record_a_little_ahead_is_a_stop_and_one_before_the_run_holds_nothing_back(tmp_path):
    clock = Clock(1_800_000_000.0)
    backend = be.FileBackend(str(tmp_path / "coordination"), clock=clock.time)
    slots.stop(backend, "gpu-007", "the reboot failed", B, clock.now + leases.CLOCK_SKEW - 1)
    lease = be.lease_id_of(A["run"])
    backend.grant(lease, 60, A)
    with pytest.raises(leases.RolloutStopped, match="gpu-007 failed at"):
        slots.acquire(backend, "h1", [], 1, A, clock.now - 10, lease)
    slots.stop(backend, "gpu-007", "the reboot failed", B, clock.now - 100)
    assert slots.acquire(backend, "h1", [], 1, A, clock.now - 10, lease)[:2] == (0, leases.FREE)


@given(stop=st.floats(0, 4e9), now=st.floats(1, 4e9), started=st.floats(0, 4e9))
def test_check_stop_refuses_a_future_record_else_stops_only_the_runs_started_before_it(stop, now, started):
    record = {"time": stop, "host": "h", "controller": "c"}
    if stop > now + leases.CLOCK_SKEW:
        with pytest.raises(leases.StopFromFuture, match="ahead of this control host's clock"):
            leases.check_stop(record, started, now)
    elif stop > started:
        with pytest.raises(leases.RolloutStopped):
            leases.check_stop(record, started, now)
    else:
        leases.check_stop(record, started, now)


@pytest.mark.parametrize("time_", [True, "2027-01-01", None, [1]])
def test_a_stop_record_without_a_numeric_time_holds_nothing_back(time_):
    leases.check_stop({"time": time_, "host": "h"}, 0.0, 1.0)


def test_files_that_are_not_the_project_s_records_are_not_read(tmp_path):
    backend = be.FileBackend(str(tmp_path / "coordination"))
    lease = be.lease_id_of(A["run"])
    backend.grant(lease, 60, A)
    for name in ("README", "slot-x", "slot-", "notes.json", "stopped.json.bak"):
        with open(os.path.join(backend.path, name), "w", encoding="utf-8") as handle:
            handle.write("not json at all")
    assert slots.acquire(backend, "h1", [], 1, A, 0.0, lease) == (0, leases.FREE, None)
    assert backend.read().stop is None and list(backend.read().slots) == [0]
