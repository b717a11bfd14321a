"""The host phase's lock on the GPU host: plugins/module_utils/coordination/host_lock.py's HOST_SCRIPT (taken, renewed,
released, taken over only as judged, under a flock on the host, paths checked) and ``exchange``, the lease rules
the action plugin applies to what the host reports. Real runs that overlap or die are in
tests/integration/host/test_passthrough_host_runs.py."""

import json
import multiprocessing
import os
import subprocess

import pytest

from ogc_testlib import collection_plugin

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import host_lock as hl
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases
action = collection_plugin("action", "host_lock")
LOCK = "var/lib/open-gpu-cloud/passthrough_host.lock"
STATE = "var/lib/open-gpu-cloud/passthrough_host.json"


def holder(name, controller="ctl"):
    return {"run": ident.digest("test", name), "controller": controller, "controller_id": ident.digest(controller),
            "boot": ident.digest("boot"), "user": "op", "pid": 1, "start_time": 1}


A, B = holder("a"), holder("b", controller="elsewhere")


@pytest.fixture
def host(tmp_path):
    """HOST_SCRIPT as the action plugin runs it on a host whose clock (date(1)) reads the test's time."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "date").write_text(f"#!/bin/sh\ncat {shim}/now\n")
    (shim / "date").chmod(0o755)

    def run(op, here, now=1000, seconds=60, expect="", check=False, lock=LOCK, state=STATE):
        (shim / "now").write_text(f"{now}\n")
        owner = hl.dump(hl.record(here, "2026-11-26T07:00:00Z"))
        done = subprocess.run(["sh", "-c", hl.HOST_SCRIPT, "host_lock", str(tmp_path / lock), str(tmp_path / state),
                               op, here["run"], expect, str(seconds), "1" if check else "0", owner],
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}"))
        assert done.returncode == 0, done.stderr
        return hl.answer(done.stdout, lock)

    run.path = tmp_path / LOCK
    return run


def lock_file(host):
    return json.loads(host.path.read_text()) if host.path.exists() else None


def test_taken_renewed_refused_to_another_released_only_by_its_own(host):
    verdict, now, _sum, before, _ = host("take", A, now=1000, seconds=60)
    assert (verdict, now, before) == ("ACQUIRED", 1000, None)
    record = lock_file(host)
    assert record["run"] == A["run"] and record["expires"] == 1060 and record["since"].endswith("Z")
    assert host.path.stat().st_mode & 0o777 == 0o600 and "machine_id" not in record
    assert host("take", A, now=1010, seconds=60)[0] == "RENEWED" and lock_file(host)["expires"] == 1070
    assert host("renew", A, now=1020, seconds=600)[0] == "RENEWED" and lock_file(host)["expires"] == 1620
    verdict, now, _sum, before, _ = host("take", B, now=1030)
    assert verdict == "HELD" and now == 1030 and before["run"] == A["run"] and lock_file(host)["run"] == A["run"]
    assert host("release", B)[0] == "KEPT" and lock_file(host)["run"] == A["run"]
    assert host("renew", B)[0] == "LOST"
    assert host("release", A)[0] == "RELEASED" and lock_file(host) is None
    assert not [n for n in os.listdir(host.path.parent) if n.startswith(".host_lock")]   # no temporary file left
    assert host("renew", A)[0] == "LOST"        # gone: this run holds it no more


def test_a_takeover_is_written_only_over_the_record_that_was_judged(host):
    host("take", A, now=1000, seconds=60)
    verdict, _now, total, _before, _ = host("take", B, now=1100)
    assert verdict == "HELD"
    host("take", A, now=1101, seconds=60)                       # renewed meanwhile: another record now
    assert host("take", B, now=1102, expect=total)[0] == "HELD" and lock_file(host)["run"] == A["run"]
    _verdict, _now, total, _before, _ = host("take", B, now=1103)
    verdict, _now, _total, before, _ = host("take", B, now=1103, expect=total)
    assert verdict == "TOOK_OVER" and before["run"] == A["run"] and lock_file(host)["run"] == B["run"]


def test_check_mode_takes_nothing_but_reports_the_holder(host):
    assert host("take", A, check=True)[0] == "FREE" and not host.path.parent.exists()
    host("take", A)
    assert host("take", B, check=True)[0] == "HELD"
    assert host("release", A, check=True)[0] == "RELEASED" and lock_file(host)["run"] == A["run"]


@pytest.mark.parametrize("what, make, verdict", [
    ("lock", lambda p: p.mkdir(parents=True), "lock directory"),
    ("lock", lambda p: (p.parent.mkdir(parents=True), os.symlink("/etc/passwd", p)), "lock symlink"),
    ("state", lambda p: p.mkdir(parents=True), "state directory"),
    ("state", lambda p: (p.parent.mkdir(parents=True), os.symlink("elsewhere", p)), "state symlink"),
])
def test_a_lock_or_state_path_that_is_a_directory_or_a_symlink_is_refused(host, what, make, verdict):
    path = host.path.parent.parent.parent.parent / (LOCK if what == "lock" else STATE)
    make(path)
    answer = host("take", A)
    assert answer[0] == "BADPATH" and answer[4] == verdict
    assert (path.is_symlink() if "symlink" in verdict else path.is_dir() and not list(path.iterdir()))  # untouched
    assert what == "lock" or not host.path.exists()


def test_two_runs_taking_a_free_lock_at_once_cannot_both_have_it(tmp_path):
    runs = [subprocess.Popen(["sh", "-c", hl.HOST_SCRIPT, "host_lock", str(tmp_path / LOCK), str(tmp_path / STATE),
                              "take", f"run-{i}", "", "60", "0",
                              hl.dump(hl.record(dict(holder(str(i)), run=f"run-{i}"), "x"))],
                             stdout=subprocess.PIPE, text=True) for i in range(8)]
    verdicts = [hl.answer(proc.communicate(timeout=60)[0], LOCK)[0] for proc in runs]
    assert verdicts.count("ACQUIRED") == 1 and verdicts.count("HELD") == 7


def test_a_foreign_lock_is_refused_by_name(host):
    host.path.parent.mkdir(parents=True)
    host.path.write_text("[]")
    with pytest.raises(hl.LockError, match=f"^{LOCK} is not a passthrough_host lock"):
        host("take", A)
    with pytest.raises(hl.LockError, match="could not be read or written on the host: sh: 1: cannot create"):
        hl.answer("sh: 1: cannot create /x: Permission denied", "/x")


@pytest.mark.parametrize("stdout", ["ACQUIRED\nNOW 5 -\n", "ACQUIRED\r\nNOW 5 -\r\n", "\r\nACQUIRED\r\nNOW 5 -\r\n"])
def test_the_answer_is_read_from_a_terminal_s_lines_too(stdout):
    # What the script prints over SSH with become (ssh -tt): CR LF line ends, the break after the become marker
    # sometimes left in front (seen on the Debian test server of molecule/host_server).
    assert hl.answer(stdout, LOCK)[:3] == ("ACQUIRED", 5, "-")


def test_a_held_lock_s_record_is_read_from_a_terminal_s_lines():
    owner = hl.dump(hl.record(A, "x")).replace(hl.EXPIRES, "1060")
    verdict, now, total, before, _ = hl.answer("\r\nHELD\r\nNOW 1000 12_34\r\n" + owner.replace("\n", "\r\n"), LOCK)
    assert (verdict, now, total, before["expires"]) == ("HELD", 1000, "12_34", 1060)


def test_the_rules_applied_to_what_the_host_reports(host):
    """exchange(): an expired lock and a gone run's lock are taken over, a live one refused, from the host's time."""
    def call_as(here, now):
        return lambda expect: host("take", here, now=now, expect=expect)

    host("take", B, now=1000, seconds=60)
    verdict, _now, before, standing, _ = hl.exchange(call_as(A, 1059), A, lambda o, h: None)
    assert (verdict, standing, lock_file(host)["run"]) == ("HELD", leases.HELD, B["run"])
    verdict, _now, before, _standing, _ = hl.exchange(call_as(A, 1060), A, lambda o, h: None)
    assert verdict == "TOOK_OVER" and before["run"] == B["run"] and lock_file(host)["run"] == A["run"]
    # A run of this control host that is gone: taken over before its lease runs out.
    verdict, _now, _before, _standing, _ = hl.exchange(call_as(B, 1070), B, lambda o, h: False)
    assert verdict == "TOOK_OVER" and lock_file(host)["run"] == B["run"]
    # A lock of an earlier version (no lease): taken over as expired.
    host.path.write_text(json.dumps({"run": "old", "machine_id": "m", "pid": 1}))
    assert hl.exchange(call_as(A, 1080), A, lambda o, h: None)[0] == "TOOK_OVER"


def _parent_of_worker(queue):
    queue.put(ident.run_pid())


def test_the_run_is_the_process_that_forked_the_task_worker():
    """Ansible runs each task in a worker the run forks (multiprocessing): its parent is the run."""
    queue = multiprocessing.get_context("fork").Queue()
    worker = multiprocessing.get_context("fork").Process(target=_parent_of_worker, args=(queue,))
    worker.start()
    worker.join(30)
    assert queue.get(timeout=5) == os.getpid() == ident.run_pid()


def test_the_action_refuses_a_lease_of_a_wrong_type():
    assert action.OPS == {"held": "take", "renewed": "renew", "released": "release"}
