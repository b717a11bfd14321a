"""AWX job slicing on a simulated fleet (tests/helpers/fleet/fleet_slices.py, bench/fleet/slices.py's core): the plan and host phases, then the Nova and report
phases, run as three slices side by side give what one unsliced run gives (the same Nova files byte for byte, plan
files, host files and fleet report), never reboot more hosts at once than the fleet-wide batch allows, and run a
second time change nothing. The same tool measures the 24-host fleet (bench/fleet/README.md)."""

from __future__ import annotations

import os

import pytest

from ogc_testlib import ROOT, ansible_env, load_source, output, run_playbook, words, write_inventory

pytestmark = pytest.mark.integration

slices = load_source("fleet_slices", os.path.join("tests", "helpers", "fleet", "fleet_slices.py"))


def test_three_slices_give_the_unsliced_result(tmp_path):
    # Three hosts (one of each demo fixture), one per slice: every slice holds a host whose model no other slice
    # has, so the global alias list and the report are right only when each slice reads the whole fleet. A batch
    # of 2 and a 2 s reboot: the three slices' canaries ask for a reboot at the same moment, and one must wait.
    result = slices.run(3, 3, 2, 2.0, str(tmp_path / "fleets"), str(tmp_path), noop=("sliced",))
    failed = [(r["fleet"], r["job"], r["run"], r["logs"]) for r in result["runs"] if any(r["rc"])]
    assert not failed, failed
    assert result["differences"] == []
    assert result["sliced_reboots"] == 3
    assert result["wave_size"] == 2 and result["sliced_most_at_once"] == 2
    again = [r for r in result["runs"] if r["run"] == "noop"]
    assert [(r["job"], r["changed"]) for r in again] == [("plan_host", 0), ("nova_report", 0)]


def test_the_cloud_phase_refuses_a_slice(tmp_path):
    # A slice's inventory: gpu-001 alone, the fleet's plan directory holding gpu-002's plan too. The cloud phase
    # refuses before it reads a clouds.yaml or calls an API (the cloud it names exists nowhere).
    plans = tmp_path / "plans"
    plans.mkdir()
    for host in ("gpu-001", "gpu-002"):
        (plans / f"{host}.json").write_text("{}")
    inventory = write_inventory(tmp_path / "hosts.yml", {"gpu-001": {}},
                                {"passthrough_plan_dir": str(plans), "cloud_name": "nowhere"})
    proc = run_playbook(os.path.join(ROOT, "playbooks", "cloud.yml"), "-i", inventory, timeout=300,
                        env=ansible_env(OS_CLIENT_CONFIG_FILE=str(tmp_path / "absent-clouds.yaml")))
    out = words(output(proc))
    assert proc.returncode != 0
    assert ("cloud_resources: the cloud's flavors, images and quotas are one set for the whole cloud, and slices "
            "side by side would race creating the same flavors and images, so the cloud phase cannot run per slice. "
            f"The plan directory {plans} holds the plans of GPU hosts this inventory does not hold (gpu-002): this "
            "run sees part of the fleet, as an AWX job slice does. Run it unsliced (a job template with "
            "job_slice_count 1: site.yml --tags cloud;") in out, out
