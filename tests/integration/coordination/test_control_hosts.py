"""Two control hosts, one fleet, one real etcd between them (Debian's etcd-server on 127.0.0.1).

Each control host is a run of playbooks/host.yml (after plan.yml, as site.yml runs them) in namespaces of its own -
a machine id of its own (bind-mounted over /etc/machine-id), a host name, a PID namespace - so each names itself
by its own digests, cannot see the other's processes, and dies whole (its lease keeper with it) when its namespace's
first process is killed. They share no file of the product: each has its own plan directory; the reboot slots and
the stop record are on etcd alone (passthrough_rollout_coordination_url). The GPU hosts are sandbox roots, each run
by one control host; the reboots' own timestamps (tests/standins/timed_command.py) are the test's watch.

* both run at once: never more hosts rebooting than one wave;
* one is killed mid-wave (the whole control host): its slot frees itself when its lease runs out, and the other
  finishes;
* etcd stops mid-wave: no new reboot starts, both runs fail naming the service, and once it is back nothing is left
  held beyond its lease.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request

import pytest
import yaml

from ogc_testlib import ROOT, ansible_env, load_source, start_playbook

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from etcd_server import EtcdServer  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration

fleet = load_source("fleet_inventory", os.path.join("tests", "helpers", "fleet", "fleet_inventory.py"))
_slices = load_source("fleet_slices", os.path.join("tests", "helpers", "fleet", "fleet_slices.py"))
reboots, most_at_once = _slices.reboots, _slices.most_at_once
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
PLAYBOOK = os.path.join(ROOT, "tests", "helpers", "fleet", "plan_host.yml")
LEASE_TTL = 10


@pytest.fixture
def etcd(tmp_path):
    server = EtcdServer(tmp_path / "etcd").start()
    yield server
    server.stop()


def control_hosts(directory, etcd_url, parts, batch, hold, extra=None):
    """One simulated fleet cut into the inventories of ``parts`` (lists of host names), one per control host: the
    same group_vars but a plan directory of each control host's own, and the coordination backend etcd."""
    inventory = fleet.build(sum(len(p) for p in parts), directory, batch=batch, hold=hold)
    numbers = range(1, len(parts) + 1)
    out = fleet.cut(inventory, parts, [os.path.join(directory, f"control-{number}") for number in numbers], [
        dict({"passthrough_plan_dir": f"{{{{ ogc_demo_dir }}}}/control-{number}/plans",
              "passthrough_rollout_coordination_url": etcd_url, "passthrough_rollout_lease_ttl": LEASE_TTL},
             **(extra or {})) for number in numbers], comment="Control host")
    for number, path in zip(numbers, out):
        with open(os.path.join(path, "machine-id"), "w", encoding="utf-8") as handle:
            handle.write(f"{number:032x}\n")
    return out


def start(control, number, log):
    """ansible-playbook on one control host: a mount, UTS and PID namespace of its own, its own machine id."""
    script = 'mount --bind "$1/machine-id" /etc/machine-id && hostname "ctl-$2" && shift 2 && "$@"'
    with open(log, "w", encoding="utf-8") as handle:
        return start_playbook(PLAYBOOK, "-i", control, stdout=handle, env=ansible_env(PYTHONUNBUFFERED="1"), prefix=[
            "unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c", script, "control", control,
            str(number)])


def read(log):
    with open(log, encoding="utf-8") as handle:
        return handle.read()


def finish(proc, log, timeout=900):
    proc.wait(timeout)
    return proc.returncode, read(log)


def wait_for(condition, what, timeout=600):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.2)


def kill_control_host(proc):
    """The control host dies: SIGKILL to its PID namespace's first process takes every process in it (the run, its
    workers, its lease keeper)."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children", encoding="utf-8") as handle:
        children = handle.read().split()
    for pid in children:
        os.kill(int(pid), signal.SIGKILL)
    proc.wait(60)


def leases_left(server):
    """The leases etcd still holds."""
    request = urllib.request.Request(f"{server.client_url}/v3/lease/leases", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer).get("leases", [])


def test_two_control_hosts_at_once_never_reboot_more_than_one_wave(etcd, tmp_path):
    directory = str(tmp_path)
    parts = [["gpu-001", "gpu-002", "gpu-003"], ["gpu-004", "gpu-005", "gpu-006"]]
    controls = control_hosts(directory, etcd.url, parts, batch=2, hold=3)
    logs = [os.path.join(directory, f"control-{n}.log") for n in (1, 2)]
    procs = [start(control, n, log) for n, (control, log) in enumerate(zip(controls, logs), 1)]
    outs = [finish(proc, log) for proc, log in zip(procs, logs)]
    for rc, out in outs:
        assert rc == 0, out[-5000:]
    done = reboots(directory)
    # Each host rebooted once and verified; each control host alone would have let 1 + 1 canaries, then 2 + 2 at once.
    assert sorted(r["name"] for r in done) == [f"gpu-{i:03d}" for i in range(1, 7)]
    assert all(r["rc"] == 0 for r in done) and most_at_once(done) <= 2
    assert all(out.count("ready; ") >= 3 for _rc, out in outs)
    # Nothing left: no slot, no lease (each run's keeper was stopped as its last wave ended).
    view = be.open_backend(etcd.url).read()
    assert view.slots == {} and view.stop is None and leases_left(etcd) == []


def test_a_control_host_killed_mid_wave_frees_its_slot_when_its_lease_runs_out(etcd, tmp_path):
    directory = str(tmp_path)
    # One slot (batch 1). Control host 1's gpu-001 takes it and "reboots" for long; control host 2's gpu-002 waits.
    controls = control_hosts(directory, etcd.url, [["gpu-001"], ["gpu-002"]], batch=1, hold=0)
    slow = os.path.join(controls[0], "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(slow))
    with open(slow, "w", encoding="utf-8") as handle:
        yaml.safe_dump({"passthrough_host_reboot_command": [
            "{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/tests/standins/timed_command.py", "{{ fleet_reboot_log }}",
            "{{ inventory_hostname }}", "--hold", "600", "--", "true"]}, handle)
    logs = [os.path.join(directory, f"control-{n}.log") for n in (1, 2)]
    first = start(controls[0], 1, logs[0])
    backend = be.open_backend(etcd.url)
    wait_for(lambda: "Reboot through passthrough_host_reboot_command" in read(logs[0]),
             "control host 1 did not reach gpu-001's reboot")
    assert [r["host"] for r in backend.read().slots.values()] == ["gpu-001"]
    second = start(controls[1], 2, logs[1])
    wait_for(lambda: "Take a fleet-wide reboot slot" in read(logs[1]), "control host 2 did not ask for a slot")
    time.sleep(2)
    assert not reboots(directory)                       # gpu-002 waits: the only slot is gpu-001's
    killed = time.time()
    kill_control_host(first)
    rc, out = finish(second, logs[1])
    assert rc == 0, out[-5000:]
    done = {r["name"]: r for r in reboots(directory)}
    assert list(done) == ["gpu-002"]
    # It waited for the dead control host's lease to run out: no sooner (nobody renewed it, and control host 2 cannot
    # see control host 1's processes), and not much later.
    assert killed + LEASE_TTL - 3 <= done["gpu-002"]["start"] <= killed + LEASE_TTL + 30, (killed, done)
    assert backend.read().slots == {}


def test_the_service_stopped_mid_wave_starts_no_reboot_fails_naming_it_and_leaves_nothing_held(etcd, tmp_path):
    directory = str(tmp_path)
    # One slot. Control host 1: gpu-001 (the canary, rebooting when etcd stops), then gpu-003. Control host 2:
    # gpu-002, waiting for the slot.
    controls = control_hosts(directory, etcd.url, [["gpu-001", "gpu-003"], ["gpu-002"]], batch=1, hold=0)
    slow = os.path.join(controls[0], "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(slow))
    gate = os.path.join(directory, "gate")
    with open(slow, "w", encoding="utf-8") as handle:
        # The fleet's timed reboot stand-in, held until the test opens the gate.
        wait = f'while [ ! -e {gate} ]; do sleep 0.2; done; exec "$@"'
        yaml.safe_dump({"passthrough_host_reboot_command": (
            "{{ [ansible_playbook_python, ogc_repo_dir ~ '/tests/standins/timed_command.py', fleet_reboot_log, "
            f"inventory_hostname, '--', 'sh', '-c', '{wait}', 'reboot'] + demo_reboot_standin }}}}")}, handle)
    logs = [os.path.join(directory, f"control-{n}.log") for n in (1, 2)]
    first = start(controls[0], 1, logs[0])
    wait_for(lambda: "Reboot through passthrough_host_reboot_command" in read(logs[0]),
             "control host 1 did not reach gpu-001's reboot")
    second = start(controls[1], 2, logs[1])
    wait_for(lambda: "Take a fleet-wide reboot slot" in read(logs[1]), "control host 2 did not ask for a slot")
    time.sleep(2)
    etcd.stop()
    stopped = time.time()
    open(gate, "w", encoding="utf-8").close()          # gpu-001's reboot, under way, completes
    (rc1, out1), (rc2, out2) = finish(first, logs[0]), finish(second, logs[1])
    assert rc1 != 0 and rc2 != 0, (out1[-3000:], out2[-3000:])
    # No reboot started after the service stopped: gpu-001's was under way; gpu-003 and gpu-002 never began.
    assert [r["name"] for r in reboots(directory)] == ["gpu-001"]
    assert all(r["start"] < stopped for r in reboots(directory))
    service = f"the coordination service {etcd.url} cannot be reached"
    assert f"gpu-003: {service}" in out1 and f"gpu-002: {service}" in out2, (out1[-3000:], out2[-3000:])
    assert "No reboot starts without a fleet-wide slot" in out2
    # The hosts' locks were given back (every way out of the play); gpu-001 verified.
    for host in ("gpu-001", "gpu-002", "gpu-003"):
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, "var/lib/open-gpu-cloud/"
                                               "passthrough_host.lock")), host
    assert "gpu-001: ready; " in out1
    # Back again: whatever the runs held (their keepers could not revoke it) runs out with its lease.
    etcd.start()
    backend = be.open_backend(etcd.url)
    wait_for(lambda: backend.read().slots == {} and leases_left(etcd) == [],
             "a slot or a lease outlived its lease", timeout=LEASE_TTL + 30)
    # The advice: with the service back, run again - both control hosts finish, gpu-001 (verified) not rebooted again.
    procs = [start(control, n, log) for n, (control, log) in enumerate(zip(controls, logs), 1)]
    for proc, log in zip(procs, logs):
        rc, out = finish(proc, log)
        assert rc == 0, out[-5000:]
    assert sorted(r["name"] for r in reboots(directory)) == ["gpu-001", "gpu-002", "gpu-003"]
