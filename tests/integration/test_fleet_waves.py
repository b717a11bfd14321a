"""playbooks/host.yml on several simulated GPU hosts (sandbox roots from fixtures/hosts/*.yml): the reboots go
in waves, a canary first, at most passthrough_host_reboot_batch at a time, as the reboot command's own
timestamps show (scripts/timed_command.py); a canary that fails verification stops the rollout."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ogc_testlib import ANSIBLE_PLAYBOOK, ROOT, load_source

pytestmark = pytest.mark.integration

fleet = load_source("fleet_inventory", os.path.join("bench", "fleet", "fleet_inventory.py"))
PLAYBOOK = os.path.join(ROOT, "bench", "fleet", "plan_host.yml")


def run(inventory, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, PLAYBOOK, "-i", inventory, *args], capture_output=True, text=True,
                          check=False, cwd=ROOT, env=env, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def reboots(directory):
    path = os.path.join(directory, "state", "reboots.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def most_at_once(records):
    """The largest number of reboots running at the same moment."""
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running = peak = 0
    for _moment, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_batch_two_of_six_reboots_at_most_two_at_a_time(tmp_path):
    inventory = fleet.build(6, str(tmp_path), batch=2, hold=3)
    rc, out = run(inventory)
    assert rc == 0, out[-5000:]
    assert "wave 1: gpu-001; wave 2: gpu-002, gpu-003; wave 3: gpu-004, gpu-005; wave 4: gpu-006." in out
    done = reboots(str(tmp_path))
    assert sorted(r["name"] for r in done) == [f"gpu-{i:03d}" for i in range(1, 7)]
    assert all(r["rc"] == 0 for r in done)
    at = {r["name"]: r for r in done}
    # Never more than two at once, and two did run at once (the batch is used, not one by one).
    assert most_at_once(done) == 2
    # The canary finished before any other host began; each wave began after the one before had ended.
    waves = [["gpu-001"], ["gpu-002", "gpu-003"], ["gpu-004", "gpu-005"], ["gpu-006"]]
    for before, after in zip(waves, waves[1:]):
        assert max(at[h]["end"] for h in before) < min(at[h]["start"] for h in after), (before, after)
    # Every rebooted host verified.
    assert out.count("ready; ") >= 6


def test_failing_canary_stops_the_rollout(tmp_path):
    directory = str(tmp_path)
    inventory = fleet.build(3, directory, batch=2, hold=0)  # the canary, then one wave of two that never starts
    # The canary's "reboot" changes nothing (the command after -- is empty): it comes back with the old kernel
    # command line and drivers, so its verification fails.
    host_vars = os.path.join(inventory, "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(host_vars))
    with open(host_vars, "w", encoding="utf-8") as handle:
        yaml.safe_dump({"passthrough_host_reboot_command": [
            "{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/scripts/timed_command.py",
            "{{ fleet_reboot_log }}", "{{ inventory_hostname }}", "--"]}, handle)
    rc, out = run(inventory)
    assert rc != 0
    assert [r["name"] for r in reboots(directory)] == ["gpu-001"]
    assert "gpu-001 (wave 1):" in out
    assert "The rollout stops here: gpu-002, gpu-003 are left untouched (not drained, not rebooted)." in out
    for host in ("gpu-002", "gpu-003"):
        assert not os.path.exists(os.path.join(directory, "state", "hosts", host, ".simulated-reboots")), host
