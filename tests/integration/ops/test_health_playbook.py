"""playbooks/health.yml on a simulated seed host: healthy, a GPU fallen off the bus, warn-only mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from ogc_testlib import FIXTURES, PCI_IDS, ROOT, collection_module, load_source, collection_plugin

pytestmark = pytest.mark.integration
mock_sysfs = load_source("mock_sysfs", "scripts/mock_sysfs.py")
facts_module = collection_module("pci_passthrough_facts")
planner = collection_plugin("filter", "passthrough_plan")


@pytest.fixture
def seed_host(tmp_path):
    """A configured seed host (planned devices on vfio-pci) and its plan file."""
    root = tmp_path / "seed"
    fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, "seed-v100.yml"))
    mock_sysfs.build_tree(fixture, str(root))
    import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.ids as pci_ids  # pylint: disable=import-outside-toplevel

    database = pci_ids.load(PCI_IDS)  # as discovery on the host names the devices
    plan = planner.passthrough_plan(facts_module.discover(str(root / "sys"), str(root / "proc"), database), {}, "seed")
    mock_sysfs.build_tree(fixture, str(root), drivers={a: "vfio-pci" for a in plan["vfio_devices"]})
    plans = tmp_path / "plans"
    plans.mkdir()
    facts = facts_module.discover(str(root / "sys"), str(root / "proc"), database)
    (plans / "seed.json").write_text(json.dumps(planner.plan_record(plan, facts, {})))
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                  "health_check_nova": False},
                         "children": {"gpu_hosts": {"hosts": {"seed": {
                             "passthrough_sysfs_root": str(root / "sys"), "passthrough_procfs_root": str(root / "proc"),
                             "passthrough_plan_dir": str(plans),
                             "gpu_health_metrics_dir": str(tmp_path / "textfile")}}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return root, path


def run(inventory, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), os.path.join(ROOT, "playbooks", "health.yml"), *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def fall_off_the_bus(root, address):
    """What the kernel does when a device drops off: its directory and every link to it disappear."""
    link = root / "sys" / "bus" / "pci" / "devices" / address
    target = os.path.realpath(link)
    link.unlink()
    shutil.rmtree(target)
    for group in (root / "sys" / "kernel" / "iommu_groups").iterdir():
        stale = group / "devices" / address
        if os.path.lexists(stale):
            stale.unlink()


def test_healthy_then_gpu_gone(seed_host):
    root, inventory = seed_host
    rc, out = run(inventory)
    assert rc == 0, out
    assert "seed: 4/4 GPUs for Nova on the bus; OK" in out
    assert "Nova: not asked (health_check_nova: false)" in out

    fall_off_the_bus(root, "0000:c3:00.0")
    rc, out = run(inventory)
    assert rc != 0
    flat = " ".join(out.split())
    assert "seed: GPU 0000:c3:00.0 (Tesla V100 PCIe 16GB) is gone from the PCI bus (fallen off the bus?)" in flat, out
    assert "seed: 3 of 4 expected GPUs for Nova are on the bus" in flat
    assert "GPU health alerts:" in flat

    rc, out = run(inventory, "-e", "health_fail_on_alert=false")
    assert rc == 0, out
    assert "ALERT seed: GPU 0000:c3:00.0" in " ".join(out.split())


def test_corrupt_plan_file_names_the_file_and_the_command(seed_host, tmp_path):
    _root, inventory = seed_host
    (tmp_path / "plans" / "seed.json").write_text('{"facts": {}, "plan": ')
    rc, out = run(inventory)
    assert rc != 0
    flat = " ".join(out.split())
    assert f"plan file {tmp_path}/plans/seed.json of host seed is not valid JSON" in flat, out
    assert "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit seed" in flat


def test_missing_plan_file_is_an_error_not_a_plan_of_the_current_tree(seed_host, tmp_path):
    _root, inventory = seed_host
    (tmp_path / "plans" / "seed.json").unlink()
    rc, out = run(inventory)
    assert rc != 0
    flat = " ".join(out.split())
    assert f"passthrough_plan_load: host seed: no plan file {tmp_path}/plans/seed.json" in flat, out
    assert "run: ansible-playbook playbooks/plan.yml -i inventory/<env> --limit seed" in flat
    assert "Traceback" not in out


def test_plan_made_with_another_policy_is_stale(seed_host, tmp_path):
    _root, inventory = seed_host
    rc, out = run(inventory, "-e", '{"passthrough_policy": {"exclude": ["0000:44:00.0"]}}')
    assert rc != 0
    flat = " ".join(out.split())
    assert f"host seed: plan file {tmp_path}/plans/seed.json is stale: it was made with another passthrough_policy" in flat, out
    assert "--limit seed" in flat


def test_retired_policy_variable_is_refused(seed_host):
    _root, inventory = seed_host
    rc, out = run(inventory, "-e", '{"gpu_health_policy": {}}')
    assert rc != 0
    flat = " ".join(out.split())
    assert "Host seed: gpu_health_policy is no longer read" in flat, out
    assert "Rename gpu_health_policy to passthrough_policy in the inventory" in flat


def test_bad_expected_count_named(seed_host):
    _root, inventory = seed_host
    rc, out = run(inventory, "-e", "health_expected_gpus=-1")
    assert rc != 0
    assert "health_expected_gpus on seed must be a whole number >= 0" in " ".join(out.split()), out
