"""playbooks/health.yml with Nova's side: the test cloud's real placement against a host's plan, both ways,
and what an error talking to Nova does.

The compute test cloud's hypervisor ogc-gpu-1 offers two Tesla V100, 0000:27:00.0 and 0000:44:00.0
(device_spec by vendor and product). The simulated seed host's plan here excludes 0000:44:00.0 and selects
0000:27:00.0, 0000:a3:00.0 and 0000:c3:00.0: Nova lacks two planned GPUs and offers one the plan does not.
"""

from __future__ import annotations

import os
import socket

import pytest
import yaml

from ogc_testlib import ROOT, ansible_env, configured_host, output, run_playbook, sandbox_host, words, write_inventory

pytestmark = pytest.mark.integration
POLICY = {"exclude": ["0000:44:00.0"]}


def seed_inventory(tmp_path, **host_vars):
    """A configured seed host (planned devices on vfio-pci), its plan file, and an inventory for health.yml."""
    root, plans = tmp_path / "seed", tmp_path / "plans"
    plan = configured_host(root, plans, "seed", policy=POLICY)
    assert [s["address"] for s in plan["selected"]] == ["0000:27:00.0", "0000:a3:00.0", "0000:c3:00.0"]
    return write_inventory(tmp_path / "inventory.yml",
                           {"seed": sandbox_host(root, plans, passthrough_policy=POLICY, **host_vars)},
                           {"cloud_name": "ogc-test"})


def run(inventory, clouds_yaml, *args):
    proc = run_playbook("-i", inventory, os.path.join(ROOT, "playbooks", "health.yml"),
                        "-e", f"cloud_clouds_yaml={clouds_yaml}", *args, env=ansible_env(OS_CLOUD=None), timeout=300)
    return proc.returncode, words(output(proc))


def test_nova_and_the_plan_disagree_both_ways(compute_cloud, tmp_path):
    inventory = seed_inventory(tmp_path, health_nova_host="ogc-gpu-1")
    rc, out = run(inventory, compute_cloud.clouds_yaml)
    assert rc != 0, out
    missing = ("seed: GPU 0000:a3:00.0 is on the bus and in the passthrough plan, but Nova does not offer it (no "
               "placement provider ogc-gpu-1_0000:a3:00.0)")
    extra = "seed: Nova offers device 0000:44:00.0 on ogc-gpu-1, which the passthrough plan does not give it"
    assert "GPU health alerts:" in out and missing in out and extra in out, out[-4000:]
    assert "GPU 0000:c3:00.0 is on the bus and in the passthrough plan, but Nova does not offer it" in out
    assert "0000:27:00.0 is on the bus" not in out  # the one both sides agree on

    # Warn-only: the same findings are alerts in the summary, not notes.
    rc, out = run(inventory, compute_cloud.clouds_yaml, "-e", "health_fail_on_alert=false")
    assert rc == 0, out[-4000:]
    assert f"ALERT {missing}" in out and f"ALERT {extra}" in out
    assert "seed: 3/3 GPUs for Nova on the bus; Nova (placement, CUSTOM_PCI_10DE_1DB4): 2 total" in out
    assert "; 3 alert(s)" in out


def test_unknown_hypervisor_is_an_alert(compute_cloud, tmp_path):
    rc, out = run(seed_inventory(tmp_path), compute_cloud.clouds_yaml)  # hypervisor name = "seed": not in Nova
    assert rc != 0
    assert ("seed: the plan gives Nova 3 GPU(s) but placement has no PCI device of hypervisor seed: check that "
            "nova-compute runs there") in out, out[-4000:]


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_error_talking_to_nova_fails_unless_opted_out(tmp_path):
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"ogc-test": {
        "auth": {"auth_url": f"http://127.0.0.1:{_closed_port()}/v3", "username": "admin", "password": "x",
                 "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"},
        "region_name": "RegionOne", "identity_api_version": "3"}}}))
    inventory = seed_inventory(tmp_path)
    rc, out = run(inventory, clouds)
    assert rc != 0
    assert "GPU health: Nova's view of the passthrough devices could not be read (cloud ogc-test):" in out, out[-4000:]
    assert "set health_nova_required: false to report it as a note" in out
    assert "Traceback" not in out

    rc, out = run(inventory, clouds, "-e", "health_nova_required=false")
    assert rc == 0, out[-4000:]
    assert "Nova: unavailable: " in out and "seed: 3/3 GPUs for Nova on the bus; OK" in out

    rc, out = run(inventory, clouds, "-e", "health_check_nova=false")
    assert rc == 0, out[-4000:]
    assert "Nova: not asked (health_check_nova: false)" in out
