"""Role nova_pci_config through playbooks/nova.yml: write, idempotence, check mode, diff,
operator overrides kept, conflicts, PCI in Placement (on by default, pool-only for a release without it, never
turned off again) and its refusals with clear errors. The scheduler side against a real Placement is proven in
tests/integration/site/test_site_end_to_end.py."""

import json

import pytest

from nova_helpers import alias, device, plan, run_playbook
from ogc_testlib import load_source, collection_plugin

pytestmark = pytest.mark.integration

planner = collection_plugin("filter", "passthrough_plan")
BEGIN = "# BEGIN open-gpu-cloud nova_pci_config: managed block, edit outside it"

PLANS = {
    "gpu1": plan("gpu1", [device("0000:27:00.0"), device("0000:a3:00.0")], [alias()]),
    "gpu2": plan("gpu2", [device("0000:41:00.0", "2204", "rtx3090"), device("0000:61:00.0")],
                 [alias("rtx3090", "2204"), alias()]),
    "gpu3": plan("gpu3", [], []),
}


def config_vars(tmp_path, **extra):
    return {"nova_pci_config_node_custom_config": str(tmp_path / "config"),
            "nova_pci_config_plans": PLANS, **extra}


def lines(path, key):
    return [line.split("=", 1)[1].strip() for line in path.read_text().splitlines()
            if line.startswith(key + " =")]


def test_writes_then_idempotent_and_check_mode_writes_nothing(tmp_path, inventory):
    cfg = tmp_path / "config"
    rc, out, recap = run_playbook("nova.yml", inventory, config_vars(tmp_path), check=True)
    assert rc == 0, out
    assert recap["changed"] > 0 and not cfg.exists()

    rc, out, recap = run_playbook("nova.yml", inventory, config_vars(tmp_path), "--diff")
    assert rc == 0, out
    assert recap["changed"] > 0
    assert "+device_spec = {\"address\": \"0000:27:00.0\"" in out  # --diff shows the change
    glob = cfg / "nova.conf"
    assert glob.read_text().startswith(BEGIN + "\n#\n# Ansible managed")
    assert [json.loads(v)["name"] for v in lines(glob, "alias")] == ["rtx3090", "tesla-v100"]
    assert lines(glob, "enabled_filters")[0].split(",")[-1] == "PciPassthroughFilter"
    assert lines(glob, "available_filters") == ["nova.scheduler.filters.all_filters"]
    # The computes report to Placement; the scheduler keeps the pools while Placement cannot be asked (no cloud).
    assert lines(glob, "report_in_placement") == ["true"]
    assert lines(glob, "pci_in_placement") == []
    assert "the scheduler keeps Nova's PCI pools until Placement has every GPU host's devices" in out
    assert [json.loads(v) for v in lines(glob, "alias")][1] == {
        "name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI",
        "numa_policy": "preferred", "resource_class": "CUSTOM_GPU_TESLA_V100"}
    assert [json.loads(v) for v in lines(cfg / "nova/gpu1/nova.conf", "device_spec")] == [
        {"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4",
         "resource_class": "CUSTOM_GPU_TESLA_V100", "traits": "CUSTOM_GPU_10DE_1DB4"},
        {"address": "0000:a3:00.0", "vendor_id": "10de", "product_id": "1db4",
         "resource_class": "CUSTOM_GPU_TESLA_V100", "traits": "CUSTOM_GPU_10DE_1DB4"}]
    assert [json.loads(v)["address"] for v in lines(cfg / "nova/gpu2/nova.conf", "device_spec")] == [
        "0000:41:00.0", "0000:61:00.0"]
    assert not (cfg / "nova/gpu3").exists()
    assert oct(glob.stat().st_mode & 0o777) == "0o644"

    rc, out, recap = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc == 0 and recap["changed"] == 0, out


def test_operator_content_is_kept_and_plan_change_updates_only_our_block(tmp_path, inventory):
    cfg = tmp_path / "config"
    (cfg / "nova/gpu1").mkdir(parents=True)
    (cfg / "nova.conf").write_text("[DEFAULT]\ncpu_allocation_ratio = 4.0\n")
    (cfg / "nova/gpu1/nova.conf").write_text("[libvirt]\ncpu_mode = host-passthrough\n")
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc == 0, out
    assert (cfg / "nova.conf").read_text().startswith("[DEFAULT]\ncpu_allocation_ratio = 4.0\n" + BEGIN)
    assert (cfg / "nova/gpu1/nova.conf").read_text().startswith("[libvirt]\ncpu_mode = host-passthrough\n")

    plans = dict(PLANS, gpu1=plan("gpu1", [], []))  # gpu1 now gives Nova nothing
    rc, out, recap = run_playbook("nova.yml", inventory, config_vars(tmp_path, nova_pci_config_plans=plans))
    assert rc == 0 and recap["changed"] > 0, out
    assert (cfg / "nova/gpu1/nova.conf").read_text() == "[libvirt]\ncpu_mode = host-passthrough\n"


def test_operator_filters_with_pci_filter_are_left_alone(tmp_path, inventory):
    cfg = tmp_path / "config"
    (cfg / "nova").mkdir(parents=True)
    (cfg / "nova/nova-scheduler.conf").write_text(
        "[filter_scheduler]\nenabled_filters = ComputeFilter,PciPassthroughFilter,NUMATopologyFilter\n")
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc == 0, out
    assert "leaves the scheduler filters to it" in out
    assert lines(cfg / "nova.conf", "enabled_filters") == []


@pytest.mark.parametrize("path, text, needles", [
    ("nova/nova-scheduler.conf", "[filter_scheduler]\nenabled_filters = ComputeFilter,ImagePropertiesFilter\n",
     ["nova/nova-scheduler.conf line 2 sets [filter_scheduler] enabled_filters", "Add PciPassthroughFilter"]),
    ("nova/gpu2/nova-compute.conf", '[pci]\ndevice_spec = {"vendor_id": "10de"}\n',
     ["nova/gpu2/nova-compute.conf line 2 sets [pci] device_spec", "nova-compute on gpu2", "passthrough policy"]),
    ("nova/nova-api.conf", '[pci]\nalias = {"name": "mine"}\n',
     ["nova/nova-api.conf line 2 sets [pci] alias", "Move it into nova.conf"]),
])
def test_conflicting_operator_override_fails_before_writing(tmp_path, inventory, path, text, needles):
    cfg = tmp_path / "config"
    (cfg / path).parent.mkdir(parents=True)
    (cfg / path).write_text(text)
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc != 0
    assert "conflicting overrides in " + str(cfg) in out
    for needle in needles:
        assert needle in out, out
    assert not (cfg / "nova.conf").exists()  # nothing written
    assert "Traceback" not in out


def test_same_alias_for_different_models_fails(tmp_path, inventory):
    plans = dict(PLANS, gpu3=plan("gpu3", [device("0000:01:00.0", "20b5")], [alias("tesla-v100", "20b5")]))
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, nova_pci_config_plans=plans))
    assert rc != 0
    assert "alias name tesla-v100 means 10de:1db4 on host gpu1 but 10de:20b5 on host gpu3" in out, out
    assert not (tmp_path / "config").exists()


def test_missing_plan_names_host_and_fix(tmp_path, inventory):
    plans = {"gpu1": PLANS["gpu1"]}
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(
        tmp_path, nova_pci_config_plans=plans, passthrough_plan_dir=str(tmp_path / "plans")))
    assert rc != 0
    flat = " ".join(out.split())
    assert f"passthrough_plan_load: host gpu2: no plan file {tmp_path}/plans/gpu2.json" in flat, out
    assert "run: ansible-playbook playbooks/plan.yml -i inventory/<env> --limit gpu2" in flat
    assert not (tmp_path / "config").exists()


def test_plan_dir_not_set_names_the_variable(tmp_path, inventory):
    # Set empty on purpose: the site's default (group_vars/all/main.yml) is not empty.
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, nova_pci_config_plans={},
                                                                 passthrough_plan_dir=""))
    assert rc != 0
    flat = " ".join(out.split())
    assert "passthrough_plan_load: host gpu1: passthrough_plan_dir is not set, so it has no plan file" in flat, out
    assert not (tmp_path / "config").exists()


def test_stale_plan_file_is_refused(tmp_path, inventory):
    pdir = tmp_path / "plans"
    pdir.mkdir()
    for host, p in PLANS.items():
        (pdir / (host + ".json")).write_text(json.dumps(planner.plan_record(p, {}, {})))
    # gpu3's plan was made with a policy the host no longer has.
    (pdir / "gpu3.json").write_text(json.dumps(planner.plan_record(PLANS["gpu3"], {}, {"exclude": ["0000:01:00.0"]})))
    rc, out, _ = run_playbook("nova.yml", inventory, {
        "nova_pci_config_node_custom_config": str(tmp_path / "config"), "passthrough_plan_dir": str(pdir)})
    assert rc != 0
    flat = " ".join(out.split())
    assert f"host gpu3: plan file {pdir}/gpu3.json is stale: it was made with another passthrough_policy" in flat, out
    assert not (tmp_path / "config").exists()


def test_plans_read_from_plan_files(tmp_path, inventory):
    pdir = tmp_path / "plans"
    pdir.mkdir()
    for host, p in PLANS.items():
        (pdir / (host + ".json")).write_text(json.dumps(planner.plan_record(p, {}, {})))
    rc, out, _ = run_playbook("nova.yml", inventory, {
        "nova_pci_config_node_custom_config": str(tmp_path / "config"),
        "passthrough_plan_dir": str(pdir)})
    assert rc == 0, out
    assert len(lines(tmp_path / "config/nova/gpu2/nova.conf", "device_spec")) == 2


@pytest.mark.parametrize("text, needle", [
    ("", "is empty"),
    ('{"facts": {}, "plan": {"host": "gpu2"', "is not valid JSON (line 1"),
])
def test_empty_or_corrupt_plan_file_names_the_file_and_the_command(tmp_path, inventory, text, needle):
    pdir = tmp_path / "plans"
    pdir.mkdir()
    for host, p in PLANS.items():
        (pdir / (host + ".json")).write_text(json.dumps(planner.plan_record(p, {}, {})))
    (pdir / "gpu2.json").write_text(text)
    rc, out, _ = run_playbook("nova.yml", inventory, {
        "nova_pci_config_node_custom_config": str(tmp_path / "config"),
        "passthrough_plan_dir": str(pdir)})
    assert rc != 0
    assert f"plan file {pdir}/gpu2.json of host gpu2 {needle}" in out, out
    assert "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit gpu2" in " ".join(out.split())
    assert not (tmp_path / "config").exists()


def test_placement_on_then_off_is_refused(tmp_path, inventory):
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc == 0, out
    assert lines(tmp_path / "config/nova.conf", "report_in_placement") == ["true"]
    before = (tmp_path / "config/nova.conf").read_text()
    for off in ({"nova_pci_config_placement": False}, {"nova_pci_config_openstack_release": "zed"}):
        rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, **off))
        assert rc != 0
        assert "already sets [pci] report_in_placement = true" in out
        assert "cannot be disabled any more" in out and "Set nova_pci_config_placement: true" in out
        assert (tmp_path / "config/nova.conf").read_text() == before and "Traceback" not in out


def test_a_release_without_placement_scheduling_gets_the_pool_configuration(tmp_path, inventory):
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, nova_pci_config_openstack_release="zed"))
    assert rc == 0, out
    assert "Nova zed cannot schedule PCI devices in Placement (2023.1 and later can)" in out
    glob = tmp_path / "config/nova.conf"
    assert lines(glob, "report_in_placement") == [] and "resource_class" not in glob.read_text()
    assert [json.loads(v) for v in lines(tmp_path / "config/nova/gpu1/nova.conf", "device_spec")][0] == {
        "address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4"}


@pytest.mark.parametrize("bad, needles", [
    ({"nova_pci_config_report_in_placement": True},
     ["nova_pci_config_report_in_placement is retired", "Remove nova_pci_config_report_in_placement"]),
    ({"nova_pci_config_placement": "yes"}, ["nova_pci_config_placement and nova_pci_config_one_time_use booleans",
                                            "got yes and False"]),
    ({"nova_pci_config_openstack_release": "2026.7"},
     ["nova_pci_config_openstack_release (kolla-ansible's openstack_release): openstack_release '2026.7' is not a "
      "release this project knows", "'<year>.<1|2>'"]),
    ({"nova_pci_config_numa_policy": "strict"},
     ["value of nova_pci_config_numa_policy must be one of: legacy, preferred, required, socket, got: strict"]),
    ({"nova_pci_config_one_time_use": True, "nova_pci_config_openstack_release": "2024.2"},
     ["Nova 2024.2 has no one-time-use PCI devices: they arrive in 2025.2 (Nova 32.0.0)",
      "set nova_pci_config_one_time_use: false, or deploy 2025.2 or later"]),
    # 2025.1 (Nova 31) ignores the tag: refused, naming the release that brings it.
    ({"nova_pci_config_one_time_use": True, "nova_pci_config_openstack_release": "2025.1"},
     ["Nova 2025.1 has no one-time-use PCI devices: they arrive in 2025.2 (Nova 32.0.0)",
      "or deploy 2025.2 or later"]),
    ({"nova_pci_config_one_time_use": True, "nova_pci_config_placement": False},
     ["nova_pci_config_placement is false, and Nova tracks one-time-use devices in Placement only"]),
])
def test_bad_placement_settings_are_refused_before_writing(tmp_path, inventory, bad, needles):
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, **bad))
    assert rc != 0
    for needle in needles:
        assert needle in out, out
    assert not (tmp_path / "config").exists() and "Traceback" not in out


def test_one_time_use_marks_every_device(tmp_path, inventory):
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path, nova_pci_config_one_time_use=True))
    assert rc == 0, out
    specs = [json.loads(v) for v in lines(tmp_path / "config/nova/gpu1/nova.conf", "device_spec")]
    assert [s["one_time_use"] for s in specs] == ["true", "true"]


def test_operator_placement_switch_is_a_conflict_and_the_advice_works(tmp_path, inventory):
    cfg = tmp_path / "config"
    (cfg / "nova").mkdir(parents=True)
    (cfg / "nova/nova-scheduler.conf").write_text("[filter_scheduler]\npci_in_placement = true\n")
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc != 0
    assert "nova/nova-scheduler.conf line 2 sets [filter_scheduler] pci_in_placement = true" in out, out
    assert "Remove the line and set nova_pci_config_placement" in out
    assert not (cfg / "nova.conf").exists()
    (cfg / "nova/nova-scheduler.conf").unlink()  # the advice followed
    rc, out, _ = run_playbook("nova.yml", inventory, config_vars(tmp_path))
    assert rc == 0, out
