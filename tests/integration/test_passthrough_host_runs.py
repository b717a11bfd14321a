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

from ogc_testlib import ANSIBLE_PLAYBOOK, ROOT

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
    subprocess.run([PY, str(REPO / "scripts" / "mock_sysfs.py"), "build", str(fixture), str(root)], check=True)
    wrap = tool_wrapper or (lambda name: [PY, str(HELPERS / "kill_points.py"), name, "--"])
    calls = str(state / "calls.jsonl")
    hostvars = {
        "ansible_connection": "local", "ansible_python_interpreter": PY,
        "passthrough_host_root": str(root),
        "passthrough_sysfs_root": str(root / "sys"), "passthrough_procfs_root": str(root / "proc"),
        "passthrough_plan_dir": str(base / "plans"), "passthrough_show_report": False,
        "passthrough_host_os_family": "Debian", "passthrough_host_allow_reboot": True,
        "passthrough_host_boot_config_command": wrap("update-grub") + [
            PY, str(REPO / "scripts" / "simulate_boot_config.py"), calls, str(root), "update-grub"],
        "passthrough_host_initramfs_command": wrap("update-initramfs") + [
            PY, str(REPO / "scripts" / "record_command.py"), calls, "update-initramfs", "-u", "-k", "all"],
        "passthrough_host_reboot_command": wrap("reboot") + [
            PY, str(REPO / "scripts" / "simulate_reboot.py"), str(fixture), str(root)],
    }
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": {"h1": hostvars}}}}}))
    return inventory, root


def playbook(inventory, name, env=None, background=False):
    """ansible-playbook in a process group of its own (what a kill takes down whole)."""
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="True",
                    ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **(env or {}))
    args = [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(REPO / "playbooks" / name)]
    proc = subprocess.Popen(args, cwd=str(inventory.parent), env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if background:
        return proc
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def report(out):
    """The json callback's document: (stats, {task name: message} of failures)."""
    doc, _ = json.JSONDecoder().raw_decode(out[out.index("{\n"):])
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
