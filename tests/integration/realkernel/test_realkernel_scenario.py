"""The host configuration proven on a real Linux kernel (Debian's, under qemu with a vIOMMU, and without one).

For the Intel vIOMMU: boot the emulated GPU host with its IOMMU off, discover and plan
from the captured sysfs, configure a sandbox host from the plan, boot with exactly the kernel
command line written to the sandbox's GRUB file (plus the modprobe configuration written next to
it), check inside the guest that the IOMMU is on and that exactly the planned devices are on
vfio-pci, then plan again from the real kernel's tree: it must be the plan the host was configured
with. A command line the kernel rejects or ignores fails with the kernel's own words. Without a vIOMMU (Intel and AMD)
the same host gets no reboot and is left alone: no kernel argument creates an IOMMU.

The AMD vIOMMU on the same emulated host is proven on the real Debian server (molecule/host_server): its GRUB,
initramfs and systemd boot the line the host phase wrote, over SSH. The harness still runs an AMD chain
(scenario.run_flow(..., "amd", ...)): add it to VENDORS to boot it here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from realkernel import klog, scenario, vm

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

GPU_A, GPU_A_AUDIO, GPU_B, GPU_SHARED, SHARED_NIC = (
    "0000:01:00.0", "0000:01:00.1", "0000:02:00.0", "0000:05:01.0", "0000:05:02.0")
CONSOLE = "0000:00:06.0"
UNITS = {"intel": ["dmar0"], "amd": ["ivhd0"]}
FIRMWARE_TABLE = {"intel": "dmar", "amd": "ivrs"}
VENDORS = ["intel"]


def _flow(runs, vendor) -> scenario.Flow:
    flow = runs[vendor]
    if isinstance(flow, Exception):
        raise flow
    return flow


def _changed_on_the_host(role_run: str) -> list[str]:
    """The tasks the run's "WHAT CHANGED" lists for the host itself (not those marked "(on localhost)": the plan role's
    plan file on the control host)."""
    changed = role_run.split("WHAT CHANGED", 1)[-1]
    return [line.strip() for line in changed.splitlines()
            if line.strip().startswith("- ") and not line.strip().endswith("(on localhost)")]


def _drivers(step) -> dict:
    return {d["address"]: d["driver"] for d in step.facts["devices"]}


@pytest.mark.parametrize("vendor", VENDORS)
def test_first_boot_without_iommu_plans_provisionally(realkernel_runs, vendor):
    first = _flow(realkernel_runs, vendor).steps[0]
    klog.assert_cmdline_accepted(first.boot.dmesg, first.boot.cmdline)
    assert first.boot.check_result == "pass", "\n".join(first.boot.failed_checks)
    assert first.facts["iommu_enabled"] is False
    assert first.facts["cpu_vendor"] == vendor
    # A virtual machine (the CPU's hypervisor flag) whose firmware offers an IOMMU (the vIOMMU's ACPI table): the
    # "off" on the line is what a reboot can change, so nothing blocks it.
    assert first.facts["hypervisor"] is True and first.facts["iommu_firmware"] == FIRMWARE_TABLE[vendor]
    assert first.plan["blocked_by"] == [] and first.plan["reboot_blocked"] is False
    # Without groups nothing is offered to Nova; every GPU (and its audio function) is bound
    # provisionally so that one reboot is enough when the groups turn out clean.
    assert first.plan["selected"] == []
    assert first.plan["vfio_devices"] == [GPU_A, GPU_A_AUDIO, GPU_B, GPU_SHARED]
    # Before any configuration the host drivers own the cards, as on a fresh host.
    assert _drivers(first)[GPU_A] == "bochs-drm" and _drivers(first)[GPU_A_AUDIO] == "snd_hda_intel"
    assert _drivers(first)[CONSOLE] == "cirrus"
    off = {"intel": "intel_iommu=off", "amd": "amd_iommu=off"}[vendor]
    assert off in first.plan["kernel_args_absent"] and first.plan["reboot_required"]


@pytest.mark.parametrize("vendor", VENDORS)
def test_each_reboot_runs_exactly_the_configured_line(realkernel_runs, vendor):
    flow = _flow(realkernel_runs, vendor)
    assert len(flow.steps) >= 2, f"the {vendor} scenario never rebooted: {flow.steps[0].plan['pending']}"
    for applied, step in zip(flow.steps, flow.steps[1:]):
        # The kernel accepted every argument (else: its own message).
        klog.assert_cmdline_accepted(step.boot.dmesg, step.boot.cmdline)
        # The guest ran the GRUB file's line, unchanged (the harness only appends its console).
        assert step.facts["kernel_cmdline"] == step.cmdline + vm.HARNESS_ARGS
        assert not any(arg in step.cmdline for arg in applied.plan["kernel_args_absent"])
        # Checked inside the guest: IOMMU on, the planned devices on vfio-pci, nothing else.
        assert step.boot.check_result == "pass", (
            f"{step.name} of the {vendor} scenario, booted with `{step.boot.cmdline}`:\n"
            + "\n".join(step.boot.failed_checks))
        expected_checks = len(scenario.expectations(applied.plan, applied.facts))
        assert len(step.boot.checks) == expected_checks
        # And seen again from the captured tree.
        assert step.facts["iommu_enabled"] is True
        assert step.facts["iommu_units"] == UNITS[vendor]
        drivers = _drivers(step)
        assert sorted(a for a, drv in drivers.items() if drv == "vfio-pci") == applied.plan["vfio_devices"]


@pytest.mark.parametrize("vendor", VENDORS)
def test_replan_on_the_real_kernel_matches_the_configured_plan(realkernel_runs, vendor):
    flow = _flow(realkernel_runs, vendor)
    # Round 1 applied the provisional plan. The real groups put the virtio GPU next to a NIC (behind
    # a conventional PCI bridge), so the second plan releases it: one more round, then nothing moves.
    assert [step.name for step in flow.steps] == ["boot1", "boot2", "boot3"], [s.plan["pending"] for s in flow.steps]
    second, final = flow.steps[1], flow.steps[2]
    # The first round bound the virtio GPU provisionally; the real groups show it shares one with the
    # e1000, so the plan now leaves it to the host and says that its vfio-pci binding must go.
    assert second.plan["pending"] == [
        "kernel command line lacks vfio-pci.ids=1234:1111,8086:293e "
        "(it has vfio-pci.ids=1234:1111,1af4:1050,8086:293e)",
        f"{GPU_SHARED} is on vfio-pci but the plan leaves it to the host "
        "(an earlier binding, e.g. before its IOMMU group was known)",
    ]
    assert _drivers(second)[GPU_SHARED] == "vfio-pci"

    assert final.plan["pending"] == [] and final.plan["reboot_required"] is False
    assert scenario.comparable(final.plan) == scenario.comparable(second.plan)
    assert [s["address"] for s in final.plan["selected"]] == [GPU_A, GPU_B]
    assert final.plan["vfio_devices"] == [GPU_A, GPU_A_AUDIO, GPU_B]
    assert final.plan["vfio_ids"] == ["1234:1111", "8086:293e"]
    assert final.plan["host_devices"] == [CONSOLE, GPU_SHARED]
    verdicts = {g["verdict"]: [] for g in final.plan["groups"]}
    for group in final.plan["groups"]:
        verdicts[group["verdict"]].append(group["devices"])
    assert verdicts["passed"] == [[GPU_A, GPU_A_AUDIO], [GPU_B]]
    assert len(verdicts["ineligible"]) == 1 and {GPU_SHARED, SHARED_NIC} <= set(verdicts["ineligible"][0])
    drivers = _drivers(final)
    assert drivers[GPU_SHARED] == "virtio-pci" and drivers[SHARED_NIC] == "e1000" and drivers[CONSOLE] == "cirrus"


@pytest.mark.parametrize("vendor", VENDORS)
def test_host_role_on_the_real_kernels_tree_changes_nothing_and_verifies(realkernel_runs, vendor):
    flow = _flow(realkernel_runs, vendor)
    recap = [line for line in flow.final_role_run.splitlines() if line.startswith(f"realkernel-{vendor} ")]
    # The first run after the settling reboot changes one thing on the host: it forgets that reboot in the state
    # file. (The plan role before it writes the plan of the new boot on the control host: "(on localhost)".)
    assert recap and re.search(r"\bfailed=0\b", recap[-1]), flow.final_role_run[-3000:]
    assert _changed_on_the_host(flow.final_role_run) == [
        "- open_gpu_cloud.toolkit.passthrough_host : Forget the reboot that settled the plan"], flow.final_role_run[-3000:]
    words = " ".join(flow.final_role_run.split())  # the YAML callback wraps long messages
    assert f"realkernel-{vendor}: ready; 2 device(s) for Nova ({GPU_A}, {GPU_B}), 3 on vfio-pci." in words


@pytest.mark.parametrize("vendor", ["intel", "amd"])
def test_without_a_viommu_no_reboot_is_planned_and_the_host_role_leaves_the_host_alone(realkernel_runs, vendor):
    """The same emulated GPU host with no vIOMMU: the real kernel shows no DMAR/IVRS table and no IOMMU. No kernel
    argument can give it one, so the plan asks for no reboot and says what must happen first, and the host role
    (after the plan role, as in site.yml) writes nothing there, runs no update-grub and does not reboot."""
    run = realkernel_runs[f"no-viommu-{vendor}"]
    if isinstance(run, Exception):
        raise run
    step = run.step
    klog.assert_cmdline_accepted(step.boot.dmesg, step.boot.cmdline)
    assert step.boot.check_result == "pass", "\n".join(step.boot.failed_checks)
    facts, plan = step.facts, step.plan
    assert facts["iommu_enabled"] is False and facts["iommu_units"] == []
    assert facts["hypervisor"] is True and facts["iommu_firmware"] == "none" and facts["cpu_vendor"] == vendor
    assert [b["cause"] for b in plan["blocked_by"]] == ["vm_without_iommu"], plan["blocked_by"]
    assert plan["reboot_required"] is False and plan["reboot_blocked"] is True and plan["selected"] == []
    assert "give the virtual machine a virtual IOMMU" in plan["blocked_by"][0]["fix"]
    assert run.files_after == run.files_before, sorted(set(run.files_after) ^ set(run.files_before))
    assert run.boot_config_calls == [] and run.reboots == []
    assert _changed_on_the_host(run.role_run) == [], run.role_run[-3000:]
    words = " ".join(run.role_run.split())  # the YAML callback wraps long messages
    assert f"realkernel-{vendor}-no-viommu (GPU " in words and \
        "left alone - nothing is written on this host and it is not rebooted" in words, words[-3000:]
    assert "[vm_without_iommu] This host is a virtual machine" in words and "no DMAR or IVRS table" in words


def test_rejected_kernel_arguments_fail_with_the_kernels_words(realkernel_runs):
    boot = realkernel_runs["bad"]
    if isinstance(boot, Exception):
        raise boot
    with pytest.raises(AssertionError) as failure:
        klog.assert_cmdline_accepted(boot.dmesg, boot.cmdline)
    message = str(failure.value)
    assert "AMD-Vi: Unknown option - 'on'" in message                  # not an option of Linux 6.1
    assert "DMAR: Unknown option - '1'" in message                      # intel_iommu= takes on|off|...
    assert 'Unknown kernel command line parameters "iommu_pt' in message  # not a parameter at all
    assert "vfio_pci: unknown parameter 'idz' ignored" in message       # a typo in the module option
    # rd.driver.pre= is for the initramfs: never reported as a rejection.
    assert not [line for line in klog.cmdline_complaints(boot.dmesg) if "rd.driver.pre" in line]
    # The typo left the cards on their host drivers: the failure above is what explains it.
    assert "vfio_pci: add [1234:1111" not in boot.dmesg


def test_a_guest_that_does_not_finish_is_killed_at_the_timeout(realkernel_guest, tmp_path):
    built, _ = realkernel_guest
    with pytest.raises(vm.BootError, match=r"intel guest did not power off within 2 s \(qemu killed\); console tail:"):
        vm.boot(built, "intel", ["quiet"], tmp_path / "hung", timeout=2)
    qemu_pids = [p.name for p in Path("/proc").iterdir()
                 if p.name.isdigit() and "qemu-system" in _cmdline(p) and str(tmp_path / "hung") in _cmdline(p)]
    assert qemu_pids == [], "qemu still runs after the timeout"


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
