"""playbooks/host.yml on several simulated GPU hosts (sandbox roots from fixtures/hosts/*.yml): the reboots go
in waves, a canary first, at most passthrough_rollout_reboot_batch at a time, as the reboot command's own
timestamps show (tests/standins/timed_command.py); a canary that fails verification stops the rollout. Two slices of one
fleet run at once (as AWX job slicing runs them) share the fleet-wide reboot slots: together they stay within the
batch, and a slice's failed canary stops the other slice."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from ogc_testlib import ROOT, ansible_env, load_source, output, run_playbook, start_playbook

pytestmark = pytest.mark.integration

fleet = load_source("fleet_inventory", os.path.join("tests", "helpers", "fleet", "fleet_inventory.py"))
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots as slots_api
# The reboots' own timestamps (tests/standins/timed_command.py) and how many overlapped: tests/helpers/fleet/fleet_slices.py's reading.
_slices = load_source("fleet_slices", os.path.join("tests", "helpers", "fleet", "fleet_slices.py"))
reboots, most_at_once = _slices.reboots, _slices.most_at_once
PLAYBOOK = os.path.join(ROOT, "tests", "helpers", "fleet", "plan_host.yml")


def run(inventory, *args):
    proc = run_playbook(PLAYBOOK, "-i", inventory, *args, timeout=900)
    return proc.returncode, output(proc)


def sliced(directory, count, parts, **options):
    """One simulated fleet of ``count`` hosts, cut into inventories of the host names in ``parts``, as AWX job slicing
    cuts it: each slice holds its own hosts but the same group_vars (the same state, plans and reboot slots)."""
    inventory = fleet.build(count, directory, **options)
    return fleet.cut(inventory, parts, [os.path.join(directory, f"slice-{number}") for number in range(1, len(parts) + 1)])


def start(inventory, log):
    """ansible-playbook on one slice in the background, its output (unbuffered) in ``log``."""
    with open(log, "w", encoding="utf-8") as handle:
        return start_playbook(PLAYBOOK, "-i", inventory, stdout=handle, env=ansible_env(PYTHONUNBUFFERED="1"))


def finish(proc, log):
    proc.wait(900)
    with open(log, encoding="utf-8") as handle:
        return proc.returncode, handle.read()


def test_batch_two_of_five_reboots_at_most_two_at_a_time(tmp_path):
    inventory = fleet.build(5, str(tmp_path), batch=2, hold=3)
    rc, out = run(inventory)
    assert rc == 0, out[-5000:]
    assert "wave 1: gpu-001; wave 2: gpu-002, gpu-003; wave 3: gpu-004, gpu-005." in out
    done = reboots(str(tmp_path))
    assert sorted(r["name"] for r in done) == [f"gpu-{i:03d}" for i in range(1, 6)]
    assert all(r["rc"] == 0 for r in done)
    at = {r["name"]: r for r in done}
    # Never more than two at once, and two did run at once (the batch is used, not one by one).
    assert most_at_once(done) == 2
    # The canary finished before any other host began; each wave began after the one before had ended.
    waves = [["gpu-001"], ["gpu-002", "gpu-003"], ["gpu-004", "gpu-005"]]
    for before, after in zip(waves, waves[1:]):
        assert max(at[h]["end"] for h in before) < min(at[h]["start"] for h in after), (before, after)
    # Every rebooted host verified.
    assert out.count("ready; ") >= 5


def test_failing_canary_stops_the_rollout(tmp_path):
    directory = str(tmp_path)
    inventory = fleet.build(3, directory, batch=2, hold=0)  # the canary, then one wave of two that never starts
    # The canary's "reboot" changes nothing (the command after -- is empty): it comes back with the old kernel
    # command line and drivers, so its verification fails.
    host_vars = os.path.join(inventory, "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(host_vars))
    with open(host_vars, "w", encoding="utf-8") as handle:
        yaml.safe_dump({"passthrough_host_reboot_command": [
            "{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/tests/standins/timed_command.py",
            "{{ fleet_reboot_log }}", "{{ inventory_hostname }}", "--"]}, handle)
    rc, out = run(inventory)
    assert rc != 0
    assert [r["name"] for r in reboots(directory)] == ["gpu-001"]
    assert "gpu-001 (wave 1):" in out
    assert ("The rollout stops here: gpu-002, gpu-003 are left untouched (not drained, not rebooted; their locks "
            "given back).") in out
    for host in ("gpu-002", "gpu-003"):
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, ".simulated-reboots")), host
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, "var/lib/open-gpu-cloud/"
                                               "passthrough_host.lock")), host


def test_two_slices_at_once_stay_within_the_fleet_s_batch(tmp_path):
    directory = str(tmp_path)
    # A batch of one: each slice alone would reboot one host at a time, the two side by side two at once. (That
    # slices side by side do use a batch of two together: test_fleet_slices.py.)
    parts = [["gpu-001", "gpu-002"], ["gpu-003", "gpu-004"]]
    inventories = sliced(directory, 4, parts, batch=1, hold=3)
    logs = [os.path.join(directory, f"slice-{n}.log") for n in (1, 2)]
    procs = [start(inventory, log) for inventory, log in zip(inventories, logs)]
    outs = [finish(proc, log) for proc, log in zip(procs, logs)]
    for rc, out in outs:
        assert rc == 0, out[-5000:]
    done = reboots(directory)
    # Each host rebooted once, and verified; never two at once.
    assert sorted(r["name"] for r in done) == [f"gpu-{i:03d}" for i in range(1, 5)]
    assert all(r["rc"] == 0 for r in done)
    assert most_at_once(done) == 1
    assert all(out.count("ready; ") >= 2 for _rc, out in outs)
    # All given back: no slot, and no lease (each run's keeper revoked it as the run ended).
    leftover = sorted(os.listdir(os.path.join(directory, "state", "coordination")))
    assert leftover == [".lock"], leftover


def test_a_slice_s_failed_canary_stops_the_other_slice(tmp_path):
    directory = str(tmp_path)
    # One slot (batch 1): slice 1 is the failing canary alone, slice 2 the two hosts that must not reboot after it.
    inventories = sliced(directory, 3, [["gpu-001"], ["gpu-002", "gpu-003"]], batch=1, hold=0)
    host_vars = os.path.join(inventories[0], "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(host_vars))
    with open(host_vars, "w", encoding="utf-8") as handle:  # a reboot that changes nothing: the verification fails
        yaml.safe_dump({"passthrough_host_reboot_command": [
            "{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/tests/standins/timed_command.py",
            "{{ fleet_reboot_log }}", "{{ inventory_hostname }}", "--"]}, handle)
    # The order, without timing luck: this test holds the only slot (a live run: this process, under a lease of its
    # own) until both slices wait for it (so both runs started before the failure), then hands it to gpu-001, which
    # fails while slice 2 still waits; its stop record then refuses slice 2 any slot.
    coordination = be.FileBackend(os.path.join(directory, "state", "coordination"))
    gate = ident.identity(os.getpid())
    gate_lease = be.lease_id_of(gate["run"])
    coordination.grant(gate_lease, 600, gate)
    slots_api.acquire(coordination, "test-gate", [], 1, gate, time.time(), gate_lease)
    logs = [os.path.join(directory, f"slice-{n}.log") for n in (1, 2)]
    procs = [start(inventory, log) for inventory, log in zip(inventories, logs)]
    deadline = time.time() + 600
    while True:
        texts = []
        for log in logs:
            with open(log, encoding="utf-8") as handle:
                texts.append(handle.read())
        if all("TASK [open_gpu_cloud.toolkit.passthrough_rollout : Take a fleet-wide reboot slot]" in text for text in texts):
            break
        assert time.time() < deadline and all(proc.poll() is None for proc in procs), texts
        time.sleep(0.5)
    # Handed to gpu-001 in one change: the gate's slot becomes slice 1's (its run, its lease: the lease its first
    # slot task granted), which slice 1 finds as its own.
    slice1 = ident.identity(procs[0].pid)
    lease1 = be.lease_id_of(slice1["run"])
    while coordination.remaining(lease1) <= 0:
        assert time.time() < deadline, "slice 1 granted no lease"
        time.sleep(0.2)
    record = dict(slots_api.holder_fields(slice1), host="gpu-001", since="now")
    assert coordination.commit(coordination.read(), puts={0: record}, deletes=[0], lease=lease1)
    coordination.revoke(gate_lease)
    (rc1, out1), (rc2, out2) = [finish(proc, log) for proc, log in zip(procs, logs)]
    assert rc1 != 0 and rc2 != 0, (out1[-3000:], out2[-3000:])
    assert [r["name"] for r in reboots(directory)] == ["gpu-001"]
    assert "gpu-001 (wave 1):" in out1
    assert "no reboot slot: gpu-001 failed at " in out2 and "The rollout stops on this run too" in out2, out2[-3000:]
    view = coordination.read()
    assert view.stop["host"] == "gpu-001" and view.slots == {}
    for host in ("gpu-002", "gpu-003"):
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, ".simulated-reboots")), host
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, "var/lib/open-gpu-cloud/"
                                               "passthrough_host.lock")), host
    # The advice ("a run started after the failure is not held back by the record"): slice 2 again reboots its hosts.
    rc, out = finish(start(inventories[1], logs[1]), logs[1])
    assert rc == 0, out[-5000:]
    assert sorted(r["name"] for r in reboots(directory)) == ["gpu-001", "gpu-002", "gpu-003"]
