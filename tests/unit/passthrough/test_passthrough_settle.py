"""A reboot only when it can help (plugins/module_utils/passthrough/settle.py): the rule, the plan's blocked_by, the
host role's decision to leave a host alone, the summary and the fleet report; on the fixture hosts, on small facts and
on a real capture (fixtures/captures/h200-vm-acpi: an H200 in a Firecracker VM, its ACPI tables without DMAR/IVRS)."""

from __future__ import annotations

import copy
import os
import tarfile

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError, settle
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.fleet import fleet_report
from ogc_testlib import ROOT, collection_plugin

checks = collection_plugin("filter", "passthrough_host_checks")
summary = collection_plugin("filter", "ogc_summary")

CAPTURE = os.path.join(ROOT, "fixtures", "captures", "h200-vm-acpi")
HOSTS = ("seed-v100", "a100-t4", "console-twin", "consumer-rtx", "intel-pre-iommu", "shared-group")


def causes(blockers):
    return [b["cause"] for b in blockers]


@pytest.fixture(scope="module")
def h200(tmp_path_factory, facts_module):
    """Discovery through the module's own code on the unpacked real capture."""
    out = tmp_path_factory.mktemp("h200-vm-acpi")
    with tarfile.open(os.path.join(CAPTURE, "capture.tar.gz")) as tar:
        tar.extractall(out, filter="tar")
    return facts_module.discover(str(out / "sys"), str(out / "proc"))


# ---- the facts -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("names, value", [
    (None, None), ([], "none"), (["APIC", "DSDT", "FACP", "MCFG"], "none"), (["APIC", "DMAR", "FACP"], "dmar"),
    (["IVRS", "APIC"], "ivrs")])
def test_iommu_firmware_is_read_from_the_table_names(names, value):
    assert settle.iommu_firmware_from_tables(names) == value


@pytest.mark.parametrize("name, tables", [("seed-v100", "ivrs"), ("a100-t4", "ivrs"), ("console-twin", "ivrs"),
                                          ("consumer-rtx", "ivrs"), ("intel-pre-iommu", "dmar"),
                                          ("shared-group", "dmar")])
def test_the_fixture_hosts_state_their_firmware_tables(host_facts, name, tables):
    assert host_facts(name)["iommu_firmware"] == tables


def test_the_real_h200_vm_shows_no_iommu_table(h200):
    assert h200["iommu_firmware"] == "none"
    assert (h200["hypervisor"], h200["virtualization"], h200["iommu_enabled"]) == (True, None, False)
    assert [d["address"] for d in h200["devices"] if d["class_id"].startswith("03")] == ["0000:00:06.0"]


# ---- the plan --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTS)
def test_every_existing_host_plans_as_before(planner, host_facts, name):
    facts = host_facts(name)
    plan = planner.passthrough_plan(facts, {}, name)
    assert plan["blocked_by"] == [] and plan["reboot_blocked"] is False
    assert plan["reboot_required"] is bool(plan["pending"])
    # The tables add nothing to a plan they do not block: the same facts without them plan the same.
    unknown = planner.passthrough_plan(dict(facts, iommu_firmware=None), {}, name)
    assert unknown == plan


def test_the_intel_host_whose_iommu_a_kernel_argument_turns_on_still_reboots(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("intel-pre-iommu"), {}, "intel-pre-iommu")
    assert plan["reboot_required"] is True and plan["blocked_by"] == []
    assert plan["kernel_args"][0] == "intel_iommu=on"
    assert any("The planned kernel arguments enable the IOMMU" in n for n in plan["notes"])


def test_the_real_h200_vm_plans_no_reboot_and_says_what_must_happen_first(planner, h200):
    plan = planner.passthrough_plan(h200, {}, "h200-vm")
    assert plan["reboot_required"] is False and plan["reboot_blocked"] is True
    assert causes(plan["blocked_by"]) == ["vm_without_nested_virtualization", "vm_without_iommu"]
    assert "no DMAR or IVRS table" in plan["blocked_by"][1]["reason"]
    assert "virtual IOMMU" in plan["blocked_by"][1]["fix"] and "bare-metal host" in plan["blocked_by"][1]["fix"]
    assert not any("The planned kernel arguments enable the IOMMU" in n for n in plan["notes"])
    assert plan["notes"][0].startswith("Left alone: nothing is written on this host and it is not rebooted")
    # Left alone by the host role, before its firmware phase, whatever the inventory says.
    for bmc in (False, True):
        assert checks.left_alone(plan, h200, bmc=bmc) == plan["blocked_by"]
    message = checks.left_alone_message(plan["blocked_by"], plan, "h200-vm")
    assert message.startswith("h200-vm (GPU 0000:00:06.0): left alone - nothing is written on this host and it is "
                              "not rebooted")
    assert "[vm_without_iommu]" in message and "give the virtual machine a virtual IOMMU" in message


def test_amd_iommu_off_in_the_firmware_is_blocked_without_a_bmc(planner, host_facts):
    # The seed server with AMD-Vi off in its firmware: no IOMMU groups and no IVRS table (the firmware publishes it
    # only with the IOMMU on).
    facts = dict(host_facts("seed-v100", iommu=False), iommu_firmware="none")
    plan = planner.passthrough_plan(facts, {}, "seed-v100")
    assert plan["pending"] and plan["reboot_required"] is False and plan["reboot_blocked"] is True
    assert causes(plan["blocked_by"]) == ["iommu_off_in_firmware"]
    assert "AMD-Vi (IOMMU)" in plan["blocked_by"][0]["fix"] and "passthrough_host_bmc_address" in plan["blocked_by"][0]["fix"]
    # Not a host to leave alone: the preflight refuses it (bare metal: an operator's fix), before anything is written.
    assert checks.left_alone(plan, facts) == []
    errors = checks.preflight_errors(plan, facts, "seed-v100")
    assert len(errors) == 1 and "no DMAR or IVRS table" in errors[0] and "Enable AMD-Vi/IOMMU" in errors[0]
    # With a BMC that switches the IOMMU on at the same restart, the reboot settles it.
    bmc = planner.passthrough_plan(facts, {}, "seed-v100", firmware_enables=["virtualization", "iommu"])
    assert bmc["blocked_by"] == [] and bmc["reboot_required"] is True
    assert checks.preflight_errors(bmc, facts, "seed-v100", firmware_enables=["iommu"]) == []


def test_a_host_without_a_gpu_is_named_and_left_alone(planner, host_facts):
    facts = copy.deepcopy(host_facts("seed-v100", iommu=False))
    facts["devices"] = [d for d in facts["devices"] if d["vendor_id"] != "10de"]
    plan = planner.passthrough_plan(facts, {}, "spare")
    assert "kernel command line lacks iommu=pt" in plan["pending"]
    assert plan["reboot_required"] is False and causes(plan["blocked_by"]) == ["no_gpu"]
    # Whatever the inventory says: with a BMC, and with the IOMMU on.
    assert causes(checks.left_alone(plan, facts, bmc=True)) == ["no_gpu"]
    on = planner.passthrough_plan(dict(facts, iommu_enabled=True), {}, "spare")
    assert causes(on["blocked_by"]) == ["no_gpu"] and on["reboot_blocked"] is False
    # A host whose only GPU is its console has none for passthrough either.
    assert causes(planner.passthrough_plan(host_facts("a100-t4"), {"vendors": ["1a03"]}, "a")["blocked_by"]) \
        == ["no_gpu"]


def test_a_vm_with_a_virtual_iommu_and_nested_virtualization_reboots_for_intel_iommu_on(planner, host_facts):
    # QEMU's -device intel-iommu gives the guest a DMAR table; the kernel needs intel_iommu=on to use it.
    facts = dict(host_facts("intel-pre-iommu"), hypervisor=True)
    plan = planner.passthrough_plan(facts, {}, "guest")
    assert plan["blocked_by"] == [] and plan["reboot_required"] is True
    # The same guest without the virtual IOMMU: no DMAR, nothing to reboot for.
    none = planner.passthrough_plan(dict(facts, iommu_firmware="none"), {}, "guest")
    assert causes(none["blocked_by"]) == ["vm_without_iommu"] and none["reboot_required"] is False


@pytest.mark.parametrize("facts, message", [
    ({"iommu_firmware": "DMAR"}, "facts.iommu_firmware is 'DMAR', not one of dmar, ivrs, none or null"),
    ({"iommu_firmware": True}, "facts.iommu_firmware is True"),
])
def test_bad_iommu_firmware_is_refused_naming_the_host(planner, host_facts, facts, message):
    with pytest.raises(Exception) as err:
        planner.passthrough_plan(dict(host_facts("seed-v100"), **facts), {}, "seed-v100")
    assert "passthrough_plan: host seed-v100: " + message in str(err.value)


@pytest.mark.parametrize("enables", ["iommu", ["bios"], [None]])
def test_bad_firmware_enables_is_refused_naming_the_host(planner, host_facts, enables):
    with pytest.raises(Exception) as err:
        planner.passthrough_plan(host_facts("seed-v100"), {}, "seed-v100", firmware_enables=enables)
    assert "passthrough_plan: host seed-v100: firmware_enables must be a list of virtualization and iommu" \
        in str(err.value)


def test_the_rule_refuses_what_is_not_facts():
    with pytest.raises(TypeError, match="reboot_blockers: facts must be the pci_passthrough facts"):
        settle.reboot_blockers(["not", "facts"])
    with pytest.raises(PlanError):
        raise PlanError("the planner's errors stay PlanError")


# ---- the rule's properties ---------------------------------------------------------------------------------------

FACTS = st.fixed_dictionaries({
    "iommu_enabled": st.booleans(),
    "cpu_vendor": st.sampled_from(["amd", "intel", None]),
    "hypervisor": st.sampled_from([True, False, None]),
    "kernel_cmdline": st.lists(st.sampled_from(["ro", "intel_iommu=on", "iommu=off", "amd_iommu=off", "iommu=pt"]),
                               max_size=3),
}, optional={"virtualization": st.sampled_from([None, "svm", "vmx"]),
             "iommu_firmware": st.sampled_from(["dmar", "ivrs", "none", None])})


@settings(max_examples=300, deadline=None)
@given(facts=FACTS, has_gpu=st.booleans(),
       enables=st.lists(st.sampled_from(["virtualization", "iommu"]), unique=True))
def test_the_blockers_follow_the_rule(facts, has_gpu, enables):
    blockers = settle.reboot_blockers(facts, has_gpu=has_gpu, firmware_enables=enables)
    found = causes(blockers)
    assert set(found) <= set(settle.CAUSES) and found == sorted(found, key=settle.CAUSES.index)
    assert all(b["reason"] and b["fix"] for b in blockers)
    if not has_gpu:
        assert found == ["no_gpu"]
        return
    guest = facts["hypervisor"] is True
    # A virtual machine is never sent to its firmware setup, a bare-metal host never told of a hypervisor.
    assert not (guest and {"virtualization_off_in_firmware", "iommu_off_in_firmware"} & set(found))
    assert not (not guest and {"vm_without_nested_virtualization", "vm_without_iommu"} & set(found))
    # An active IOMMU is nothing to settle; CPU virtualization that is shown (or not known) neither.
    if facts["iommu_enabled"]:
        assert not set(settle.IOMMU_CAUSES) & set(found)
    if facts.get("virtualization") or "virtualization" not in facts:
        assert not {"vm_without_nested_virtualization", "virtualization_off_in_firmware"} & set(found)
    # Staged BIOS attributes settle what they switch on, on bare metal.
    if not guest and "iommu" in enables:
        assert "iommu_off_in_firmware" not in found
    if not guest and "virtualization" in enables:
        assert "virtualization_off_in_firmware" not in found
    # Firmware tables without an IOMMU block an inactive IOMMU, unless the BMC switches it on.
    if facts.get("iommu_firmware") == "none" and not facts["iommu_enabled"] and not (not guest and "iommu" in enables):
        assert set(settle.IOMMU_CAUSES) & set(found)


@settings(max_examples=200, deadline=None)
@given(facts=FACTS, tables=st.sampled_from(["dmar", "ivrs"]))
def test_unknown_tables_block_no_more_than_tables_with_an_iommu(facts, tables):
    # Old captures and stored facts (iommu_firmware null or absent) plan as before: only a table set without an IOMMU
    # table adds a blocker.
    unknown = settle.reboot_blockers(dict(facts, iommu_firmware=None))
    assert settle.reboot_blockers({k: v for k, v in facts.items() if k != "iommu_firmware"}) == unknown
    assert settle.reboot_blockers(dict(facts, iommu_firmware=tables)) == unknown


@settings(max_examples=100, deadline=None)
@given(facts=FACTS, bmc=st.booleans())
def test_the_host_role_leaves_alone_only_what_no_bmc_settles(facts, bmc):
    plan = {"blocked_by": []}
    alone = causes(checks.left_alone(plan, facts, bmc=bmc))
    assert set(alone) <= set(checks.LEFT_ALONE_CAUSES)
    # The same whether or not a BMC is configured: a VM's causes are not the firmware's.
    assert alone == causes(checks.left_alone(plan, facts, bmc=not bmc))
    assert causes(checks.left_alone({"blocked_by": [{"cause": "no_gpu"}]}, facts, bmc=bmc)) == ["no_gpu"]


# ---- the summary and the fleet report ----------------------------------------------------------------------------

def test_the_summary_and_the_report_name_the_host_left_alone(planner, host_facts, h200):
    plans = {"seed-v100": planner.passthrough_plan(host_facts("seed-v100"), {}, "seed-v100"),
             "h200-vm": planner.passthrough_plan(h200, {}, "h200-vm")}
    text = summary.ogc_summary(plans)
    assert "  h200-vm: left alone (vm_without_iommu): this host is a virtual machine" in text
    assert "  h200-vm: left alone (vm_without_nested_virtualization)" in text
    assert "h200-vm: reboot pending" not in text and "h200-vm: nothing offered" not in text
    report = fleet_report({"seed-v100": {"facts": host_facts("seed-v100"), "plan": plans["seed-v100"]},
                           "h200-vm": {"facts": h200, "plan": plans["h200-vm"]}})
    assert [h["host"] for h in report["left_alone"]] == ["h200-vm"]
    assert causes(report["left_alone"][0]["blocked_by"]) == ["vm_without_nested_virtualization", "vm_without_iommu"]
    # The seed server's reboot is pending (nothing configured yet); the VM's is not.
    assert report["totals"]["hosts_left_alone"] == 1 and [p["host"] for p in report["pending"]] == ["seed-v100"]


def test_the_verification_names_the_missing_table_after_a_reboot(planner, host_facts):
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify
    plan = planner.passthrough_plan(host_facts("intel-pre-iommu"), {}, "intel-pre-iommu")
    # Booted with the planned line, and still no IOMMU: the firmware published no DMAR table.
    after = dict(host_facts("intel-pre-iommu"), kernel_cmdline=["ro"] + plan["kernel_args"], iommu_firmware="none")
    problems = verify.verify(after, plan, "intel-pre-iommu")
    assert problems[0]["cause"] == "iommu_inactive"
    assert "(no /sys/kernel/iommu_groups) (the firmware's ACPI tables (/sys/firmware/acpi/tables) have no DMAR or IVRS " \
           "table): enable AMD-Vi/IOMMU or VT-d in the firmware setup" in problems[0]["message"]
    # Tables not read: the message as before.
    unknown = verify.verify(dict(after, iommu_firmware=None), plan, "intel-pre-iommu")
    assert "(no /sys/kernel/iommu_groups): enable AMD-Vi/IOMMU or VT-d in the firmware setup" in unknown[0]["message"]


def test_the_plan_report_says_no_reboot_can_help(planner, h200):
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.report import plan_report
    text = plan_report(planner.passthrough_plan(h200, {}, "h200-vm"), h200)
    assert "reboot required: no (no reboot can help: the host phase leaves this host as it is)" in text
    assert "  blocked by vm_without_iommu: this host is a virtual machine" in text


@pytest.mark.parametrize("capture, tables, found", [
    # Captured before the capture tool copied the ACPI table names: unknown tables, the missing vmx blocks.
    ("h200-vm-guest", None, ["vm_without_nested_virtualization"]),
    ("h200-vm-windows", None, ["vm_without_nested_virtualization"]),
    ("h200-vm-acpi", "none", ["vm_without_nested_virtualization", "vm_without_iommu"]),
])
def test_no_real_h200_vm_capture_plans_a_reboot(planner, facts_module, tmp_path, capture, tables, found):
    with tarfile.open(os.path.join(ROOT, "fixtures", "captures", capture, "capture.tar.gz")) as tar:
        tar.extractall(tmp_path, filter="tar")
    facts = facts_module.discover(str(tmp_path / "sys"), str(tmp_path / "proc"))
    plan = planner.passthrough_plan(facts, {}, capture)
    assert facts["iommu_firmware"] == tables
    assert causes(plan["blocked_by"]) == found
    assert plan["reboot_required"] is False and plan["reboot_blocked"] is True
    assert causes(checks.left_alone(plan, facts)) == found


def test_the_iommu_note_promises_nothing_it_cannot_know(planner, host_facts):
    # A VM without vmx whose tables are unknown: the IOMMU might come with intel_iommu=on, the missing vmx blocks.
    vm = dict(host_facts("intel-pre-iommu"), hypervisor=True, virtualization=None, iommu_firmware=None)
    notes = planner.passthrough_plan(vm, {}, "vm")["notes"]
    assert any("No reboot can make this host a passthrough host (see blocked_by)" in n for n in notes)
    assert not any("No kernel argument can switch it on" in n for n in notes)
    none = planner.passthrough_plan(dict(vm, iommu_firmware="none"), {}, "vm")["notes"]
    assert any("No kernel argument can switch it on here (see blocked_by)" in n for n in none)


def test_the_markdown_report_lists_the_host_left_alone(planner, host_facts, h200):
    from test_fleet_report import render_markdown  # the template as ansible.builtin.template renders it
    plans = {"seed-v100": {"facts": host_facts("seed-v100"),
                           "plan": planner.passthrough_plan(host_facts("seed-v100"), {}, "seed-v100")},
             "h200-vm": {"facts": h200, "plan": planner.passthrough_plan(h200, {}, "h200-vm")}}
    text = render_markdown(fleet_report(plans))
    section = text[text.index("## Hosts left alone (no reboot can help)"):text.index("## GPUs offered without")]
    assert "- **h200-vm** (vm_without_iommu): this host is a virtual machine" in section
    assert "seed-v100" not in section
    # Without such a host the report has no such section.
    assert "Hosts left alone" not in render_markdown(fleet_report({"seed-v100": plans["seed-v100"]}))
