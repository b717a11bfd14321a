"""The keeper's bounds, derived from the lease (plugins/module_utils/coordination/keeper.py): its first renewal is
due a third of the TTL after the grant, not after its own start (at once when the start took longer); a renewal that
came late, and a lease that ran out before it, are logged with the TTL, the time measured and the fix; the start
window is a variable of the role, refused when it is no number of seconds; the directory backend's flock is waited
for no longer than the read timeout."""

from __future__ import annotations

import fcntl
import time

import pytest

from ogc_testlib import collection_plugin

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import keeper

action = collection_plugin("action", "reboot_slot")
checks = collection_plugin("filter", "passthrough_host_checks")


class Clock:
    def __init__(self):
        self.now = 0.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Backend:
    """keepalive answers from a script (a number of seconds left), and notes when it was asked."""

    def __init__(self, clock, answers=()):
        self.clock, self.answers, self.asked, self.revoked = clock, list(answers), [], []

    def keepalive(self, lease):
        self.asked.append(round(self.clock.now, 2))
        return self.answers.pop(0) if self.answers else 30

    def revoke(self, lease):
        self.revoked.append(lease)


def keep(tmp_path, backend, clock, until, granted_age=0.0, ttl=30):
    logged = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ident, "process_start", lambda pid, proc="/proc": 7 if clock.now < until else None)
        status = keeper.keep(backend, 42, ttl, 1, 7, str(tmp_path / "keeper-x.json"), clock=clock.time,
                             sleep=clock.sleep, log=logged.append, granted_age=granted_age)
    return status, logged


@pytest.mark.parametrize("granted_age, first", [(0.0, 10.0), (4.0, 6.0), (9.9, 0.1), (25.0, 0.0)])
def test_the_first_renewal_is_due_a_third_of_the_ttl_after_the_grant_whatever_the_start_took(tmp_path, granted_age,
                                                                                          first):
    clock = Clock()
    backend = Backend(clock)
    status, _logged = keep(tmp_path, backend, clock, until=first + 0.6, granted_age=granted_age)
    assert status == 0 and len(backend.asked) == 1 and first <= backend.asked[0] <= first + 0.5


def test_a_lease_that_ran_out_before_its_renewal_is_logged_with_the_ttl_the_time_measured_and_the_fix(tmp_path):
    clock = Clock()
    status, logged = keep(tmp_path, Backend(clock, answers=[-1]), clock, until=100, granted_age=31.0)
    assert status == 1
    assert logged[-1].startswith("keeper of lease 42: the lease ran out or was revoked: nothing left to keep (last "
                                 "renewed 31.0 s before, measured; its TTL 30 s, passthrough_rollout_lease_ttl). When "
                                 "this control host was too loaded to renew it within the TTL (load average ")
    assert logged[-1].endswith("raise passthrough_rollout_lease_ttl")


def test_a_late_renewal_is_logged_naming_the_interval_and_the_ttl(tmp_path):
    clock = Clock()
    backend = Backend(clock)
    status, logged = keep(tmp_path, backend, clock, until=1, granted_age=25.0)
    assert status == 0 and backend.asked == [0.0]
    assert logged[0].startswith("keeper of lease 42: renewed 25.0 s after the last renewal, not every 10.0 s (a third "
                                "of passthrough_rollout_lease_ttl 30 s): this control host is loaded (load average ")


@pytest.mark.parametrize("value, words", [
    (0, "keeper_start_timeout=0 (int) must be a number of at least 1"),
    ("60", "keeper_start_timeout='60' (str) must be a number of at least 1"),
    (True, "keeper_start_timeout=True (bool) must be a number of at least 1"),
])
def test_the_start_window_is_refused_when_it_is_no_number_of_seconds(tmp_path, value, words):
    with pytest.raises(action.SlotArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")):
        action.check_args(dict(url=f"file://{tmp_path}/c", capacity=1, run_started=1.0, keeper_start_timeout=value),
                          "h1")
    assert action.check_args(dict(url=f"file://{tmp_path}/c", capacity=1, run_started=1.0), "h1")[
        "keeper_start_timeout"] == keeper.START_TIMEOUT == 60


def test_the_rollout_s_check_refuses_a_start_window_below_a_second():
    errors = checks.rollout_var_errors({"passthrough_rollout_keeper_start_timeout": 0}, "h1")
    assert errors == ["h1: passthrough_rollout_keeper_start_timeout (0) must be a number of seconds (an int: the lease "
                      "at least 5, a timeout at least 1)."]


def test_a_coordination_directory_whose_lock_stays_held_fails_after_the_read_timeout_naming_it(tmp_path):
    backend = be.open_backend(f"file://{tmp_path}/coordination", 1, 1)
    backend.put_stop({"time": 1.0})
    with open(tmp_path / "coordination" / ".lock", "r+", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process keeps it (stopped while holding it)
        started = time.monotonic()
        with pytest.raises(be.Unavailable) as exc:
            backend.read()
        assert 1 <= time.monotonic() - started < 3
    assert str(exc.value).startswith(f"the coordination directory file://{tmp_path}/coordination: its lock "
                                     f"{tmp_path}/coordination/.lock stayed held by another process for 1.")
    assert "longer than 1 s (passthrough_rollout_coordination_read_timeout); find it with: fuser" in str(exc.value)
    assert backend.read().stop == {"time": 1.0}  # free again: read at once


@pytest.mark.parametrize("url, batch, play_hosts, refused", [
    ("etcd3+http://127.0.0.1:2379/ogc", 129, 400, True),      # a wave of 129 hosts: more than etcd's 128 operations
    ("etcd3+http://127.0.0.1:2379/ogc", 200, 129, True),      # the batch bounded by the play's hosts: still 129
    ("etcd3+http://127.0.0.1:2379/ogc", 129, 128, False),     # no wave of this run can hold more than 128
    ("etcd3+http://127.0.0.1:2379/ogc", 128, 400, False),
    ("etcd3+http://127.0.0.1:2379/ogc", "50%", 400, False),   # of the fleet: checked when the waves are planned
    ("file:///srv/ogc/coordination", 500, 1000, False),       # a directory backend has no such limit
])
def test_the_rollout_s_check_refuses_a_wave_the_coordination_backend_cannot_take(url, batch, play_hosts, refused):
    values = {"passthrough_rollout_coordination_url": url, "passthrough_rollout_reboot_batch": batch}
    errors = [e for e in checks.rollout_var_errors(values, "h1", play_hosts) if "passthrough_rollout_reboot_batch" in e]
    if refused:
        (error,) = errors
        assert error.startswith("h1: passthrough_rollout_reboot_batch gives a wave of 129 hosts, and "
                                "etcd3+http://127.0.0.1:2379/ogc takes a wave's reboot slots in one transaction of at "
                                "most 128 operations")
        assert 'give a batch of at most 128 hosts, e.g. {"passthrough_rollout_reboot_batch": 128}' in error
    else:
        assert errors == []


def test_the_planned_waves_are_held_to_what_the_backend_takes():
    """A percentage's waves, known once the fleet is counted (roles/passthrough_rollout tasks/plan.yml)."""
    url = "etcd3+http://127.0.0.1:2379/ogc"
    waves = {"size": 130, "waves": [["h0"], [f"h{n}" for n in range(1, 131)]]}
    (error,) = checks.wave_errors(waves, url, "h0")
    assert error.startswith("h0: passthrough_rollout_reboot_batch gives a wave of 130 hosts")
    assert checks.wave_errors({"size": 128, "waves": [["h0"], [f"h{n}" for n in range(1, 129)]]}, url, "h0") == []
    assert checks.wave_errors(waves, "file:///srv/ogc/coordination", "h0") == []
    assert checks.wave_errors({"size": 1, "waves": []}, url, "h0") == []
    assert checks.wave_errors(waves, "etcd3+http://user:secret@127.0.0.1:2379", "h0") == []  # the check refused it
