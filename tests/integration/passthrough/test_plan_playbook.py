"""playbooks/plan.yml through ansible-playbook on fixture hosts: plan files, check mode, bad input."""

from __future__ import annotations

import json
import os
import tarfile

import pytest
import yaml

from ogc_testlib import (FIXTURE_HOSTS, PCI_IDS, ROOT, fixture_inventory, output, project_playbook, recap, run_playbook,
                         words, write_inventory)

pytestmark = pytest.mark.integration
HOSTS = FIXTURE_HOSTS
# The plan files' test also plans a GPU that shares its group with its own functions only.
PLAN_HOSTS = {**HOSTS, "shared": "shared-group"}


def test_plan_files_and_report(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host, fixtures=PLAN_HOSTS)
    plans = tmp_path / "plans"
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}")
    assert rc == 0, out
    seed = json.loads((plans / "seed.json").read_text())
    assert [s["address"] for s in seed["plan"]["selected"]] == ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"]
    assert seed["plan"]["vfio_ids"] == ["10de:1db4"] and seed["plan"]["host"] == "seed"
    assert seed["facts"]["iommu_groups"]["19"][-2:] == ["0000:27:00.0", "0000:28:00.0"]
    assert json.loads((plans / "intel.json").read_text())["plan"]["selected"] == []
    assert json.loads((plans / "twin.json").read_text())["plan"]["bind_by_address"][0] == "0000:0b:00.0"
    # A GPU sharing its group with its own functions only: offered, its group bound by address.
    shared = json.loads((plans / "shared.json").read_text())["plan"]
    assert [s["address"] for s in shared["selected"]] == ["0000:01:00.0"] and shared["vfio_ids"] == []
    assert shared["bind_by_address"] == ["0000:01:00.0", "0000:01:00.1"]
    # Plan files are written 0644: readable, not world-writable.
    assert {oct(path.stat().st_mode & 0o777) for path in plans.glob("*.json")} == {"0o644"}
    # The readable table is printed for each host.
    assert "0000:27:00.0  Tesla V100 PCIe 16GB    19     nouveau  16G     bus    nova     alias tesla-v100 (type-PCI)" \
        in out
    # Model names come from the host's PCI ID database (Debian's pci.ids), as lspci shows them.
    assert "0000:03:00.0  ASPEED Graphics Family  5      ast      ?       ?      host     VGA controller from vendor " \
        "ASPEED" in out
    assert os.path.realpath(seed["facts"]["pci_ids"]) == os.path.realpath(PCI_IDS)
    # A second run changes nothing.
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}")
    assert rc == 0, out
    assert {host: r["changed"] for host, r in recap(out).items()} == {host: 0 for host in PLAN_HOSTS}, out


def test_check_mode_writes_nothing_and_the_run_loads_its_own_plan(tmp_path, fixture_host):
    """Check mode writes no plan file (--diff shows what it would hold); the later phases of the same run load
    this run's plan record through the one loader, as a check-mode site.yml does."""
    inventory = fixture_inventory(tmp_path, fixture_host)
    plans = tmp_path / "plans"
    playbook = tmp_path / "plan_then_load.yml"
    playbook.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": os.path.join(ROOT, "playbooks", "plan.yml")},
        {"name": "Load the plans as a later phase does", "hosts": "gpu_hosts", "gather_facts": False, "tasks": [
            {"ansible.builtin.include_role": {"name": "open_gpu_cloud.toolkit.passthrough", "tasks_from": "load"}},
            {"ansible.builtin.assert": {"that": ["passthrough_plan.host == inventory_hostname",
                                                 "passthrough_plan_facts.devices | length > 0",
                                                 "passthrough_plan_source == 'run'",
                                                 "passthrough_plan_sources == {inventory_hostname: 'run'}"]}}]},
    ]))
    proc = run_playbook("-i", inventory, playbook, "--check", "--diff", "-e", f"passthrough_plan_dir={plans}",
                            timeout=300)
    out = output(proc)
    assert proc.returncode == 0, out
    assert not plans.exists()
    assert f"+++ after: {plans}/seed.json" in out, out
    assert "failed=0" in out and "failed=1" not in out


def test_the_loader_says_it_read_the_plan_file(tmp_path, fixture_host):
    """A plan made by an earlier run is read from its file, and the loader says so (passthrough_plan_source)."""
    inventory = fixture_inventory(tmp_path, fixture_host)
    plans = tmp_path / "plans"
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}", "-e", "passthrough_show_report=false")
    assert rc == 0, out
    playbook = tmp_path / "load.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Load the plans as a later phase does", "hosts": "gpu_hosts", "gather_facts": False, "tasks": [
            {"ansible.builtin.include_role": {"name": "open_gpu_cloud.toolkit.passthrough", "tasks_from": "load"}},
            {"ansible.builtin.assert": {"that": [
                "passthrough_plan == (lookup('ansible.builtin.file', passthrough_plan_dir ~ '/' ~ inventory_hostname"
                " ~ '.json') | from_json).plan",
                "passthrough_plan_source == 'file'",
                "passthrough_plan_sources == {inventory_hostname: 'file'}",
                "passthrough_plans_missing == {}"]}}]},
    ]))
    proc = run_playbook("-i", inventory, playbook, "-e", f"passthrough_plan_dir={plans}", timeout=300)
    out = output(proc)
    assert proc.returncode == 0, out
    assert {host: r["failed"] for host, r in recap(out).items()} == {host: 0 for host in HOSTS}, out


def test_bad_policy_names_host_key_and_fix(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host, {"seed": {"passthrough_policy": {"exclude": ["0000:99:00.0"]}}})
    rc, out = project_playbook(inventory, "--limit", "seed")
    assert rc != 0
    assert "passthrough_plan: host seed: passthrough_policy.exclude names 0000:99:00.0, which does not exist" in out
    assert "lspci -D" in out and "Traceback" not in out


def test_policy_ids_yaml_made_numbers_are_refused_by_preflight(tmp_path, fixture_host):
    # vendors: [0x10de] unquoted: YAML makes it the integer 4318.
    inventory = fixture_inventory(tmp_path, fixture_host, {"seed": {"passthrough_policy": {"vendors": [0x10de]}}})
    assert "- 4318" in inventory.read_text()
    rc, out = project_playbook(inventory, "--limit", "seed")
    assert rc != 0
    assert "passthrough_plan: host seed: passthrough_policy.vendors entry 4318 is a number" in out
    assert "quote it" in out and "Check the passthrough policy's keys and types" in out
    assert "Traceback" not in out


def test_relative_root_and_bad_policy_are_reported_together(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host, {"seed": {"passthrough_sysfs_root": "captured/sys",
                                                                  "passthrough_policy": {"vendors": [0x10de]}}})
    rc, out = project_playbook(inventory, "--limit", "seed")
    assert rc != 0 and "Traceback" not in out
    assert "Host seed: passthrough_sysfs_root (captured/sys) and passthrough_procfs_root (" in out
    assert "must be absolute paths, e.g. /sys and /proc" in out
    assert "passthrough_policy.vendors entry 4318 is a number" in out   # the same failure names both


def test_policy_quoted_false_stays_false(tmp_path, fixture_host):
    plans = tmp_path / "plans"
    inventory = fixture_inventory(tmp_path, fixture_host, {"seed": {"passthrough_policy": {"allow_unsafe_interrupts": "false"}}})
    assert "allow_unsafe_interrupts: 'false'" in inventory.read_text()
    rc, out = project_playbook(inventory, "--limit", "seed", "-e", f"passthrough_plan_dir={plans}")
    assert rc == 0, out
    plan = json.loads((plans / "seed.json").read_text())["plan"]
    assert "vfio_iommu_type1.allow_unsafe_interrupts=1" not in plan["kernel_args"]
    assert "vfio_iommu_type1.allow_unsafe_interrupts=1" in plan["kernel_args_absent"]


def test_missing_sysfs_root_names_the_variable(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host, {"intel": {"passthrough_sysfs_root": str(tmp_path / "missing")}})
    rc, out = project_playbook(inventory, "--limit", "intel")
    assert rc != 0
    assert "fatal: [intel]" in out and "passthrough_sysfs_root" in out and "does not exist" in out
    assert "Traceback" not in out


def test_relative_sysfs_root_is_refused_by_preflight(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host, {"twin": {"passthrough_sysfs_root": "sys"}})
    rc, out = project_playbook(inventory, "--limit", "twin")
    assert rc != 0 and "Host twin: passthrough_sysfs_root (sys)" in out and "must be absolute paths" in out


def test_capture_playbook_archive_plans_like_the_host(tmp_path, fixture_host, facts_module):
    inventory = fixture_inventory(tmp_path, fixture_host)
    captures = tmp_path / "captures"
    rc, out = project_playbook(inventory, "--limit", "twin", "-e", f"capture_dir={captures}", playbook="capture.yml")
    assert rc == 0, out
    assert "captured 11 PCI functions" in out
    with tarfile.open(captures / "twin.tar.gz") as tar:
        tar.extractall(tmp_path / "twin", filter="tar")
    root = fixture_host("console-twin")
    original = facts_module.discover(f"{root}/sys", f"{root}/proc")
    assert facts_module.discover(str(tmp_path / "twin" / "sys"), str(tmp_path / "twin" / "proc")) == original


@pytest.mark.parametrize("text, needle", [
    ("", "is empty"), ('{"plan": [', "is not valid JSON (line 1, column 11"),
    (None, "no plan file"), ('{"facts": {}, "plan": {"host": "gpu1", "aliases": []}}', "is stale: it has plan format None"),
])
def test_cloud_resources_refuses_a_missing_empty_corrupt_or_stale_plan_file(tmp_path, text, needle):
    """cloud_resources reads every GPU host's plan file through the one loader: a missing one is an error,
    not a host silently left out of the alias check."""
    plans = tmp_path / "plans"
    plans.mkdir()
    if text is not None:
        (plans / "gpu1.json").write_text(text)
    inventory = write_inventory(tmp_path / "inventory.yml", {"gpu1": {"passthrough_plan_dir": str(plans)}})
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Preflight of cloud_resources", "hosts": "gpu1", "gather_facts": False,
        "tasks": [{"name": "Run the preflight", "ansible.builtin.include_role": {
            "name": "open_gpu_cloud.toolkit.cloud_resources", "tasks_from": "preflight"},
            "vars": {"cloud_name": "ogc-test", "cloud_resources_flavors": [
                {"name": "f", "vcpus": 1, "ram": 1, "disk": 1,
                 "extra_specs": {"pci_passthrough:alias": "tesla-v100:1"}}]}}]}]))
    proc = run_playbook("-i", inventory, playbook, timeout=300)
    out = words(output(proc))
    assert proc.returncode != 0
    where = f"no plan file {plans}/gpu1.json" if text is None else (
        f"plan file {plans}/gpu1.json {needle}" if "stale" in needle else f"plan file {plans}/gpu1.json of host gpu1 {needle}")
    assert where in out, out
    assert "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit gpu1" in out
