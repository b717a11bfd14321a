"""Runs of the host phase that die or overlap, on a sandbox host (the seed V100 server), through the rollout's own
playbook (playbooks/host.yml, after playbooks/plan.yml):

* killed for real (SIGKILL of ansible-playbook and every process under it, tests/helpers/kill_points.py) at every
  step boundary - after each file the role renames into place (the GRUB file, each vfio file, the state file at each
  step, the lock), during each tool (update-grub, update-initramfs, the reboot: its work done, the run not yet told)
  - one run dying at each,
  then run to the end: no work forgotten (each tool ran after the last change of its inputs, and before the reboot),
  none stuck, exactly one reboot, the lock given back, and a further run changes nothing;
* two runs at once on one host: the second stops before changing anything, naming the first (its pid, its control
  host, since when); the first completes with one reboot.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ogc_testlib import (ROOT, SCRIPT_ENV, ansible_env, json_report, sandbox_host, sandbox_host_tools, start_playbook,
                         write_inventory)

pytestmark = pytest.mark.integration

REPO = Path(ROOT)
PY = sys.executable
HELPERS = REPO / "tests" / "helpers"
STATE = "var/lib/open-gpu-cloud/passthrough_host.json"
LOCK = "var/lib/open-gpu-cloud/passthrough_host.lock"
INITRAMFS_INPUTS = ("file:etc/modprobe.d/", "file:etc/modules-load.d/", "file:etc/initramfs-tools/")
MAX_RUNS = 60  # a bound: each run dies at a boundary it has not died at before, or runs to the end


def sandbox(base: Path, tool_wrapper=None):
    """A sandbox host ``h1`` (fixture seed-v100) with its inventory; returns (inventory path, root)."""
    root, state = base / "root", base / "state"
    state.mkdir(parents=True)
    fixture = base / "h1.yml"
    shutil.copy(REPO / "fixtures" / "hosts" / "seed-v100.yml", fixture)
    subprocess.run([PY, str(REPO / "scripts" / "mock_sysfs.py"), "build", str(fixture), str(root)], check=True,
                   env=SCRIPT_ENV)
    wrap = tool_wrapper or (lambda name: [PY, str(HELPERS / "kill_points.py"), name, "--"])
    hostvars = sandbox_host(root, base / "plans", passthrough_show_report=False,
                            **sandbox_host_tools(root, state / "calls.jsonl", fixture, wrap))
    return write_inventory(base / "inventory.yml", {"h1": hostvars}), root


def playbook(inventory, name, env=None, background=False):
    """ansible-playbook in a process group of its own (what a kill takes down whole)."""
    proc = start_playbook("-i", inventory, REPO / "playbooks" / name, cwd=inventory.parent, own_group=True,
                          env=ansible_env(ANSIBLE_PIPELINING="True", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                                          **(env or {})))
    if background:
        return proc
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def report(out):
    """The json callback's document: (stats, {task name: message} of failures)."""
    doc = json_report(out)
    failures = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    failures[task["task"]["name"].split(" : ", 1)[-1]] = result.get("msg", "")
    return doc["stats"], failures


def reboots(root):
    path = root / ".simulated-reboots"
    return path.read_text().splitlines() if path.exists() else []


def test_killed_at_every_boundary_each_run_finishes_what_the_last_left(tmp_path):
    inventory, root = sandbox(tmp_path)
    rc, out = playbook(inventory, "plan.yml")
    assert rc == 0, out[-3000:]
    kills = tmp_path / "kills"
    kills.mkdir()
    env = {"OGC_KILL_DIR": str(kills), "OGC_KILL_ROOT": str(root),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS / "kill_sitecustomize"),
                                                       os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    outcomes = []
    for _ in range(MAX_RUNS):
        rc, out = playbook(inventory, "host.yml", env=env)
        outcomes.append(rc)
        if rc != -signal.SIGKILL:
            break
    else:
        pytest.fail(f"still dying after {MAX_RUNS} runs: {(kills / 'killed.txt').read_text()}")
    wall = time.monotonic() - started
    killed = (kills / "killed.txt").read_text().splitlines()
    events = (kills / "events.log").read_text().splitlines()
    assert rc == 0, out[-5000:]
    assert outcomes.count(-signal.SIGKILL) == len(killed) == len(set(killed))
    # Every kind of boundary was a place of death: each file written, each state step, the lock, each tool.
    for key in ("file:etc/default/grub", "file:etc/modprobe.d/vfio.conf", "file:etc/modules-load.d/vfio.conf",
                "file:etc/initramfs-tools/modules", "state:[]->[boot_config]", "state:[boot_config]->[]",
                "state:[]->[initramfs]", "state:[initramfs]->[]", "state:[]->[reboot]", "state:[reboot]->[]",
                "tool:update-grub:after", "tool:update-initramfs:after", "tool:reboot:after"):
        assert key in killed, (key, killed)
    # Nothing forgotten: each tool completed after the last change of its inputs, and both before the one reboot.
    last = {key: max(i for i, e in enumerate(events) if e.startswith(key) or e == key)
            for key in ("file:etc/default/grub", "tool:update-grub:after", "tool:update-initramfs:after",
                        "tool:reboot:after")}
    last_input = max(i for i, e in enumerate(events) if e.startswith(INITRAMFS_INPUTS))
    assert last["file:etc/default/grub"] < last["tool:update-grub:after"] < last["tool:reboot:after"]
    assert last_input < last["tool:update-initramfs:after"] < last["tool:reboot:after"]
    assert events.count("tool:reboot:after") == 1 and len(reboots(root)) == 1
    state = json.loads((root / STATE).read_text())
    assert state["pending"] == [] and state["reboot"] is None
    # Each run after a kill found the dead run's lock and took it over; the last one gave its own back.
    assert "took over the lock of run " in out and "that run is gone" in out
    assert not (root / LOCK).exists()
    assert "iommu=pt" in reboots(root)[0]
    # Converged: one more run (no kill) changes nothing and runs no tool.
    calls_before = (tmp_path / "state" / "calls.jsonl").read_text()
    rc, out = playbook(inventory, "host.yml")
    stats, failures = report(out)
    assert rc == 0 and not failures and stats["h1"]["changed"] == 0, (stats, failures)
    assert (tmp_path / "state" / "calls.jsonl").read_text() == calls_before and len(reboots(root)) == 1
    print(f"\n{len(outcomes)} runs ({len(killed)} killed) in {wall:.0f} s")


def test_a_second_run_on_the_same_host_stops_naming_the_first(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()

    def wrapper(name):
        # The first run's initramfs tool waits (at most 300 s) for the second run to have ended.
        if name != "update-initramfs":
            return []
        return [PY, "-c", "import os, sys, time\n"
                "open(os.path.join(sys.argv[1], 'waiting'), 'w').close()\n"
                "deadline = time.time() + 300\n"
                "while not os.path.exists(os.path.join(sys.argv[1], 'go')) and time.time() < deadline:\n"
                "    time.sleep(0.2)\n"
                "os.execvp(sys.argv[2], sys.argv[2:])\n", str(gate)]

    inventory, root = sandbox(tmp_path, tool_wrapper=wrapper)
    rc, out = playbook(inventory, "plan.yml")
    assert rc == 0, out[-3000:]
    first = playbook(inventory, "host.yml", background=True)
    try:
        deadline = time.monotonic() + 300
        while not (gate / "waiting").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-3000:]
            time.sleep(0.2)
        grub_before = (root / "etc/default/grub").read_text()
        rc, out = playbook(inventory, "host.yml")
        stats, failures = report(out)
        msg = failures.get("Take the host's lock (one run of the host phase at a time)", "")
        assert rc != 0 and msg.startswith("h1: another run of the host phase holds the host's lock "
                                          "/var/lib/open-gpu-cloud/passthrough_host.lock: run "), (failures, out[-3000:])
        assert f"(ansible-playbook pid {first.pid})" in msg and "it is still running" in msg
        assert f"on {os.uname().nodename} " in msg and "holding it since 20" in msg
        assert stats["h1"]["changed"] == 0 and (root / "etc/default/grub").read_text() == grub_before
    finally:
        (gate / "go").touch()
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-5000:]
    assert len(reboots(root)) == 1 and not (root / LOCK).exists()


def tool_calls(tmp_path, name):
    path = tmp_path / "state" / "calls.jsonl"
    return [json.loads(line)["name"] for line in path.read_text().splitlines()].count(name) if path.exists() else 0


def test_a_corrupt_state_file_s_advice_is_followed_and_the_initramfs_is_still_rebuilt(tmp_path):
    """The vfio files are written, the initramfs rebuild fails (pending in the state file), then the state file is
    damaged. The refusal says to remove it; done, the next run rebuilds the initramfs - its inputs are not those it
    last ran on, whatever the file said - and reboots once."""
    inventory, root = sandbox(tmp_path, tool_wrapper=lambda name: [])
    assert playbook(inventory, "plan.yml")[0] == 0
    fail = tmp_path / "state" / "fail-update-initramfs"
    fail.write_text("E: /usr/share/initramfs-tools/hooks/x failed\n")
    rc, out = playbook(inventory, "host.yml")
    assert rc != 0 and json.loads((root / STATE).read_text())["pending"] == ["initramfs"]
    assert (root / "etc/modprobe.d/vfio.conf").exists() and tool_calls(tmp_path, "update-initramfs") == 0
    fail.unlink()
    (root / STATE).write_text('{"pending": ["initr')                       # damaged (a full disk, a bad edit)
    rc, out = playbook(inventory, "host.yml")
    _stats, failures = report(out)
    msg = " ".join(failures.values())
    assert rc != 0 and f"/{STATE} is not valid JSON" in msg, failures
    assert f"remove /{STATE} to start afresh: the next run then repeats the initramfs and boot-config steps" in msg
    assert not reboots(root) and not (root / LOCK).exists()
    (root / STATE).unlink()                                               # the advice
    rc, out = playbook(inventory, "host.yml")
    assert rc == 0, out[-5000:]
    assert tool_calls(tmp_path, "update-initramfs") == 1 and len(reboots(root)) == 1
    state = json.loads((root / STATE).read_text())
    assert state["pending"] == [] and state["reboot"] is None and state["inputs"]["initramfs"].startswith("sha256:")
    calls = (tmp_path / "state" / "calls.jsonl").read_text()
    rc, out = playbook(inventory, "host.yml")
    assert rc == 0 and report(out)[0]["h1"]["changed"] == 0 and (tmp_path / "state" / "calls.jsonl").read_text() == calls


def test_a_state_file_copied_from_another_machine_does_not_refuse_a_host_its_first_reboot(tmp_path):
    """A host rebooted once for its configuration (the boot loader ignored it: the reboot is on record, unverified);
    its state file is copied to a twin that never rebooted (an image taken of it, say). The twin's run sets the copy
    aside - another machine's record - and reboots it once, instead of blaming its firmware."""
    first, first_root = sandbox(tmp_path / "a", tool_wrapper=lambda name: [])
    twin, twin_root = sandbox(tmp_path / "b", tool_wrapper=lambda name: [])
    for number, root in enumerate((first_root, twin_root), 1):
        (root / "etc/machine-id").write_text(f"{number:032x}\n")
    with open(first, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    doc["all"]["children"]["gpu_hosts"]["hosts"]["h1"]["passthrough_host_reboot_command"] = [
        "sh", "-c", 'cat /proc/sys/kernel/random/uuid > "$1/proc/sys/kernel/random/boot_id" && '
                    'echo reboot >> "$1/.simulated-reboots"', "reboot", str(first_root)]
    first.write_text(yaml.safe_dump(doc))
    assert playbook(first, "plan.yml")[0] == 0 and playbook(first, "host.yml")[0] != 0
    copied = json.loads((first_root / STATE).read_text())
    assert copied["reboot"]["fingerprint"] and copied["machine"]
    (twin_root / STATE).parent.mkdir(parents=True, exist_ok=True)
    (twin_root / STATE).write_text(json.dumps(copied))
    assert playbook(twin, "plan.yml")[0] == 0
    rc, out = playbook(twin, "host.yml")
    assert rc == 0, out[-5000:]
    assert "was written on another machine (its machine id is not this host's" in out
    assert len(reboots(twin_root)) == 1
    state = json.loads((twin_root / STATE).read_text())
    assert state["machine"] != copied["machine"] and state["pending"] == [] and state["reboot"] is None
    assert (twin_root / STATE).stat().st_mode & 0o777 == 0o600


def test_another_control_host_s_live_lock_is_refused_until_it_is_removed_or_its_lease_runs_out(tmp_path):
    inventory, root = sandbox(tmp_path, tool_wrapper=lambda name: [])
    assert playbook(inventory, "plan.yml")[0] == 0
    other = {"run": "0123456789abcdef", "controller": "awx-node-2", "controller_id": "fedcba9876543210",
             "boot": "00112233aabbccdd", "user": "awx", "pid": 4242, "start_time": 17, "since": "2026-11-26T07:00:00Z"}
    (root / LOCK).parent.mkdir(parents=True, exist_ok=True)
    (root / LOCK).write_text(json.dumps(dict(other, expires=int(time.time()) + 3600)))
    grub = (root / "etc/default/grub").read_text()
    rc, out = playbook(inventory, "host.yml")
    _stats, failures = report(out)
    msg = failures.get("Take the host's lock (one run of the host phase at a time)", "")
    assert rc != 0 and msg.startswith("h1: another run of the host phase holds the host's lock "
                                      "/var/lib/open-gpu-cloud/passthrough_host.lock: run 0123456789abcdef of awx on "
                                      "awx-node-2 (ansible-playbook pid 4242)"), failures
    assert "it runs on another control host (awx-node-2)" in msg and "its lease runs until" in msg
    assert "remove /var/lib/open-gpu-cloud/passthrough_host.lock on h1" in msg
    assert (root / "etc/default/grub").read_text() == grub and not reboots(root)
    (root / LOCK).unlink()                                                # the advice: that run is gone
    rc, out = playbook(inventory, "host.yml")
    assert rc == 0 and len(reboots(root)) == 1 and not (root / LOCK).exists(), out[-5000:]
    # A lock whose lease ran out is taken over without asking, from any control host.
    (root / LOCK).write_text(json.dumps(dict(other, expires=int(time.time()) - 1)))
    rc, out = playbook(inventory, "host.yml")
    assert rc == 0 and "took over the lock of run 0123456789abcdef" in out and "its lease ran out" in out
    assert not (root / LOCK).exists() and len(reboots(root)) == 1
