# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Can a reboot settle what a host still lacks? One pure function, ``reboot_blockers(facts, ...)``.

A reboot settles what the kernel decides at boot: its command line (``intel_iommu=on``, ``vfio-pci.ids=``, a
blacklist), the drivers that bind then, and BIOS attributes staged on the BMC, which the same restart's power cycle
applies. It cannot create what the machine does not have. What the kernel shows before any change says which:

* the firmware's IOMMU tables (``/sys/firmware/acpi/tables``: ``DMAR`` describes Intel VT-d, ``IVRS`` AMD-Vi; the
  facts' ``iommu_firmware``, ``iommu_firmware_from_tables`` below). Without either no kernel argument turns an IOMMU
  on: on bare metal it is off in the firmware setup, in a virtual machine the hypervisor offers no virtual IOMMU.
  Tables that were not read (``iommu_firmware`` null: a capture or stored facts from before this fact) are unknown
  and block nothing: such facts plan as they always did;
* the CPU's ``hypervisor`` flag (the host is itself a virtual machine) and its ``svm``/``vmx`` flag: a virtual
  machine without nested virtualization cannot run Nova's guests, and nothing in the guest switches it on;
* the kernel line: on AMD the IOMMU is on when the firmware enables it (``amd_iommu=on`` is no option the kernel
  knows), so an inactive AMD-Vi that nothing on the line turns off stays inactive after a reboot;
* ``firmware_enables``: what BIOS attributes staged on the BMC switch on at the same restart (``virtualization``,
  ``iommu``; ``plugins/filter/passthrough_host_checks.py``'s ``bios_enables``).

And a host with no GPU for passthrough has nothing a reboot could serve. The planner (``planner.py``: the plan's
``blocked_by``), the host role (its preflight leaves such a host alone before anything is written) and the
verification (``verify.py``: the fix an inactive IOMMU is given) all ask this module.

Each blocker is ``{cause, reason, fix}``; the causes (``CAUSES``), in the order they are reported:

``no_gpu``
    no display device of an allowed vendor that could go to a guest (none at all, only the console, only devices
    kept on the host). Reported alone: the other checks would only say why nothing could be done for nothing.
``vm_without_nested_virtualization``
    the CPU shows ``hypervisor`` and no ``svm``/``vmx``.
``vm_without_iommu``
    a virtual machine with no IOMMU active that no reboot can give one (no DMAR/IVRS table, or nothing on the line
    that a reboot could change).
``virtualization_off_in_firmware``
    bare metal without ``svm``/``vmx``, and no staged BIOS attribute switches it on.
``iommu_off_in_firmware``
    bare metal with no IOMMU active that no kernel argument switches on (no DMAR/IVRS table; or AMD, where the
    firmware alone switches it on), and no staged BIOS attribute does.
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline

__all__ = ["CAUSES", "IOMMU_CAUSES", "IOMMU_FIRMWARE", "blocks", "iommu_firmware_from_tables", "reboot_blockers"]

CAUSES = ("no_gpu", "vm_without_nested_virtualization", "vm_without_iommu", "virtualization_off_in_firmware",
          "iommu_off_in_firmware")
# The causes about the IOMMU itself (verify.py and the host checks word their own messages around them).
IOMMU_CAUSES = ("vm_without_iommu", "iommu_off_in_firmware")
# The facts' iommu_firmware values: which ACPI table describes an IOMMU; "none": the tables were read and neither is
# there; null (None): not read.
IOMMU_FIRMWARE = ("dmar", "ivrs", "none")
# ACPI table signature -> iommu_firmware (both at once does not happen on x86; DMAR is named first).
_TABLES = (("DMAR", "dmar"), ("IVRS", "ivrs"))

VM_NESTED_FIX = ("give the virtual machine nested virtualization ({flag}) in its hypervisor, or use a bare-metal "
                 "host for gpu_hosts (remove this one from the group), then run the plan again")
VM_IOMMU_FIX = ("give the virtual machine a virtual IOMMU in its hypervisor (QEMU: -device intel-iommu or "
                "-device amd-iommu with -machine q35; libvirt: <iommu model='intel'/>), or use a bare-metal host for "
                "gpu_hosts (remove this one from the group), then run the plan again")
FIRMWARE_VIRT_FIX = ("enable SVM Mode (AMD) / VT-x (Intel) in the firmware setup, or let the host role set it through "
                     "the BMC (passthrough_host_bmc_address), then run the plan again")
FIRMWARE_IOMMU_FIX = ("enable {what} in the firmware setup, or let the host role set it through the BMC "
                      "(passthrough_host_bmc_address), then run the plan again")
NO_GPU_FIX = ("nothing to do on this host: remove it from gpu_hosts, or put a GPU in it and run the plan again "
              "(a GPU of another vendor: passthrough_policy.vendors)")


def iommu_firmware_from_tables(names):
    """``iommu_firmware`` from the names in ``/sys/firmware/acpi/tables``: ``dmar``, ``ivrs`` or ``none``; None
    when the directory was not read (``names`` None)."""
    if names is None:
        return None
    present = {str(name) for name in names}
    for table, value in _TABLES:
        if table in present:
            return value
    return "none"


def _blocker(cause, reason, fix):
    return {"cause": cause, "reason": reason, "fix": fix}


def _line_can_switch_iommu(facts, vendor):
    """Whether a reboot with the planned line could switch the IOMMU on as far as the line goes: something on the
    running line turns it off, or the vendor's IOMMU needs an argument the line lacks (Intel's intel_iommu=on). A
    line the model cannot read counts as changeable (a reboot may well change it)."""
    running = list(facts.get("kernel_cmdline") or [])
    try:
        if kernel_cmdline.check(running, [], list(kernel_cmdline.IOMMU_OFF)):
            return True
        return any(not kernel_cmdline.satisfies(running, arg) for arg in kernel_cmdline.vendor_iommu_args(vendor))
    except kernel_cmdline.CmdlineError:
        return True


def _iommu_blocker(facts, guest, firmware_enables):
    """The blocker of an inactive IOMMU, or None when a reboot can switch it on (or it is on)."""
    if facts.get("iommu_enabled"):
        return None
    tables = facts.get("iommu_firmware")
    vendor = facts.get("cpu_vendor")
    what = {"intel": "VT-d", "amd": "AMD-Vi (IOMMU)"}.get(vendor, "the IOMMU (VT-d / AMD-Vi)")
    if tables == "none":
        seen = "the firmware's ACPI tables (/sys/firmware/acpi/tables) have no DMAR or IVRS table"
    elif not _line_can_switch_iommu(facts, vendor):
        seen = ("on AMD the firmware switches the IOMMU on and nothing on the running kernel command line turns it off"
                if vendor == "amd" else "the running kernel command line already asks for it")
    else:
        return None
    if guest:
        return _blocker("vm_without_iommu",
                        f"this host is a virtual machine (the CPU's hypervisor flag) and shows no IOMMU: {seen}, so its "
                        "hypervisor offers no virtual IOMMU and no kernel argument can create one", VM_IOMMU_FIX)
    if "iommu" in firmware_enables:
        return None
    return _blocker("iommu_off_in_firmware",
                    f"the IOMMU is inactive and no kernel argument can switch it on: {seen}",
                    FIRMWARE_IOMMU_FIX.format(what=what))


def reboot_blockers(facts, has_gpu=True, firmware_enables=()):
    """What stops a reboot from making this host a passthrough host, as ``[{cause, reason, fix}]`` (module docstring);
    empty when a reboot with the planned configuration can settle everything it is meant to.

    :param facts: ``ansible_facts.pci_passthrough`` (keys it lacks are unknown and block nothing).
    :param has_gpu: whether the host has a GPU for passthrough (the planner's candidates).
    :param firmware_enables: what BIOS attributes staged on the BMC switch on at the same restart
        (``virtualization``, ``iommu``).
    """
    if not isinstance(facts, dict):
        raise TypeError(f"reboot_blockers: facts must be the pci_passthrough facts (a dict), got {type(facts).__name__}")
    firmware_enables = tuple(firmware_enables or ())
    if not has_gpu:
        return [_blocker("no_gpu", "the host has no GPU for passthrough (no display device of an allowed vendor "
                                   "besides the host's console and the devices kept on the host)", NO_GPU_FIX)]
    blockers = []
    guest = facts.get("hypervisor") is True
    flag = "svm" if facts.get("cpu_vendor") == "amd" else "vmx"
    no_virt = "virtualization" in facts and facts["virtualization"] is None
    if guest and no_virt:
        blockers.append(_blocker(
            "vm_without_nested_virtualization",
            f"this host is a virtual machine (the CPU's hypervisor flag) and its CPU shows no {flag} flag: its "
            "hypervisor gives it no nested virtualization, so it cannot run Nova's guests and no reboot changes that",
            VM_NESTED_FIX.format(flag=flag)))
    elif no_virt and "virtualization" not in firmware_enables:
        blockers.append(_blocker(
            "virtualization_off_in_firmware",
            f"the CPU shows no {flag} flag in /proc/cpuinfo: hardware virtualization is off in the firmware, and no "
            "kernel argument switches it on", FIRMWARE_VIRT_FIX))
    iommu = _iommu_blocker(facts, guest, firmware_enables)
    if iommu:
        blockers.append(iommu)
    return blockers


def blocks(plan, facts, firmware_enables=()):
    """The blockers of a stored plan's host now, for the host role: ``reboot_blockers`` with the host's staged (or
    stageable) BIOS attributes. A plan that names no ``no_gpu`` blocker (or was written before ``blocked_by``) has
    a GPU as far as this rule goes."""
    plan = plan if isinstance(plan, dict) else {}
    has_gpu = not any(isinstance(b, dict) and b.get("cause") == "no_gpu" for b in plan.get("blocked_by") or [])
    return reboot_blockers(facts, has_gpu=has_gpu, firmware_enables=firmware_enables)
