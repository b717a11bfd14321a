"""playbooks/health.yml on a simulated seed host: healthy, a GPU fallen off the bus, warn-only mode."""

from __future__ import annotations

import os
import shutil

import pytest

from ogc_testlib import PCI_IDS, configured_host, project_playbook, sandbox_host, write_inventory

pytestmark = pytest.mark.integration


@pytest.fixture
def seed_host(tmp_path):
    """A configured seed host (planned devices on vfio-pci) and its plan file."""
    root, plans = tmp_path / "seed", tmp_path / "plans"
    import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.ids as pci_ids  # pylint: disable=import-outside-toplevel

    # The devices named from Debian's database, as discovery on the host names them.
    configured_host(root, plans, "seed", database=pci_ids.load(PCI_IDS))
    path = write_inventory(tmp_path / "inventory.yml",
                           {"seed": sandbox_host(root, plans, gpu_health_metrics_dir=str(tmp_path / "textfile"))},
                           {"health_check_nova": False})
    return root, path


def run(inventory, *args):
    return project_playbook(inventory, *args, playbook="health.yml")


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
