"""The host phase's lock: module_utils/host_lock.py (who owns it, is that run gone, and HOST_SCRIPT: taken, released,
taken over under a flock on the host) and the action plugin's identity of a run. Two real runs at once are in
tests/integration/test_passthrough_host_runs.py."""

import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from ansible.module_utils import host_lock as hl
from ogc_testlib import load_source

action = load_source("host_lock_action", "action_plugins/host_lock.py")
LOCK = "var/lib/open-gpu-cloud/passthrough_host.lock"


def host(tmp_path, state, run, takeover="", check=False):
    """module_utils/host_lock.py's HOST_SCRIPT as the action plugin runs it on a host: (verdict, record before)."""
    owner = hl.dump({"run": run, "controller": "ctl", "user": "op", "pid": 1, "start_time": 1, "boot_id": "b",
                     "machine_id": "m", "since": "2026-11-24T06:00:00Z"})
    done = subprocess.run(["sh", "-c", hl.HOST_SCRIPT, "host_lock", str(tmp_path / LOCK), state, run, takeover,
                           "1" if check else "0", owner], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return hl.answer(done.stdout, LOCK)


def lock_file(tmp_path):
    path = tmp_path / LOCK
    return json.loads(path.read_text()) if path.exists() else None


def test_taken_held_again_by_its_run_refused_to_another_released_only_by_its_own(tmp_path):
    assert host(tmp_path, "held", "run-a") == ("ACQUIRED", None)
    assert lock_file(tmp_path)["run"] == "run-a" and lock_file(tmp_path)["since"].endswith("Z")
    assert host(tmp_path, "held", "run-a")[0] == "ACQUIRED"                    # the same run: the waves' play
    verdict, before = host(tmp_path, "held", "run-b")
    assert verdict == "HELD" and before["run"] == "run-a" and lock_file(tmp_path)["run"] == "run-a"
    assert host(tmp_path, "released", "run-b") == ("KEPT", None) and lock_file(tmp_path)["run"] == "run-a"
    verdict, before = host(tmp_path, "held", "run-b", takeover="run-a")
    assert verdict == "TOOK_OVER" and before["run"] == "run-a" and lock_file(tmp_path)["run"] == "run-b"
    assert host(tmp_path, "held", "run-c", takeover="run-a")[0] == "HELD"     # not the stale one any more
    assert host(tmp_path, "released", "run-b") == ("RELEASED", None)
    assert lock_file(tmp_path) is None and not list((tmp_path / LOCK).parent.iterdir())


def test_check_mode_takes_nothing_but_reports_the_holder(tmp_path):
    assert host(tmp_path, "held", "a", check=True) == ("FREE", None) and not (tmp_path / "var").exists()
    host(tmp_path, "held", "a")
    verdict, before = host(tmp_path, "held", "b", check=True)
    assert verdict == "HELD" and before["run"] == "a"
    assert host(tmp_path, "released", "a", check=True)[0] == "RELEASED" and lock_file(tmp_path)["run"] == "a"


def test_two_runs_taking_a_free_lock_at_once_cannot_both_have_it(tmp_path):
    runs = [subprocess.Popen(["sh", "-c", hl.HOST_SCRIPT, "host_lock", str(tmp_path / LOCK), "held", f"run-{i}", "",
                              "0", hl.dump({"run": f"run-{i}"})], stdout=subprocess.PIPE, text=True)
            for i in range(8)]
    verdicts = [hl.answer(proc.communicate(timeout=60)[0], LOCK)[0] for proc in runs]
    assert verdicts.count("ACQUIRED") == 1 and verdicts.count("HELD") == 7


def test_a_foreign_lock_is_refused_by_name(tmp_path):
    (tmp_path / LOCK).parent.mkdir(parents=True)
    (tmp_path / LOCK).write_text("[]")
    with pytest.raises(hl.LockError, match=f"^{LOCK} is not a passthrough_host lock"):
        host(tmp_path, "held", "a")
    with pytest.raises(hl.LockError, match="could not be read or written on the host: sh: 1: cannot create"):
        hl.answer("sh: 1: cannot create /x: Permission denied", "/x")


@pytest.mark.parametrize("stdout", ["ACQUIRED\n\n", "ACQUIRED\r\n\r\n", "\r\nACQUIRED\r\n\r\n", "\nACQUIRED\n"])
def test_the_verdict_is_read_from_a_terminal_s_lines_too(stdout):
    # What the script prints over SSH with become (ssh -tt): CR LF line ends, the break after the become marker
    # sometimes left in front (seen on the Debian test server of molecule/host_server).
    assert hl.answer(stdout, LOCK) == ("ACQUIRED", None)


def test_a_held_lock_s_record_is_read_from_a_terminal_s_lines(tmp_path):
    owner = hl.dump(hl.identity(os.getpid()))
    verdict, before = hl.answer("\r\nHELD\r\n" + owner.replace("\n", "\r\n") + "\r\n", LOCK)
    assert verdict == "HELD" and before["pid"] == os.getpid()


def test_a_run_is_alive_while_its_process_runs_on_this_control_host():
    here = hl.identity(os.getpid())
    assert here["pid"] == os.getpid() and here["start_time"] == hl.process_start(os.getpid())
    assert len(here["run"]) == 12 and here["run"] == hl.identity(os.getpid())["run"]   # the same run, every task
    assert hl.owner_alive(here, here) is True
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    gone = hl.identity(os.getpid())
    gone["pid"] = int(child.stdout)                       # a process that ended
    assert hl.owner_alive(gone, here) is False
    assert hl.owner_alive(dict(here, start_time=here["start_time"] - 1), here) is False   # the pid reused
    assert hl.owner_alive(dict(here, boot_id="an-earlier-boot"), here) is False          # this host rebooted since
    assert hl.owner_alive(dict(here, machine_id="another-control-host"), here) is None    # cannot be seen from here
    assert f"run {here['run']} of " in hl.describe(dict(here, since="2026-11-24T06:00:00Z"))


def _parent_of_worker(queue):
    queue.put(action.run_pid())


def test_the_run_is_the_process_that_forked_the_task_worker():
    """Ansible runs each task in a worker the run forks (multiprocessing): its parent is the run."""
    queue = multiprocessing.get_context("fork").Queue()
    worker = multiprocessing.get_context("fork").Process(target=_parent_of_worker, args=(queue,))
    worker.start()
    worker.join(30)
    assert queue.get(timeout=5) == os.getpid() == action.run_pid()
