"""A real capture (fixtures/captures/h200-vm-guest): a Firecracker VM with an NVIDIA H200 passed into it, no IOMMU,
no vmx. Discovery on it gives what discovery gave on the live host; the planner plans no reboot from those facts
(blocked_by names the missing nested virtualization); the host phase leaves the host alone, and its preflight
refuses it as the virtual machine it is, before anything is written or rebooted."""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from ogc_testlib import ROOT, load_source, collection_plugin

CAPTURE = os.path.join(ROOT, "fixtures", "captures", "h200-vm-guest")
checks = collection_plugin("filter", "passthrough_host_checks")


@pytest.fixture(scope="module")
def recorded():
    """The facts discovery gave on the live host (plugins/modules/pci_passthrough_facts.py at 19834dc), as recorded."""
    with open(os.path.join(CAPTURE, "discovery.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def facts(tmp_path_factory, facts_module):
    """Discovery through the module's own code on the unpacked capture (no pci.ids, as on the host)."""
    out = tmp_path_factory.mktemp("h200-vm-guest")
    with tarfile.open(os.path.join(CAPTURE, "capture.tar.gz")) as tar:
        tar.extractall(out, filter="tar")
    return facts_module.discover(str(out / "sys"), str(out / "proc"))


# Device facts added after the recording: the capture tool of then copied no resource, reset or reset_method file.
LATER_DEVICE_FACTS = ("bars", "reset_methods", "resettable")


def test_discovery_on_the_capture_is_what_the_live_host_gave(facts, recorded):
    # The recorded file predates the hypervisor, iommu_firmware and cpu_phys_bits facts and the devices' windows and
    # resets: they are asserted on their own (unknown where the capture lacks their files; the CPU's address bits as
    # the same host's sysfs-dump.txt printed them, "address sizes : 46 bits physical"), and the rest must be equal.
    assert facts["hypervisor"] is True and facts["cpu_phys_bits"] == 46
    assert facts["iommu_firmware"] is None  # the capture tool of then copied no /sys/firmware/acpi/tables
    assert all(d[key] is None for d in facts["devices"] for key in LATER_DEVICE_FACTS)
    earlier = dict(facts, devices=[{k: v for k, v in d.items() if k not in LATER_DEVICE_FACTS}
                                   for d in facts["devices"]])
    assert {k: v for k, v in earlier.items() if k not in ("hypervisor", "iommu_firmware", "cpu_phys_bits")} == recorded
    # What the capture is about, read from the recorded facts themselves.
    assert (recorded["cpu_vendor"], recorded["cpu_model"], recorded["virtualization"]) == (
        "intel", "Intel(R) Xeon(R) Processor", None)
    assert (recorded["iommu_enabled"], recorded["iommu_units"], recorded["iommu_groups"]) == (False, [], {})
    gpu = [d for d in recorded["devices"] if d["class_id"].startswith("03")]
    assert [(d["address"], d["vendor_id"], d["product_id"], d["driver"]) for d in gpu] == [
        ("0000:00:06.0", "10de", "2335", "nvidia")]
    # The VM's init arguments after "--" are kept, split as the kernel splits the line.
    assert recorded["kernel_cmdline"][recorded["kernel_cmdline"].index("--") + 1] == "--firecracker-init"


def test_the_planner_plans_the_binding_but_no_reboot_for_the_vm(planner, facts):
    # The planner still says what the host would need (intel_iommu=on, the H200 on vfio-pci), but no reboot: the
    # CPU shows the hypervisor flag and no vmx, which no reboot changes (plugins/module_utils/passthrough/settle.py).
    # The capture has no /sys/firmware/acpi/tables: unknown tables block nothing, the missing vmx does.
    plan = planner.passthrough_plan(facts, {}, "h200-vm")
    assert plan["selected"] == [] and plan["aliases"] == []
    assert plan["vfio_devices"] == ["0000:00:06.0"] and plan["vfio_ids"] == ["10de:2335"]
    assert plan["excluded"][0]["cause"] == "iommu_inactive"
    assert plan["kernel_args"][0] == "intel_iommu=on"
    assert "IOMMU not active" in plan["pending"]
    assert plan["reboot_required"] is False and plan["reboot_blocked"] is True
    assert [b["cause"] for b in plan["blocked_by"]] == ["vm_without_nested_virtualization"]
    assert plan["notes"][0].startswith("Left alone: nothing is written on this host and it is not rebooted, because "
                                       "this host is a virtual machine")
    assert not any("The planned kernel arguments enable the IOMMU" in n for n in plan["notes"])


def test_the_preflight_refuses_the_vm_before_anything_is_written_or_rebooted(planner, facts):
    plan = planner.passthrough_plan(facts, {}, "h200-vm")
    assert checks.has_work(plan)  # the role would go on to write and reboot without the refusal
    assert checks.preflight_errors(plan, facts, "h200-vm") == [
        "h200-vm: this host is itself a virtual machine: the Intel(R) Xeon(R) Processor shows the hypervisor flag and "
        "no vmx flag in /proc/cpuinfo (its hypervisor gives it no nested virtualization), and it shows no IOMMU (no "
        "/sys/kernel/iommu_groups, no /sys/class/iommu unit). A GPU passed into a VM cannot be passed on to Nova's "
        "guests unless its hypervisor offers nested virtualization and a virtual IOMMU, so nothing is written and the "
        "host is not rebooted (a reboot with intel_iommu=on would not give it nested virtualization). Use bare-metal "
        "hosts for gpu_hosts: remove this host from the gpu_hosts group (or, where its hypervisor can, give the VM "
        "nested virtualization (vmx) and a virtual IOMMU, then run this play again)."]
    # Expecting no GPU there does not lift the refusal.
    assert len(checks.preflight_errors(plan, facts, "h200-vm", expect_no_gpus=True)) == 1


def test_without_the_hypervisor_fact_the_same_host_got_the_firmware_advice(planner, recorded):
    # The recorded facts (no hypervisor key, as a plan stored before the fact has them) are read as bare metal:
    # the message the real host got, unchanged for bare-metal hosts.
    plan = planner.passthrough_plan(recorded, {}, "h200-vm")
    assert checks.preflight_errors(plan, recorded, "h200-vm") == [
        "h200-vm: the Intel(R) Xeon(R) Processor shows no vmx flag in /proc/cpuinfo: hardware virtualization is off. "
        "Enable SVM Mode (AMD) / VT-x (Intel) in the firmware setup (or set it through the BMC with "
        "passthrough_host_bmc_address), then run this play again."]
