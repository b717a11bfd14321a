"""playbooks/health.yml when the check cannot run on a host (its plan file is gone): the metrics file says the host is
not healthy (ogc_gpu_health_ok 0, the failure counted as an alert) instead of keeping the last good answer."""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ogc_testlib import FIXTURES, load_source, project_playbook, sandbox_host, words, write_inventory

pytestmark = pytest.mark.integration
mock_sysfs = load_source("mock_sysfs", "scripts/mock_sysfs.py")


def samples(text):
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_check_that_cannot_run_turns_the_health_gauge_off(tmp_path):
    root = tmp_path / "seed"
    mock_sysfs.build_tree(mock_sysfs.load_fixture(os.path.join(FIXTURES, "seed-v100.yml")), str(root))
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    # What the last good check wrote.
    (textfile / "ogc_gpu.prom").write_text("ogc_gpu_health_ok 1\nogc_gpu_health_alerts 0\n"
                                           "ogc_gpu_health_last_run_timestamp_seconds 1700000000\n")
    # No plan file in the plan directory: the check cannot run.
    inventory = write_inventory(tmp_path / "inventory.yml", {
        "seed": sandbox_host(root, tmp_path / "plans", gpu_health_metrics_dir=str(textfile))}, {"health_check_nova": False})
    rc, out = project_playbook(inventory, playbook="health.yml")
    out = words(out)
    assert rc != 0 and "no plan file" in out and "seed" in out, out[-3000:]
    got = samples((textfile / "ogc_gpu.prom").read_text())
    assert got["ogc_gpu_health_ok"] == 0 and got["ogc_gpu_health_alerts"] == 1
    assert got["ogc_gpu_health_last_run_timestamp_seconds"] > 1700000000
