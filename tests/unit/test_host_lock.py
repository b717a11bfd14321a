"""The host phase's lock: module_utils/host_lock.py (who owns it, is that run gone), library/host_lock.py (taken,
released, taken over under a flock) and the action plugin's identity of a run. Two real runs at once are in
tests/integration/test_passthrough_host_runs.py."""

import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from ansible.module_utils import host_lock as hl
from ansible.module_utils.testing import patch_module_args
from ogc_testlib import load_library_module, load_source

module = load_library_module("host_lock")
action = load_source("host_lock_action", "action_plugins/host_lock.py")
LOCK = "/var/lib/open-gpu-cloud/passthrough_host.lock"


def run_module(capsys, args, check_mode=False):
    args = dict(args, _ansible_check_mode=check_mode)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def owner(run, **extra):
    return dict({"run": run, "controller": "ctl", "user": "op", "pid": 1, "start_time": 1, "boot_id": "b",
                 "machine_id": "m"}, **extra)


def test_taken_held_again_by_its_run_refused_to_another_released_only_by_its_own(capsys, tmp_path):
    root = str(tmp_path)
    first = run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-a")})
    assert first["acquired"] is True and first["changed"] is False
    record = json.loads((tmp_path / LOCK.lstrip("/")).read_text())
    assert record["run"] == "run-a" and record["since"].endswith("Z")
    assert run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-a")})["acquired"] is True
    other = run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-b")})
    assert other["acquired"] is False and other["held_by"]["run"] == "run-a"
    assert run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-b"), "state": "released"})["released"] is False
    assert (tmp_path / LOCK.lstrip("/")).exists()
    taken = run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-b"), "takeover": "run-a"})
    assert taken["acquired"] is True and taken["took_over"]["run"] == "run-a"
    assert run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-c"), "takeover": "run-a"})["acquired"] is False
    assert run_module(capsys, {"root": root, "path": LOCK, "owner": owner("run-b"), "state": "released"})["released"]
    assert not (tmp_path / LOCK.lstrip("/")).exists() and not list((tmp_path / LOCK.lstrip("/")).parent.iterdir())


def test_check_mode_takes_nothing_but_reports_the_holder(capsys, tmp_path):
    assert run_module(capsys, {"root": str(tmp_path), "path": LOCK, "owner": owner("a")}, check_mode=True)["acquired"]
    assert not (tmp_path / "var").exists()
    run_module(capsys, {"root": str(tmp_path), "path": LOCK, "owner": owner("a")})
    seen = run_module(capsys, {"root": str(tmp_path), "path": LOCK, "owner": owner("b")}, check_mode=True)
    assert seen["acquired"] is False and seen["held_by"]["run"] == "a"


def test_a_foreign_or_relative_lock_is_refused_by_name(capsys, tmp_path):
    (tmp_path / "var/lib/open-gpu-cloud").mkdir(parents=True)
    (tmp_path / LOCK.lstrip("/")).write_text("[]")
    result = run_module(capsys, {"root": str(tmp_path), "path": LOCK, "owner": owner("a")})
    assert result["failed"] is True and result["msg"].startswith(f"{LOCK} is not a passthrough_host lock")
    result = run_module(capsys, {"root": str(tmp_path), "path": "lock", "owner": owner("a")})
    assert "path (passthrough_host_lock_file) 'lock' is not an absolute path" in result["msg"]


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
    assert "run %s of " % here["run"] in hl.describe(dict(here, since="2026-11-24T06:00:00Z"))


def _parent_of_worker(queue):
    queue.put(action.run_pid())


def test_the_run_is_the_process_that_forked_the_task_worker():
    """Ansible runs each task in a worker the run forks (multiprocessing): its parent is the run."""
    queue = multiprocessing.get_context("fork").Queue()
    worker = multiprocessing.get_context("fork").Process(target=_parent_of_worker, args=(queue,))
    worker.start()
    worker.join(30)
    assert queue.get(timeout=5) == os.getpid() == action.run_pid()
