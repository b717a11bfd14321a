# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Group-safe GPU passthrough planning: which GPUs Nova gets, and what the host must do for that.

``passthrough_plan`` is a pure function of the facts from ``pci_passthrough_facts`` and an optional operator
policy. Its rules come from how the kernel and Nova behave:

* A VM can use a device only if every endpoint in its IOMMU group is bound to vfio-pci (or has no
  driver); PCI bridges (class 0604/0609) in a group need nothing. So a GPU whose group also holds a
  NIC, a disk controller or the host's console cannot be passed safely, and the ACS override is not
  an option here.
* Devices in one group cannot go to different VMs, so Nova is offered one GPU per group (the lowest
  address); the group's other GPUs are still bound to vfio-pci so that the group stays viable.
* The other functions of a card (HD audio, USB, UCSI) share its slot and group and go with it.
* ``vfio-pci.ids=`` claims every device with those IDs. When a device with the same IDs must stay on
  the host (the console GPU, an ineligible twin), those IDs are not used and the passable devices
  are bound by address instead.
* Nova classifies a device with SR-IOV capability as ``type-PF``, others as ``type-PCI``; an alias
  with the wrong type matches nothing.
* ``amd_iommu=on`` is not an option the kernel knows (it logs "AMD-Vi: Unknown option - 'on'"): the
  AMD IOMMU is on when the firmware enables it. It is planned only when policy asks for it.
* A reboot is planned only when it can settle every pending item (``settle.py``, ``reboot_blockers``): not on a host
  with no GPU for passthrough, not where no kernel argument can switch the IOMMU on (no DMAR/IVRS firmware table, a
  virtual machine without a virtual IOMMU, AMD-Vi off in the firmware) or CPU virtualization is missing, unless BIOS
  attributes staged on the BMC (``firmware_enables``) switch it on at the same restart. Such a plan names the causes
  (``blocked_by``) and asks for no reboot; the host role writes nothing there.
* A GPU's 64-bit memory windows (BARs) must fit the guest's 64-bit PCI aperture and address width
  (``the collection's plugins/module_utils/pci/bars.py``, ``guest_phys_bits_needed``); a GPU the kernel has no reset for keeps its state
  from one guest to the next. The plan records both for each GPU offered to Nova and says when either needs the
  operator (a note); neither keeps a GPU from Nova.
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars as pci_bars
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import rules, settle
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.policy import check_policy as _check_policy
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.rules import (
    DRIVER_MODULES, EARLY_MODULES, FUNCTION_DRIVERS, GPU_DRIVERS, NVIDIA, NVIDIA_BLACKLIST,
    NVIDIA_HOST_DRIVER_BLACKLIST, UNSAFE_INTERRUPTS, VENDOR_NAMES, class_name, model_alias, model_name,
    plan_error as _err)

__all__ = ["EXCLUDED_CAUSES", "passthrough_plan"]


def _check_facts(facts, host):
    if not isinstance(facts, dict):
        raise _err(host, f"expected the pci_passthrough facts (a dict), got {type(facts).__name__}; "
                         "run pci_passthrough_facts first and pass ansible_facts.pci_passthrough")
    missing = [k for k in ("devices", "iommu_enabled") if k not in facts]
    if missing:
        raise _err(host, f"the facts lack {', '.join(missing)}: pass ansible_facts.pci_passthrough "
                         "from the pci_passthrough_facts module")
    if not isinstance(facts["devices"], list):
        raise _err(host, "facts.devices must be a list of devices")
    for dev in facts["devices"]:
        if not isinstance(dev, dict) or not {"address", "vendor_id", "product_id", "class_id"} <= set(dev):
            raise _err(host, f"malformed device entry {dev!r}: each needs address, vendor_id, product_id, class_id")
    if facts.get("iommu_firmware") not in settle.IOMMU_FIRMWARE + (None,):
        raise _err(host, f"facts.iommu_firmware is {facts['iommu_firmware']!r}, not one of "
                         f"{', '.join(settle.IOMMU_FIRMWARE)} or null: pass ansible_facts.pci_passthrough from the "
                         "pci_passthrough_facts module")


FIRMWARE_ENABLES = ("virtualization", "iommu")


def _check_firmware_enables(firmware_enables, host):
    if firmware_enables is None:
        return ()
    if not isinstance(firmware_enables, (list, tuple)) or not all(e in FIRMWARE_ENABLES for e in firmware_enables):
        raise _err(host, f"firmware_enables must be a list of {' and '.join(FIRMWARE_ENABLES)} (what BIOS attributes "
                         f"staged on the BMC switch on at the reboot), got {firmware_enables!r}")
    return tuple(firmware_enables)


def _describe(dev) -> str:
    return f"{dev['address']} ({class_name(dev['class_id'])}, {dev['vendor_id']}:{dev['product_id']})"


def _join(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _model_id(dev) -> str:
    return f"{dev['vendor_id']}:{dev['product_id']}"


# The machine-readable causes of plan["excluded"][].cause (docs/design.md lists them); the reason
# beside each is the same decision in plain words.
EXCLUDED_CAUSES = (
    "not_a_gpu_vendor",               # a display device of a vendor not in policy.vendors (BMC console)
    "boot_vga",                       # the host's boot console
    "keep_on_host",                   # passthrough_policy.keep_on_host names the device itself
    "iommu_inactive",                 # no IOMMU groups: isolation cannot be checked yet
    "no_iommu_group",                 # the IOMMU is on but the device has no group
    "keep_on_host_group",             # its group holds a device passthrough_policy.keep_on_host keeps
    "shared_group_with_host_device",  # its group holds another endpoint the host uses
    "shares_group_with_selected",     # another GPU of its group goes to Nova; bound to vfio-pci too
    "policy_exclude",                 # passthrough_policy.exclude
)


def _exclusion(cause, reason, related=None):
    entry = {"cause": cause, "reason": reason}
    if related:
        entry["related"] = sorted(related)
    return entry


def _classify(devices, pol):
    """Settle the display devices that stay on the host before any group is looked at.

    :returns: ``(stays, candidates)``: ``{address: exclusion}`` of display devices that are not GPUs
        of an allowed vendor, the boot VGA device and those ``keep_on_host`` names; and the GPUs left
        to plan, in address order.
    """
    stays = {}
    for dev in devices:
        if not rules.is_display(dev):
            continue
        if dev["vendor_id"] not in pol["vendors"]:
            vendor = dev.get("vendor_name") or VENDOR_NAMES.get(dev["vendor_id"], dev["vendor_id"])
            stays[dev["address"]] = _exclusion(
                "not_a_gpu_vendor",
                f"{class_name(dev['class_id'])} from vendor {vendor} is not a GPU for passthrough (a BMC or onboard "
                f"console); allowed GPU vendors: {', '.join(pol['vendors'])}")
        elif dev.get("boot_vga"):
            stays[dev["address"]] = _exclusion("boot_vga", "boot VGA device: the host's console stays on the host")
        elif dev["address"] in pol["keep_on_host"]:
            stays[dev["address"]] = _exclusion("keep_on_host", "kept on the host by passthrough_policy.keep_on_host")
    candidates = [d for d in devices if rules.is_display(d) and d["vendor_id"] in pol["vendors"]
                  and d["address"] not in stays]
    return stays, candidates


def _plan_without_iommu(candidates, devices, pol, blocked=False):
    """With the IOMMU off nothing can be offered; the GPUs are bound provisionally.

    The GPUs (and their other functions) go to vfio-pci with the same reboot that turns the IOMMU on,
    so one reboot is enough when the groups turn out clean; binding a GPU the host does not use takes
    nothing from the host. ``blocked``: ``"iommu"`` when no reboot can switch the IOMMU on, ``"other"`` when something
    else keeps any reboot from helping (``settle.py``), so the note does not promise it. Returns ``(excluded, vfio, notes)``.
    """
    notes = ["The IOMMU is not active (the kernel shows no IOMMU groups), so whether a GPU shares its group "
             "with other devices cannot be checked: nothing is offered to Nova yet. "
             + ({"iommu": "No kernel argument can switch it on here (see blocked_by): the binding and kernel arguments "
                          "below are what the host needs once it has an IOMMU, and are not applied.",
                 "other": "No reboot can make this host a passthrough host (see blocked_by): the binding and kernel "
                          "arguments below are what it would need, and are not applied."}.get(blocked) or
                "The planned kernel arguments enable the IOMMU; after the reboot the plan is made again from the new "
                "facts.")]
    excluded = {dev["address"]: _exclusion("iommu_inactive",
                                           "IOMMU not active: group isolation cannot be checked until the host "
                                           "reboots with the planned kernel arguments")
                for dev in candidates}
    vfio = set()
    for dev in candidates:
        if dev["address"] in pol["exclude"]:
            continue
        for other in devices:
            if rules.slot(other["address"]) == rules.slot(dev["address"]) and not rules.is_bridge(other) \
                    and other["address"] not in pol["keep_on_host"]:
                vfio.add(other["address"])
    return excluded, vfio, notes


def _group_blockers(members, gpus, stays, pol):
    """The endpoints of a GPU group that stop it from being passed: ``[(address, description)]``.

    Bridges need nothing; the GPUs' own cards (every function of their slots) go with them; anything
    else (a NIC, a disk controller, a device the host keeps) would be taken from the host.
    """
    gpu_slots = {rules.slot(g["address"]) for g in gpus}
    blockers = []
    for member in members:
        if rules.is_bridge(member):
            continue
        address = member["address"]
        if address in stays:
            blockers.append((address, f"{_describe(member)}, which stays on the host ({stays[address]['reason']})"))
        elif address in pol["keep_on_host"]:
            blockers.append((address, f"{_describe(member)}, which passthrough_policy.keep_on_host keeps on the host"))
        elif rules.slot(address) not in gpu_slots:
            blockers.append((address, _describe(member)))
    return blockers


def _selected_entry(chosen, group, pol):
    model_id = _model_id(chosen)
    totalvfs = chosen.get("sriov_totalvfs")
    return {
        "address": chosen["address"],
        "vendor_id": chosen["vendor_id"],
        "product_id": chosen["product_id"],
        "device_type": "type-PF" if totalvfs and int(totalvfs) > 0 else "type-PCI",
        "alias": model_alias(model_id, pol["alias_names"], chosen.get("device_name")),
        "iommu_group": group,
        "numa_node": chosen.get("numa_node"),
        "model": model_name(chosen) or model_id,
        # Its memory windows (bytes) and the guest address bits they need; null from facts without them.
        **pci_bars.window_facts(chosen.get("bars")),
        "reset_methods": chosen.get("reset_methods"),
        "resettable": chosen.get("resettable"),
    }


def _device_notes(selected):
    """What the operator must know of the GPUs offered to Nova: those whose windows and resets the facts lack, those
    the kernel cannot reset alone (``resettable`` false), those whose windows a guest maps only with a wider address
    space than QEMU's and OVMF's defaults. Returns ``({guest_phys_bits_needed, ovmf_phys_bits_needed}, notes)``,
    each the most any one of them needs (None when no GPU is offered, none has its windows in the facts, or, for
    OVMF, none needs more than its defaults)."""
    notes = []
    unknown = [s["address"] for s in selected if s["guest_phys_bits_needed"] is None]
    if unknown:
        notes.append(f"The facts lack the memory windows and resets of {_join(unknown)} (no resource file: a capture "
                     "taken before discovery read them), so guest_phys_bits_needed leaves them out: capture the host "
                     "again (playbooks/capture.yml) or plan on the host itself")
    no_reset = [s["address"] for s in selected if s["resettable"] is False]
    if no_reset:
        notes.append(f"The kernel has no usable reset for {_join(no_reset)} alone (no reset_method or reset in "
                     "sysfs: no FLR, no power-state reset, not alone on its bus). Between guests vfio-pci can then "
                     "only reset the whole bus, when every device on it is bound to vfio-pci and no guest holds any; "
                     "otherwise a guest finds the state the previous one left, and a hung GPU stays hung until the "
                     "host reboots. Where that matters, keep such GPUs out of Nova (passthrough_policy.exclude)")
    for sel in selected:
        if sel["ovmf_phys_bits_needed"] is None:
            continue
        over = []
        if sel["mmio64_bytes"] > pci_bars.OVMF_DEFAULT_MMIO64_BYTES:
            over.append(f"more than the {pci_bars.size_text(pci_bars.OVMF_DEFAULT_MMIO64_BYTES)} 64-bit aperture "
                        "OVMF gives by default")
        if sel["guest_phys_bits_needed"] > pci_bars.QEMU_DEFAULT_PHYS_BITS:
            over.append(f"more than QEMU's default {pci_bars.QEMU_DEFAULT_PHYS_BITS} address bits map")
        notes.append(f"{sel['address']} ({sel['model']}) has {pci_bars.size_text(sel['mmio64_bytes'])} of 64-bit "
                     f"memory windows (largest {pci_bars.size_text(sel['bar64_largest_bytes'])}), "
                     f"{' and '.join(over)}: its guests need at least {sel['guest_phys_bits_needed']} physical "
                     f"address bits, {sel['ovmf_phys_bits_needed']} under UEFI (OVMF); give its flavors "
                     f"hw:maxphysaddr_mode=emulate and hw:maxphysaddr_bits={sel['ovmf_phys_bits_needed']} (or its "
                     "images hw_maxphysaddr_mode and hw_maxphysaddr_bits), which need Nova's libvirt driver with "
                     "libvirt 8.7.0 or newer (the collection's plugins/module_utils/pci/bars.py says why); more bits for more RAM or GPUs per "
                     "guest")
    return {key: max((s[key] for s in selected if s[key] is not None), default=None)
            for key in ("guest_phys_bits_needed", "ovmf_phys_bits_needed")}, notes


def _select_per_group(candidates, groups, stays, pol):
    """One GPU per clean IOMMU group goes to Nova (the lowest address not excluded by policy).

    A group that also holds an endpoint the host uses is ineligible (no ACS override); the other GPUs of
    a passed group are bound to vfio-pci with it so the group stays viable. Returns
    ``(selected, excluded, vfio, group_report)``.
    """
    selected, excluded, vfio, report = [], {}, set(), []
    by_group: dict[str, list[dict]] = {}
    for dev in candidates:
        group = dev.get("iommu_group")
        if group is None:
            excluded[dev["address"]] = _exclusion(
                "no_iommu_group", "has no IOMMU group although the IOMMU is active; the device cannot be isolated "
                                  "(check the firmware's IOMMU/ACS settings)")
            continue
        by_group.setdefault(str(group), []).append(dev)
    for group, gpus in sorted(by_group.items(), key=lambda kv: kv[1][0]["address"]):
        members = groups.get(group, [])
        addresses = [m["address"] for m in members]
        blockers = _group_blockers(members, gpus, stays, pol)
        if blockers:
            related = [address for address, _reason in blockers]
            cause = ("keep_on_host_group" if any(a in pol["keep_on_host"] for a in related)
                     else "shared_group_with_host_device")
            reason = (f"IOMMU group {group} also holds {_join(text for _address, text in blockers)}: passing the GPU through "
                      f"would take {'it' if len(blockers) == 1 else 'them'} from the host (no ACS override); move the "
                      f"card to a slot with its own group")
            for gpu in gpus:
                excluded[gpu["address"]] = _exclusion(cause, reason, related)
            report.append({"group": group, "devices": addresses, "verdict": "ineligible", "reason": reason})
            continue
        offered = [g for g in gpus if g["address"] not in pol["exclude"]]
        chosen = offered[0] if offered else None
        for gpu in gpus:
            if gpu is chosen:
                continue
            if gpu["address"] in pol["exclude"]:
                excluded[gpu["address"]] = _exclusion("policy_exclude", "excluded by passthrough_policy.exclude")
            else:
                excluded[gpu["address"]] = _exclusion(
                    "shares_group_with_selected",
                    f"shares IOMMU group {group} with {chosen['address']}, which goes to Nova (one GPU per group); "
                    "bound to vfio-pci so the group stays viable", [chosen["address"]])
        if chosen is None:
            report.append({"group": group, "devices": addresses, "verdict": "excluded",
                           "reason": "every GPU in the group is excluded by policy"})
            continue
        vfio.update(m["address"] for m in members if not rules.is_bridge(m))
        selected.append(_selected_entry(chosen, group, pol))
        report.append({"group": group, "devices": addresses, "verdict": "passed",
                       "reason": f"{chosen['address']} goes to Nova"})
    return selected, excluded, vfio, report


def _aliases(selected, host):
    """One Nova alias per model; two models must not share a name, nor one model two device types."""
    aliases: dict[str, dict] = {}
    for sel in selected:
        entry = {"name": sel["alias"], "vendor_id": sel["vendor_id"], "product_id": sel["product_id"],
                 "device_type": sel["device_type"]}
        other = aliases.get(sel["alias"])
        if other and (other["vendor_id"], other["product_id"]) != (sel["vendor_id"], sel["product_id"]):
            raise _err(host, f"alias name {sel['alias']!r} would cover two models ({other['vendor_id']}:"
                             f"{other['product_id']} and {sel['vendor_id']}:{sel['product_id']}); give them different "
                             "names in passthrough_policy.alias_names")
        if other and other["device_type"] != sel["device_type"]:
            raise _err(host, f"model {sel['vendor_id']}:{sel['product_id']} shows as both type-PF and type-PCI on this "
                             "host; Nova needs one device type per alias: check sriov_totalvfs on these cards")
        aliases[sel["alias"]] = entry
    return sorted(aliases.values(), key=lambda e: e["name"])


def _vfio_binding(devices, vfio):
    """How the devices get to vfio-pci: ``vfio-pci.ids`` only for IDs no device staying on the host
    shares, the others by address. Returns ``(vfio_devices, vfio_ids, bind_by_address, notes)``."""
    by_addr = {d["address"]: d for d in devices}
    vfio_devices = sorted(vfio)
    ids_needed = sorted({_model_id(by_addr[a]) for a in vfio_devices})
    staying_ids = {_model_id(d) for d in devices if d["address"] not in vfio}
    vfio_ids = [i for i in ids_needed if i not in staying_ids]
    bind_by_address = [a for a in vfio_devices if _model_id(by_addr[a]) in staying_ids]
    notes = []
    for model in sorted(set(ids_needed) & staying_ids):
        keepers = [d["address"] for d in devices if d["address"] not in vfio and _model_id(d) == model]
        notes.append(f"{model} is not put in vfio-pci.ids because {_join(keepers)} with the same IDs stays on the "
                     f"host; those passed are bound by address")
    return vfio_devices, vfio_ids, bind_by_address, notes


def _softdeps(vfio_devices, by_addr):
    """Host drivers (module names) that must load after vfio-pci so they do not claim a passed device."""
    softdeps = []
    for a in vfio_devices:
        dev = by_addr[a]
        if rules.is_display(dev):
            softdeps.extend(GPU_DRIVERS.get(dev["vendor_id"], ()))
        elif dev["class_id"][:4] in FUNCTION_DRIVERS:
            softdeps.append(FUNCTION_DRIVERS[dev["class_id"][:4]])
        if dev.get("driver") and dev["driver"] != "vfio-pci":
            # softdep takes module names: the driver's module link in sysfs says which; built-in
            # drivers have none (nothing to order then), older facts fall back to a name table.
            if "driver_module" in dev:
                if dev["driver_module"]:
                    softdeps.append(dev["driver_module"])
            else:
                softdeps.append(DRIVER_MODULES.get(dev["driver"], dev["driver"].replace("-", "_")))
        # On vfio-pci already (after the reboot that settled the plan), its driver link no longer names its host
        # driver: the modules matching its modalias do, so the softdep that keeps that driver off it stays.
        softdeps.extend(dev.get("host_modules") or ())
    return sorted(set(softdeps))


def _kernel_args(cpu, iommu, pol, vfio_devices, vfio_ids, blacklist, nvidia_on_host):
    """The kernel arguments the plan needs, and those that must not be there (from every GRUB variable).

    Absent: whatever turns the IOMMU off, whatever the CPU vendor; the unsafe-interrupts argument unless
    the policy allows it; a ``vfio-pci.ids`` left from an earlier plan when this one binds nothing by ID
    (it would claim devices this plan leaves to the host); a blacklist of the NVIDIA drivers when an
    NVIDIA display device stays on the host (it would take that device away). Returns
    ``(kernel_args, kernel_args_absent, notes)``.
    """
    args = kernel_cmdline.vendor_iommu_args(cpu, pol["amd_iommu_on"])
    absent, notes = list(kernel_cmdline.IOMMU_OFF), []
    if cpu not in ("intel", "amd"):
        notes.append("CPU vendor unknown: no vendor IOMMU argument is planned")
    if vfio_devices or not iommu:
        args.append("iommu=pt")
    if vfio_ids:
        args.append("vfio-pci.ids=" + ",".join(vfio_ids))
    if vfio_devices:
        args.append("rd.driver.pre=vfio-pci")
    if blacklist:
        args.append("modprobe.blacklist=" + ",".join(blacklist))
    if pol["allow_unsafe_interrupts"]:
        args.append(UNSAFE_INTERRUPTS)
    else:
        absent.append(UNSAFE_INTERRUPTS)
    if not vfio_ids:
        absent.append("vfio-pci.ids")
    if not blacklist and nvidia_on_host:
        absent.extend(NVIDIA_HOST_DRIVER_BLACKLIST)
    return args, absent, notes


def _pending(facts, kernel_args, kernel_absent, vfio_devices, host):
    """What the running host lacks against the plan: the reboot (or binding) still to come."""
    running = list(facts.get("kernel_cmdline") or [])
    try:
        pending = [f"kernel command line {problem}"
                   for problem in kernel_cmdline.check(running, kernel_args, kernel_absent)]
    except kernel_cmdline.CmdlineError as exc:
        raise _err(host, f"the running kernel command line (facts kernel_cmdline) cannot be read: {exc}") from None
    if not facts.get("iommu_enabled"):
        pending.append("IOMMU not active")
    by_addr = {d["address"]: d for d in facts["devices"]}
    for a in vfio_devices:
        driver = by_addr[a].get("driver")
        if driver != "vfio-pci":
            pending.append(f"{a} is on {driver or 'no driver'}, not vfio-pci")
    for dev in sorted(facts["devices"], key=lambda d: d["address"]):
        if dev.get("driver") == "vfio-pci" and dev["address"] not in vfio_devices:
            pending.append(f"{dev['address']} is on vfio-pci but the plan leaves it to the host "
                           "(an earlier binding, e.g. before its IOMMU group was known)")
    return pending


def _blocked_notes(blocked_by):
    """The plan's first notes when no reboot can help: what stops it, and what must happen first."""
    return [f"Left alone: nothing is written on this host and it is not rebooted, because {b['reason']}. First, "
            f"{b['fix']}." for b in blocked_by]


def passthrough_plan(facts, policy=None, host=None, firmware_enables=()):
    """Plan GPU passthrough for one host.

    :param facts: ``ansible_facts.pci_passthrough`` from the ``pci_passthrough_facts`` module.
    :param policy: optional operator policy: ``vendors`` (GPU vendor allow-list), ``alias_names``
        (``{"10de:1db4": "v100"}``), ``exclude`` (addresses not offered to Nova), ``keep_on_host``
        (addresses that must keep their host driver), ``allow_unsafe_interrupts``, ``amd_iommu_on``.
    :param host: the inventory hostname, used in error messages and the plan.
    :param firmware_enables: what BIOS attributes the host role stages on the BMC switch on at the reboot
        (``virtualization``, ``iommu``; the plan role passes both for a host with ``passthrough_host_bmc_address``).
    :returns: the plan (see docs/design.md): ``selected``, ``excluded``, ``vfio_devices``, ``vfio_ids``,
        ``bind_by_address``, ``host_devices``, ``aliases``, ``kernel_args``, ``kernel_args_absent``,
        ``blacklist_modules``, ``softdep_drivers``, ``early_modules``, ``reboot_required``, ``pending``,
        ``notes``, ``groups``, ``blocked_by`` and ``reboot_blocked`` (``settle.py``: why no reboot can help, and
        whether one was otherwise needed), ``guest_phys_bits_needed`` and ``ovmf_phys_bits_needed`` (the most guest physical
        address bits one of the selected GPUs needs, ``the collection's plugins/module_utils/pci/bars.py``; null without selected GPUs or
        their windows, and for OVMF when its defaults do).
    :raises PlanError: malformed facts or policy, naming the host, the key and the fix.

    The stages: ``_classify`` (display devices that stay), ``_plan_without_iommu`` or
    ``_select_per_group``, ``_aliases``, ``_vfio_binding``, the host's side (devices and blacklist),
    ``_softdeps``, ``_kernel_args``, ``_pending``.
    """
    _check_facts(facts, host)
    devices = sorted(facts["devices"], key=lambda d: d["address"])
    by_addr = {d["address"]: d for d in devices}
    pol = _check_policy(policy, by_addr, host)
    firmware_enables = _check_firmware_enables(firmware_enables, host)
    iommu = bool(facts.get("iommu_enabled"))
    groups: dict[str, list[dict]] = {}
    for dev in devices:
        if dev.get("iommu_group") is not None:
            groups.setdefault(str(dev["iommu_group"]), []).append(dev)

    stays, candidates = _classify(devices, pol)
    blocked_by = settle.reboot_blockers(facts, has_gpu=bool(candidates), firmware_enables=firmware_enables)
    if iommu:
        selected, excluded, vfio, group_report = _select_per_group(candidates, groups, stays, pol)
        notes = []
    else:
        blocked = ("iommu" if any(b["cause"] in settle.IOMMU_CAUSES for b in blocked_by)
                   else "other" if blocked_by else None)
        excluded, vfio, notes = _plan_without_iommu(candidates, devices, pol, blocked=blocked)
        selected, group_report = [], []
    for address, entry in stays.items():
        excluded.setdefault(address, entry)
    aliases = _aliases(selected, host)
    guest_bits, device_notes = _device_notes(selected)
    notes += device_notes
    vfio_devices, vfio_ids, bind_by_address, binding_notes = _vfio_binding(devices, vfio)
    notes += binding_notes

    host_devices = sorted(a for a, d in by_addr.items() if rules.is_display(d) and a not in vfio)
    nvidia_stays = any(d["vendor_id"] == NVIDIA and d["address"] not in vfio for d in devices)
    nvidia_passed = any(by_addr[a]["vendor_id"] == NVIDIA for a in vfio_devices)
    blacklist = list(NVIDIA_BLACKLIST) if nvidia_passed and not nvidia_stays else []
    nvidia_on_host = any(by_addr[a]["vendor_id"] == NVIDIA for a in host_devices)

    cpu = facts.get("cpu_vendor")
    kernel_args, kernel_absent, kernel_notes = _kernel_args(cpu, iommu, pol, vfio_devices, vfio_ids, blacklist,
                                                            nvidia_on_host)
    notes += kernel_notes
    pending = _pending(facts, kernel_args, kernel_absent, vfio_devices, host)
    notes = _blocked_notes(blocked_by) + notes

    return {
        "host": host,
        "iommu_enabled": iommu,
        "cpu_vendor": cpu,
        "selected": selected,
        "excluded": [dict(address=a, **excluded[a]) for a in sorted(excluded)],
        "vfio_devices": vfio_devices,
        "vfio_ids": vfio_ids,
        "bind_by_address": bind_by_address,
        "host_devices": host_devices,
        "aliases": aliases,
        "kernel_args": kernel_args,
        "kernel_args_absent": kernel_absent,
        "blacklist_modules": blacklist,
        "softdep_drivers": _softdeps(vfio_devices, by_addr),
        "early_modules": list(EARLY_MODULES) if vfio_devices else [],
        "reboot_required": bool(pending) and not blocked_by,
        "reboot_blocked": bool(pending) and bool(blocked_by),
        "blocked_by": blocked_by,
        "pending": pending,
        "notes": notes,
        "groups": group_report,
        **guest_bits,
    }
