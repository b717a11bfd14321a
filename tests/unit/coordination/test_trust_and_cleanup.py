"""What the coordination layer trusts on the control host, and what it leaves there: a coordination directory, a
record, a client certificate or a keepers' runtime directory that another user could write is refused, naming the
path, its owner and mode and the fix (or, for the runtime directory in /tmp, avoided); a keeper removes its files as
its run ends, and the next run removes what a dead run left. Each case is made with the bad input itself (chmod,
chown to nobody, a name taken in /tmp)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
import time

import pytest

from ogc_testlib import collection_plugin

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import keeper
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots

checks = collection_plugin("filter", "passthrough_host_checks")
NOBODY = pwd.getpwnam("nobody").pw_uid
ME = pwd.getpwuid(os.geteuid()).pw_name
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user (chown) needs root")


def private_dir(path):
    os.makedirs(path, 0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return str(path)


def rollout_errors(url):
    return checks.rollout_var_errors({"passthrough_rollout_coordination_url": url}, "h1")


# ---- the coordination directory, its records, the client certificate --------------------------------------------

def test_a_coordination_directory_writable_by_others_is_refused_naming_owner_mode_and_fix(tmp_path):
    directory = private_dir(tmp_path / "coordination")
    os.chmod(directory, 0o703)  # chmod o+w
    expected = (f"the coordination directory {directory} is owned by {ME}, mode 0703: another user than {ME} could "
                f"write it. Make it {ME}'s alone (chmod go-w {directory})")
    with pytest.raises(be.BackendError) as exc:
        be.FileBackend(directory).read()
    assert str(exc.value) == f"passthrough_rollout_coordination_url (file://{directory}): {expected}, or give a " \
                             f"directory of {ME}'s own"
    with pytest.raises(be.BackendError, match="mode 0703"):
        be.FileBackend(directory).put_stop({"time": 1})
    assert os.listdir(directory) == []  # nothing read or written in it
    # The rollout's check entry point, before any host is touched.
    assert rollout_errors(f"file://{directory}") == [f"h1: passthrough_rollout_coordination_url (file://{directory}): "
                                                     f"{expected}, or give a directory of {ME}'s own."]
    os.chmod(directory, 0o730)  # group-writable: the same
    assert "mode 0730" in rollout_errors(f"file://{directory}")[0]
    os.chmod(directory, 0o755)  # readable by others, writable by its owner alone: trusted
    assert rollout_errors(f"file://{directory}") == [] and be.FileBackend(directory).read().slots == {}


@needs_root
def test_a_coordination_directory_of_another_user_is_refused(tmp_path):
    directory = private_dir(tmp_path / "coordination")
    os.chown(directory, NOBODY, -1)
    with pytest.raises(be.BackendError) as exc:
        be.FileBackend(directory).read()
    assert f"{directory} is owned by nobody, mode 0700: another user than {ME} could write it" in str(exc.value)
    assert f"(chown {ME} {directory})" in str(exc.value)


def test_a_directory_above_it_writable_by_others_is_refused_unless_sticky(tmp_path):
    above = private_dir(tmp_path / "shared")
    directory = private_dir(tmp_path / "shared" / "coordination")
    os.chmod(above, 0o777)  # anyone could rename coordination away and put their own in its place
    message = rollout_errors(f"file://{directory}")[0]
    assert f"the coordination directory {directory} lies in {above}, which is owned by {ME}, mode 0777" in message
    assert f"(chmod go-w {above})" in message
    with pytest.raises(be.BackendError, match="lies in"):
        be.FileBackend(directory).read()
    os.chmod(above, 0o1777)  # sticky, as /tmp: only the owner of an entry may rename or remove it
    assert rollout_errors(f"file://{directory}") == []


@needs_root
def test_a_record_written_by_another_user_is_refused(tmp_path):
    backend = be.FileBackend(private_dir(tmp_path / "coordination"))
    here = {"run": ident.digest("r"), "controller_id": "c", "pid": 1}
    lease = be.lease_id_of(here["run"])
    backend.grant(lease, 60, here)
    slots.acquire(backend, "h1", [], 1, here, 0.0, lease)
    os.chown(os.path.join(backend.path, "slot-0"), NOBODY, -1)
    with pytest.raises(be.BackendError) as exc:
        backend.read()
    assert f"the record {backend.path}/slot-0 is owned by nobody, mode 0600" in str(exc.value)


def test_a_client_key_writable_by_others_is_refused(tmp_path):
    for name in ("ca", "cert", "key"):
        (tmp_path / name).write_text("")
        os.chmod(tmp_path / name, 0o600)
    os.chmod(tmp_path / "key", 0o666)
    url = f"etcd3+https://127.0.0.1:2379?ca_cert={tmp_path}/ca&cert_cert={tmp_path}/cert&cert_key={tmp_path}/key"
    message = rollout_errors(url)
    assert message == [f"h1: passthrough_rollout_coordination_url (etcd3+https://127.0.0.1:2379): the cert_key file "
                       f"{tmp_path}/key is owned by {ME}, mode 0666: another user than {ME} could write it. Make it "
                       f"{ME}'s alone (chmod go-w {tmp_path}/key), or give a directory of {ME}'s own."]
    with pytest.raises(be.BackendError, match="the cert_key file .* mode 0666"):
        be.open_backend(url).check()
    os.chmod(tmp_path / "key", 0o600)
    assert rollout_errors(url) == []


def test_foreign_write_problem_of_a_missing_path_is_none_and_of_a_sticky_parent_is_none(tmp_path):
    assert locations.foreign_write_problem(str(tmp_path / "nothing" / "here"), "x") is None
    inside_tmp = os.path.join(tempfile.gettempdir(), f"ogc-test-missing-{os.getpid()}")
    assert locations.foreign_write_problem(inside_tmp, "x") is None  # /tmp is sticky
    assert "mode 1777" in locations.foreign_write_problem(tempfile.gettempdir(), "x")  # /tmp itself is everyone's


# ---- the keepers' runtime directory -------------------------------------------------------------------------------

@pytest.fixture
def temp(tmp_path, monkeypatch):
    """A temporary directory as /tmp is (mode 1777) and a home, for runtime_dir without XDG_RUNTIME_DIR."""
    tmp = private_dir(tmp_path / "tmp")
    os.chmod(tmp, 0o1777)
    home = private_dir(tmp_path / "home")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    monkeypatch.setenv("HOME", home)
    return tmp, home


def test_the_runtime_dir_is_the_private_one_in_tmp(temp):
    tmp, _home = temp
    path = keeper.runtime_dir()
    assert path == os.path.join(tmp, f"open-gpu-cloud-{os.geteuid()}") and os.stat(path).st_mode & 0o777 == 0o700


@pytest.mark.parametrize("taken", ["mode 0777", "a symlink", "a file"] + (["another owner"] if os.geteuid() == 0
                                                                           else []))
def test_a_runtime_dir_name_taken_in_tmp_by_another_user_stops_no_rollout(temp, taken):
    tmp, home = temp
    name = os.path.join(tmp, f"open-gpu-cloud-{os.geteuid()}")
    if taken == "a symlink":
        os.symlink(home, name)
    elif taken == "a file":
        open(name, "w", encoding="utf-8").close()
    else:
        os.mkdir(name, 0o700)
        os.chmod(name, 0o777)
        if taken == "another owner":
            os.chown(name, NOBODY, -1)
    path = keeper.runtime_dir()
    assert path.startswith(os.path.join(home, ".ansible", "open-gpu-cloud-keepers-"))
    assert os.stat(path).st_mode & 0o777 == 0o700 and os.stat(os.path.join(home, ".ansible")).st_uid == os.geteuid()


def test_no_private_runtime_dir_at_all_is_refused_naming_both_and_the_fix(temp):
    tmp, home = temp
    name = os.path.join(tmp, f"open-gpu-cloud-{os.geteuid()}")
    os.mkdir(name, 0o700)
    os.chmod(name, 0o777)
    os.chmod(home, 0o777)
    with pytest.raises(be.BackendError) as exc:
        keeper.runtime_dir()
    text = str(exc.value)
    assert f"the keepers' runtime directory {name} is owned by {ME}, mode 0777" in text
    assert f"the home's Ansible directory {home}/.ansible lies in {home}, which is owned by {ME}, mode 0777" in text
    assert "Set XDG_RUNTIME_DIR to a directory of this user's alone (mode 0700" in text


def test_an_xdg_runtime_dir_writable_by_others_is_refused(tmp_path, monkeypatch):
    runtime = private_dir(tmp_path / "run")
    os.chmod(runtime, 0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    with pytest.raises(be.BackendError, match=f"XDG_RUNTIME_DIR {runtime} is owned by {ME}, mode 0777.*unset "
                                              "XDG_RUNTIME_DIR"):
        keeper.runtime_dir()


# ---- what a run leaves --------------------------------------------------------------------------------------------

def test_a_keeper_removes_its_files_when_its_run_ends_and_a_killed_one_s_are_swept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", private_dir(tmp_path / "run"))
    backend = be.FileBackend(str(tmp_path / "coordination"))
    url = f"file://{tmp_path}/coordination"
    runs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        first, second = (ident.identity(run.pid) for run in runs)
        keeper.ensure(url, first, 30, backend=backend)
        directory = keeper.runtime_dir()
        assert sorted(os.listdir(directory)) == sorted(f"keeper-{first['run']}.{ext}" for ext in ("json", "json.lock",
                                                                                                  "log"))
        # The run ends normally: its keeper revokes the lease and removes every file it and its run made.
        runs[0].kill()
        runs[0].wait()
        deadline = time.monotonic() + 10
        while os.listdir(directory) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.listdir(directory) == []
        # A run whose keeper is killed with it (kill -9 of the whole session) leaves its files ...
        lease2, _ = keeper.ensure(url, second, 30, backend=backend)
        record = keeper.running(keeper.pidfile(second["run"]))
        os.kill(record["pid"], 9)
        runs[1].kill()
        runs[1].wait()
        deadline = time.monotonic() + 10
        while ident.process_start(record["pid"]) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        left = sorted(os.listdir(directory))
        assert left == sorted(f"keeper-{second['run']}.{ext}" for ext in ("json", "json.lock", "log"))
        # ... which the next run removes: its process is gone.
        third = ident.identity(os.getpid())
        keeper.ensure(url, third, 30, backend=backend)
        try:
            assert sorted(os.listdir(directory)) == sorted(f"keeper-{third['run']}.{ext}"
                                                           for ext in ("json", "json.lock", "log"))
        finally:
            keeper.stop(third["run"])
        assert backend.remaining(lease2) > 0  # the killed run's lease runs out by itself (its keeper is gone)
    finally:
        for run in runs:
            run.kill()
            run.wait()


def test_the_sweep_keeps_the_files_of_a_live_run_and_of_a_run_whose_lock_is_held(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", private_dir(tmp_path / "run"))
    directory = keeper.runtime_dir()
    me = ident.identity(os.getpid())
    live = dict(me, run=ident.digest("live"))
    dead = dict(me, run=ident.digest("dead"), pid=2 ** 22 + 7)
    elsewhere = dict(me, run=ident.digest("elsewhere"), controller_id="another", pid=2 ** 22 + 7)
    for who in (live, dead, elsewhere):
        for ext, text in (("json.lock", json.dumps(who)), ("log", "x")):
            with open(os.path.join(directory, f"keeper-{who['run']}.{ext}"), "w", encoding="utf-8") as handle:
                handle.write(text)
    held = dict(me, run=ident.digest("held"), pid=2 ** 22 + 7)
    with open(os.path.join(directory, f"keeper-{held['run']}.json.lock"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(held))
    guard = keeper._lock(os.path.join(directory, f"keeper-{held['run']}.json.lock"), 1)  # pylint: disable=protected-access
    try:
        assert keeper.sweep(me) == [dead["run"]]
    finally:
        guard.close()
    assert not any(n.startswith(f"keeper-{dead['run']}") for n in os.listdir(directory))
    assert {n.split(".")[0] for n in os.listdir(directory)} == {f"keeper-{w['run']}" for w in (live, elsewhere, held)}
