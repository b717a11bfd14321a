"""playbooks/health.yml with Nova's side: the test cloud's real placement against a host's plan, both ways,
and what an error talking to Nova does.

The compute test cloud's hypervisor ogc-gpu-1 offers two Tesla V100, 0000:27:00.0 and 0000:44:00.0
(device_spec by vendor and product). The simulated seed host's plan here excludes 0000:44:00.0 and selects
0000:27:00.0, 0000:a3:00.0 and 0000:c3:00.0: Nova lacks two planned GPUs and offers one the plan does not.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
import yaml

from ogc_testlib import FIXTURES, ROOT, collection_module, load_source, collection_plugin

pytestmark = pytest.mark.integration
mock_sysfs = load_source("mock_sysfs", "scripts/mock_sysfs.py")
facts_module = collection_module("pci_passthrough_facts")
planner = collection_plugin("filter", "passthrough_plan")
POLICY = {"exclude": ["0000:44:00.0"]}


def seed_inventory(tmp_path, **host_vars):
    """A configured seed host (planned devices on vfio-pci), its plan file, and an inventory for health.yml."""
    root = tmp_path / "seed"
    fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, "seed-v100.yml"))
    mock_sysfs.build_tree(fixture, str(root))
    plan = planner.passthrough_plan(facts_module.discover(str(root / "sys"), str(root / "proc")), POLICY, "seed")
    assert [s["address"] for s in plan["selected"]] == ["0000:27:00.0", "0000:a3:00.0", "0000:c3:00.0"]
    mock_sysfs.build_tree(fixture, str(root), drivers={a: "vfio-pci" for a in plan["vfio_devices"]})
    plans = tmp_path / "plans"
    plans.mkdir()
    facts = facts_module.discover(str(root / "sys"), str(root / "proc"))
    (plans / "seed.json").write_text(json.dumps(planner.plan_record(plan, facts, POLICY)))
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                  "cloud_name": "ogc-test"},
                         "children": {"gpu_hosts": {"hosts": {"seed": dict({
                             "passthrough_sysfs_root": str(root / "sys"), "passthrough_procfs_root": str(root / "proc"),
                             "passthrough_plan_dir": str(plans), "passthrough_policy": POLICY}, **host_vars)}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def run(inventory, clouds_yaml, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.pop("OS_CLOUD", None)
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), os.path.join(ROOT, "playbooks", "health.yml"),
                           "-e", f"cloud_clouds_yaml={clouds_yaml}", *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


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
