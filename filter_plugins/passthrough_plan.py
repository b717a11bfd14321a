# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Group-safe GPU passthrough planning: which GPUs Nova gets, and what the host must do for that.

The planner is a pure function of the facts from ``pci_passthrough_facts`` and an optional operator
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
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping

import ansible.module_utils

# The project's module_utils/ (ansible.cfg `module_utils`), importable here as modules import it.
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.pci_alias import alias_from_model_name, alias_name_error  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils.pci_ids import marketing_name  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import kernel_cmdline  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import locations  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import pci_address  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import passthrough_rules as rules  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils import passthrough_verify  # noqa: E402  pylint: disable=wrong-import-position

try:  # Ansible is present when this runs as a filter; tests may import the logic without it.
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - exercised only outside Ansible
    class AnsibleFilterError(Exception):
        """Stand-in used when Ansible is not importable."""

from ansible.module_utils.parsing.convert_bool import boolean


NVIDIA = "10de"
AMD_GPU = "1002"
DEFAULT_VENDORS = (NVIDIA, AMD_GPU)
VENDOR_NAMES = {NVIDIA: "nvidia", AMD_GPU: "amd", "1a03": "aspeed", "102b": "matrox", "8086": "intel",
                "1234": "qemu", "1b36": "redhat", "15ad": "vmware", "1af4": "virtio"}

# Short alias names the project chose for well-known models ("vendor:product" -> alias). Model names
# come from the host's PCI ID database (facts' device_name); a model not listed here gets an alias
# derived from that name (GA104GL [RTX A4000] -> rtx-a4000, module_utils/pci_alias.py), and without a
# database <vendor>-<product> (nvidia-24b0). Operators rename through the policy's alias_names.
KNOWN_ALIASES = {
    "10de:1db4": "tesla-v100",
    "10de:1db5": "tesla-v100-sxm2",
    "10de:1db6": "tesla-v100-32g",
    "10de:1eb8": "t4",
    "10de:20b0": "a100-sxm4",
    "10de:20b2": "a100-sxm4-80g",
    "10de:20b5": "a100-80g",
    "10de:20f1": "a100",
    "10de:20b7": "a30",
    "10de:2235": "a40",
    "10de:2236": "a10",
    "10de:2230": "rtx-a6000",
    "10de:2330": "h100-sxm5",
    "10de:2331": "h100",
    "10de:26b5": "l40",
    "10de:26b9": "l40s",
    "10de:27b8": "l4",
    "10de:1e04": "rtx-2080-ti",
    "10de:1e07": "rtx-2080-ti",
    "10de:1e87": "rtx-2080",
    "10de:1f08": "rtx-2060",
    "10de:2204": "rtx-3090",
    "10de:2684": "rtx-4090",
    "1002:738c": "mi100",
    "1002:740f": "mi210",
}

# Class codes in plain words, for reasons an operator can read ("what else is in that group").
CLASS_NAMES = {
    "0100": "SCSI controller", "0101": "IDE controller", "0104": "RAID controller",
    "0106": "SATA controller", "0107": "SAS controller", "0108": "NVMe controller",
    "0200": "Ethernet controller", "0207": "InfiniBand controller", "0280": "network controller",
    "0300": "VGA controller", "0302": "3D controller", "0380": "display controller",
    "0403": "HD audio", "0600": "host bridge", "0601": "ISA bridge", "0604": "PCI bridge",
    "0805": "SD host controller", "0806": "IOMMU", "0c03": "USB controller", "0c05": "SMBus controller",
    "0c80": "USB-C UCSI controller", "1080": "encryption controller", "1101": "signal processing controller",
}
# PCI bridges need nothing in a group: the one rule, shared with the verifier (module_utils/passthrough_rules.py).
BRIDGE_CLASSES = rules.BRIDGE_CLASSES
# Host drivers that must load after vfio-pci so they do not claim a passed device first.
GPU_DRIVERS = {NVIDIA: ("nouveau", "nvidia", "nvidiafb"), AMD_GPU: ("amdgpu", "radeon")}
FUNCTION_DRIVERS = {"0403": "snd_hda_intel", "0c03": "xhci_pci", "0c80": "i2c_nvidia_gpu"}
# Driver names as sysfs shows them -> the module that provides them (softdep takes module names).
DRIVER_MODULES = {"xhci_hcd": "xhci_pci", "nvidia-gpu": "i2c_nvidia_gpu"}
NVIDIA_BLACKLIST = ["nouveau", "nvidiafb"]
EARLY_MODULES = ["vfio", "vfio_iommu_type1", "vfio_pci"]
UNSAFE_INTERRUPTS = "vfio_iommu_type1.allow_unsafe_interrupts=1"
NVIDIA_HOST_DRIVER_BLACKLIST = ("modprobe.blacklist=nouveau,nvidia,nvidiafb,nvidia_drm", "module_blacklist=nouveau,nvidia")


def _err(host, message):
    prefix = f"host {host}: " if host else ""
    return AnsibleFilterError(f"passthrough_plan: {prefix}{message}")


def class_name(class_id: str) -> str:
    return CLASS_NAMES.get(class_id[:4], f"class {class_id[:4]} device")


def normalise_address(value, host=None, where="address") -> str:
    """Return the full lowercase form of a PCI address (``27:00.0`` -> ``0000:27:00.0``)."""
    text = pci_address.normalise_address(str(value))
    if text is None:
        raise _err(host, f"{where} {value!r} is not a PCI address; write it as 0000:27:00.0 (or 27:00.0)")
    return text


def model_alias(model_id: str, alias_names: dict, device_name: str | None = None) -> str:
    """The Nova alias of a model: the policy's name, the project's short name, one derived from the
    PCI ID database name (``GA104GL [RTX A4000]`` -> ``rtx-a4000``), else ``<vendor>-<product>``."""
    if model_id in alias_names:
        return alias_names[model_id]
    if model_id in KNOWN_ALIASES:
        return KNOWN_ALIASES[model_id]
    derived = alias_from_model_name(marketing_name(device_name))
    if derived:
        return derived
    vendor, product = model_id.split(":")
    return f"{VENDOR_NAMES.get(vendor, 'pci-' + vendor)}-{product}"


def model_name(dev) -> str | None:
    """The model name operators know, from the facts' device_name (PCI ID database); None without one."""
    return marketing_name(dev.get("device_name"))


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


POLICY_KEYS = ("alias_names", "allow_unsafe_interrupts", "amd_iommu_on", "exclude", "keep_on_host", "vendors")
POLICY_BOOLEANS = ("allow_unsafe_interrupts", "amd_iommu_on")


def _policy_text(value, host, where, example):
    """An ID or address from the policy must be a string: YAML turns unquoted 0x10de or 27:00.0 into numbers."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise _err(host, f"{where} {value!r} is a number, not a string (YAML reads an unquoted 0x10de as the integer "
                         f"4318 and 27:00.0 as a sexagesimal number): quote it, e.g. {example!r}")
    raise _err(host, f"{where} {value!r} is a {type(value).__name__}, not a string: write it as e.g. {example!r}")


def _policy_bool(policy, key, host):
    """Ansible's boolean rules (true/false, yes/no, on/off, 1/0), strictly: anything else is refused."""
    value = policy.get(key, False)
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise _err(host, f"passthrough_policy.{key} is {value!r}, which is not a boolean: write true or false "
                         "(Ansible also reads yes/no, on/off, 1/0)") from None


# One policy variable (passthrough_policy) plans the host, configures it, renders Nova's device_spec and checks its
# health; the names the host and health roles had are refused, so no host is configured from one policy and
# offered to Nova from another.
RETIRED_POLICY_VARS = ("passthrough_host_policy", "gpu_health_policy")


def retired_vars_errors(hosts, hostvars):
    """The refusals of the retired policy variables the given hosts still set (empty when none does).

    :param hosts: inventory hostnames, each named in its message with the fix.
    :param hostvars: Ansible's ``hostvars`` (only the variables' names are looked at).
    """
    errors = []
    for host in hosts:
        retired = [name for name in RETIRED_POLICY_VARS if name in hostvars[host]]
        if retired:
            names = " and ".join(retired)
            errors.append(
                f"Host {host}: {names} {'is' if len(retired) == 1 else 'are'} no longer read: the plan, the host "
                f"configuration, Nova and the health check all use passthrough_policy. Rename {names} to "
                f"passthrough_policy in the inventory (one policy per host), then run: ansible-playbook "
                f"playbooks/plan.yml -i inventory/<env> --limit {host}")
    return errors


def policy_errors(policy, host=None):
    """The problems of a passthrough_policy that show without the host's facts (types, keys, formats),
    as a list of messages naming the host and the key; empty when the policy is well formed. The role's
    preflight asserts this; the planner raises the same messages."""
    try:
        _check_policy(policy, None, host)
    except AnsibleFilterError as exc:
        return [str(exc)]
    return []


def _check_policy(policy, by_addr, host):
    """Validate and normalise the policy. ``by_addr`` None skips the checks that need the host's devices."""
    if policy is None:
        policy = {}
    if not isinstance(policy, dict):
        raise _err(host, f"the policy must be a dict (passthrough_policy), got {type(policy).__name__}")
    unknown = sorted(str(k) for k in set(policy) - set(POLICY_KEYS))
    if unknown:
        raise _err(host, f"unknown passthrough_policy key(s) {', '.join(unknown)}; known keys: {', '.join(POLICY_KEYS)}")
    flags = {key: _policy_bool(policy, key, host) for key in POLICY_BOOLEANS}

    vendors = policy.get("vendors", list(DEFAULT_VENDORS))
    if vendors is None or vendors == []:
        raise _err(host, "passthrough_policy.vendors is empty: no GPU vendor would be considered (an empty list does "
                         "not mean the default vendors). Remove the key for the default (NVIDIA 10de and AMD 1002), or "
                         "list the vendor ids, e.g. ['10de']")
    if not isinstance(vendors, list):
        raise _err(host, "passthrough_policy.vendors must be a list of 4-hex-digit vendor ids, e.g. ['10de']")
    vendors_out = []
    for vendor in vendors:
        text = _policy_text(vendor, host, "passthrough_policy.vendors entry", "10de").lower().removeprefix("0x")
        if not pci_address.is_id(text):
            raise _err(host, f"passthrough_policy.vendors has {vendor!r}: write vendor ids as 4 hex digits, e.g. '10de'")
        vendors_out.append(text)

    alias_names = {}
    raw_aliases = policy.get("alias_names") or {}
    if not isinstance(raw_aliases, dict):
        raise _err(host, "passthrough_policy.alias_names must map 'vendor:product' to an alias name")
    for model_id, name in raw_aliases.items():
        key = _policy_text(model_id, host, "passthrough_policy.alias_names key", "10de:1db4").lower()
        if not pci_address.is_model_id(key):
            raise _err(host, f"passthrough_policy.alias_names key {model_id!r} is not a 'vendor:product' id "
                             "in hex like '10de:1db4'")
        problem = alias_name_error(name)
        if problem:
            raise _err(host, f"passthrough_policy.alias_names[{model_id!r}] = {name!r} is not a valid alias name: "
                             f"{problem}")
        alias_names[key] = name

    def addresses(key):
        values = policy.get(key) or []
        if not isinstance(values, list):
            raise _err(host, f"passthrough_policy.{key} must be a list of PCI addresses")
        out = []
        for value in values:
            _policy_text(value, host, f"passthrough_policy.{key} entry", "0000:27:00.0")
            address = normalise_address(value, host, f"passthrough_policy.{key} entry")
            if by_addr is not None and address not in by_addr:
                raise _err(host, f"passthrough_policy.{key} names {address}, which does not exist on this host; "
                                 "check the address with lspci -D or remove it from the policy")
            out.append(address)
        return set(out)

    return {
        "vendors": vendors_out,
        "alias_names": alias_names,
        "exclude": addresses("exclude"),
        "keep_on_host": addresses("keep_on_host"),
        "allow_unsafe_interrupts": flags["allow_unsafe_interrupts"],
        "amd_iommu_on": flags["amd_iommu_on"],
    }


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


def _plan_without_iommu(candidates, devices, pol):
    """With the IOMMU off nothing can be offered; the GPUs are bound provisionally.

    The GPUs (and their other functions) go to vfio-pci with the same reboot that turns the IOMMU on,
    so one reboot is enough when the groups turn out clean; binding a GPU the host does not use takes
    nothing from the host. Returns ``(excluded, vfio, notes)``.
    """
    notes = ["The IOMMU is not active (the kernel shows no IOMMU groups), so whether a GPU shares its group "
             "with other devices cannot be checked: nothing is offered to Nova yet. The planned kernel "
             "arguments enable the IOMMU; after the reboot the plan is made again from the new facts."]
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
    }


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
            related = [address for address, _ in blockers]
            cause = ("keep_on_host_group" if any(a in pol["keep_on_host"] for a in related)
                     else "shared_group_with_host_device")
            reason = (f"IOMMU group {group} also holds {_join(text for _, text in blockers)}: passing the GPU through "
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


def passthrough_plan(facts, policy=None, host=None):
    """Plan GPU passthrough for one host.

    :param facts: ``ansible_facts.pci_passthrough`` from the ``pci_passthrough_facts`` module.
    :param policy: optional operator policy: ``vendors`` (GPU vendor allow-list), ``alias_names``
        (``{"10de:1db4": "v100"}``), ``exclude`` (addresses not offered to Nova), ``keep_on_host``
        (addresses that must keep their host driver), ``allow_unsafe_interrupts``, ``amd_iommu_on``.
    :param host: the inventory hostname, used in error messages and the plan.
    :returns: the plan (see docs/design.md): ``selected``, ``excluded``, ``vfio_devices``, ``vfio_ids``,
        ``bind_by_address``, ``host_devices``, ``aliases``, ``kernel_args``, ``kernel_args_absent``,
        ``blacklist_modules``, ``softdep_drivers``, ``early_modules``, ``reboot_required``, ``pending``,
        ``notes``, ``groups``.
    :raises AnsibleFilterError: malformed facts or policy, naming the host, the key and the fix.

    The stages: ``_classify`` (display devices that stay), ``_plan_without_iommu`` or
    ``_select_per_group``, ``_aliases``, ``_vfio_binding``, the host's side (devices and blacklist),
    ``_softdeps``, ``_kernel_args``, ``_pending``.
    """
    _check_facts(facts, host)
    devices = sorted(facts["devices"], key=lambda d: d["address"])
    by_addr = {d["address"]: d for d in devices}
    pol = _check_policy(policy, by_addr, host)
    iommu = bool(facts.get("iommu_enabled"))
    groups: dict[str, list[dict]] = {}
    for dev in devices:
        if dev.get("iommu_group") is not None:
            groups.setdefault(str(dev["iommu_group"]), []).append(dev)

    stays, candidates = _classify(devices, pol)
    if iommu:
        selected, excluded, vfio, group_report = _select_per_group(candidates, groups, stays, pol)
        notes = []
    else:
        excluded, vfio, notes = _plan_without_iommu(candidates, devices, pol)
        selected, group_report = [], []
    for address, entry in stays.items():
        excluded.setdefault(address, entry)
    aliases = _aliases(selected, host)
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
        "reboot_required": bool(pending),
        "pending": pending,
        "notes": notes,
        "groups": group_report,
    }


def plan_table(plan, facts):
    """Rows for the per-host report: address, model, group, driver, verdict, reason."""
    by_addr = {d["address"]: d for d in facts.get("devices", [])}
    selected = {s["address"]: s for s in plan["selected"]}
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    rows = []
    shown = set(selected) | set(reasons) | set(plan["vfio_devices"])
    for address in sorted(shown):
        dev = by_addr.get(address, {})
        model_id = f"{dev.get('vendor_id')}:{dev.get('product_id')}"
        model = model_name(dev) or f"{class_name(dev.get('class_id', '000000'))} {model_id}"
        if address in selected:
            verdict, reason = "nova", f"alias {selected[address]['alias']} ({selected[address]['device_type']})"
        elif address in plan["vfio_devices"]:
            verdict = "vfio"
            reason = reasons.get(address, "another function of a passed card")
        else:
            verdict, reason = "host", reasons.get(address, "")
        rows.append({"address": address, "model": model, "group": dev.get("iommu_group") or "-",
                     "driver": dev.get("driver") or "-", "verdict": verdict, "reason": reason})
    return rows


def plan_report(plan, facts):
    """A readable fixed-width table of ``plan_table`` rows plus the plan's key decisions (one string)."""
    rows = plan_table(plan, facts)
    headers = ("address", "model", "group", "driver", "verdict", "reason")
    widths = [max([len(h)] + [len(str(r[h])) for r in rows]) for h in headers[:-1]]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers[:-1], widths)) + "  REASON"]
    for row in rows:
        lines.append("  ".join(str(row[h]).ljust(w) for h, w in zip(headers[:-1], widths)) + "  " + row["reason"])
    lines.append(f"offered to Nova: {len(plan['selected'])} GPU(s)"
                 + (f" as {', '.join(a['name'] + ' (' + a['device_type'] + ')' for a in plan['aliases'])}" if plan["aliases"] else ""))
    lines.append(f"kernel args: {' '.join(plan['kernel_args']) or '-'}")
    if plan["bind_by_address"]:
        lines.append(f"bound by address: {' '.join(plan['bind_by_address'])}")
    lines.append(f"reboot required: {'yes' if plan['reboot_required'] else 'no'}")
    lines.extend(f"  pending: {p}" for p in plan["pending"])
    lines.extend(f"note: {n}" for n in plan["notes"])
    return "\n".join(lines)


# The plan file's layout (<passthrough_plan_dir>/<host>.json). A plan written with another format is stale.
PLAN_FORMAT = 1


def plan_fix(host):
    """The command that writes a host's plan file again (in every plan-file error)."""
    return f"ansible-playbook playbooks/plan.yml -i inventory/<env> --limit {host or '<host>'}"


def policy_fingerprint(policy):
    """A short, stable digest of an operator policy (``passthrough_policy``): the plan file records the
    fingerprint of the policy it was made with, and a plan made with another policy is stale.

    :raises AnsibleFilterError: the policy is not a mapping.
    """
    if policy is None:
        policy = {}
    if not isinstance(policy, Mapping):
        raise AnsibleFilterError(f"passthrough_policy_fingerprint: passthrough_policy must be a mapping, got "
                                 f"{type(policy).__name__} {policy!r}")
    text = json.dumps(policy, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def plan_record(plan, facts, policy):
    """What the plan role writes to ``<passthrough_plan_dir>/<host>.json``: the plan, the facts it was
    made from, the format and the fingerprint of the policy (``passthrough_plan_load`` checks both)."""
    if not isinstance(plan, Mapping) or not isinstance(facts, Mapping):
        raise AnsibleFilterError("passthrough_plan_record: the plan and the facts must be mappings (the "
                                 "passthrough_plan filter's result and ansible_facts.pci_passthrough)")
    return {"format": PLAN_FORMAT, "policy_fingerprint": policy_fingerprint(policy), "facts": dict(facts),
            "plan": dict(plan)}


def _read_plan_file(data, path, host):
    """The parsed content of a plan file (a dict with a ``plan`` object), or AnsibleFilterError."""
    if isinstance(data, dict) and "content" in data:
        path = path or data.get("source")
        host = host or data.get("item")
        try:
            text = base64.b64decode(data["content"], validate=True).decode("utf-8")
        except (ValueError, TypeError, UnicodeDecodeError):
            text = None
    else:
        text = data if isinstance(data, str) else None
    fix = f"write it again with: {plan_fix(host)} (passthrough_plan_dir set), or delete it"
    where = f"plan file {path or '(unnamed)'}" + (f" of host {host}" if host else "")
    if text is None:
        raise AnsibleFilterError(f"passthrough_plan_file: {where} is not text: {fix}")
    if not text.strip():
        raise AnsibleFilterError(f"passthrough_plan_file: {where} is empty: {fix}")
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise AnsibleFilterError(f"passthrough_plan_file: {where} is not valid JSON (line {exc.lineno}, "
                                 f"column {exc.colno}: {exc.msg}): {fix}") from None
    if not isinstance(content, dict) or not isinstance(content.get("plan"), dict):
        raise AnsibleFilterError(f"passthrough_plan_file: {where} is JSON but not a plan file (no 'plan' "
                                 f"object): {fix}")
    return content


def plan_file(data, path=None, host=None):
    """Parse a plan file written by the plan phase (``<passthrough_plan_dir>/<host>.json``) and return
    its ``plan``. Consumers load plans through ``passthrough_plan_load`` (roles/passthrough/tasks/load.yml),
    which uses this and also refuses a missing or stale file.

    :param data: the file's text (``lookup('file', ...)``), or the result of ``ansible.builtin.slurp``
        on it (its ``source`` names the file and its loop ``item`` the host when not given).
    :raises AnsibleFilterError: an empty, corrupt or foreign file, naming the file, the host and the
        command that writes it again.
    """
    return _read_plan_file(data, path, host)["plan"]


def plan_load(text, plan_dir, host, policy):
    """The one loader of stored plans: the content of ``<plan_dir>/<host>.json`` checked against the
    host's current ``passthrough_policy``. Returns ``{"facts": ..., "plan": ...}``.

    :param text: the file's text, or None when the file does not exist.
    :param plan_dir: the host's ``passthrough_plan_dir`` (empty: not set).
    :param policy: the host's current ``passthrough_policy``.
    :raises AnsibleFilterError: no plan directory, a missing, corrupt, foreign or stale file (made with
        another plan format or another policy), naming the host, the file and the command to run.
    """
    if not isinstance(host, str) or not host:
        raise AnsibleFilterError(f"passthrough_plan_load: the host must be an inventory name, got {host!r}")
    problem = locations.host_name_problem(host)
    if problem:
        raise AnsibleFilterError(f"passthrough_plan_load: {problem}")
    fix = f"run: {plan_fix(host)}"
    if not isinstance(plan_dir, str) or not plan_dir:
        raise AnsibleFilterError(
            f"passthrough_plan_load: host {host}: passthrough_plan_dir is not set, so it has no plan file: set "
            f"passthrough_plan_dir (an absolute directory on the control host, e.g. /var/lib/open-gpu-cloud/plans) "
            f"in inventory/<env>/group_vars, then {fix}")
    problem = locations.path_problem("passthrough_plan_dir", plan_dir)
    if problem:
        raise AnsibleFilterError(f"passthrough_plan_load: host {host}: {problem}; {fix} with it absolute")
    path = f"{plan_dir.rstrip('/')}/{host}.json"
    if text is None:
        raise AnsibleFilterError(f"passthrough_plan_load: host {host}: no plan file {path}: the plan phase has not "
                                 f"run for it with this passthrough_plan_dir; {fix}")
    content = _checked_plan_file(text, path, host)
    if content.get("policy_fingerprint") != policy_fingerprint(policy):
        raise AnsibleFilterError(f"passthrough_plan_load: host {host}: plan file {path} is stale: it was made with "
                                 f"another passthrough_policy than the host's current one (fingerprint "
                                 f"{content.get('policy_fingerprint')}, now {policy_fingerprint(policy)}); {fix}")
    return {"facts": content["facts"], "plan": content["plan"]}


def _checked_plan_file(text, path, host):
    """A plan file's content when it is a plan of this format for this host, else AnsibleFilterError."""
    fix = f"run: {plan_fix(host)}"
    content = _read_plan_file(text, path, host)
    if content.get("format") != PLAN_FORMAT:
        raise AnsibleFilterError(f"passthrough_plan_load: host {host}: plan file {path} is stale: it has plan format "
                                 f"{content.get('format')!r}, this version reads format {PLAN_FORMAT}; {fix}")
    if content["plan"].get("host") not in (None, host):
        raise AnsibleFilterError(f"passthrough_plan_load: host {host}: plan file {path} is the plan of host "
                                 f"{content['plan'].get('host')}, not of {host}; {fix}")
    if not isinstance(content.get("facts"), dict):
        raise AnsibleFilterError(f"passthrough_plan_file: plan file {path} of host {host} has no 'facts' object: "
                                 f"write it again with: {plan_fix(host)}")
    return content


def fleet_plan_load(text, path):
    """A plan file of a GPU host that this inventory does not hold: the plan of another AWX job slice's host (the
    plan directory is the fleet's, shared by every slice), or of a host that left the fleet. Returns
    ``{"facts": ..., "plan": ...}`` like ``passthrough_plan_load``, checked the same way except against the
    host's policy, which only the inventory holding the host knows (its own runs refuse the plan when stale).

    :param text: the file's text.
    :param path: the file, ``<passthrough_plan_dir>/<host>.json``; its name names the host.
    :raises AnsibleFilterError: a file name that is no host name, a corrupt or foreign file, another plan format.
    """
    if not isinstance(path, str) or not path.endswith(".json"):
        raise AnsibleFilterError(f"passthrough_fleet_plan_load: {path!r} is not a plan file (<host>.json)")
    host = path.rsplit("/", 1)[-1][:-len(".json")]
    problem = locations.host_name_problem(host)
    if problem:
        raise AnsibleFilterError(f"passthrough_fleet_plan_load: plan file {path}: {problem}; move the file out "
                                 "of the plan directory")
    content = _checked_plan_file(text, path, host)
    return {"facts": content["facts"], "plan": content["plan"]}


def verify(facts, plan, host=None, fresh=None):
    """``facts | passthrough_verify(plan, host=..., fresh=...)``: the host's problems against its plan
    (``module_utils/passthrough_verify.py``: a list of ``{cause, host, address?, group?, driver?,
    message}``, empty when the host is as planned). ``fresh``, the plan made again from ``facts``, adds
    the check that the plan still holds."""
    try:
        return passthrough_verify.verify(facts, plan, host=host, fresh=fresh)
    except passthrough_verify.VerifyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """GPU passthrough planning filters."""

    def filters(self):
        return {
            "passthrough_plan": passthrough_plan,
            "passthrough_plan_report": plan_report,
            "passthrough_plan_table": plan_table,
            "passthrough_policy_errors": policy_errors,
            "passthrough_retired_vars_errors": retired_vars_errors,
            "passthrough_plan_file": plan_file,
            "passthrough_verify": verify,
            "passthrough_plan_load": plan_load,
            "passthrough_fleet_plan_load": fleet_plan_load,
            "passthrough_plan_record": plan_record,
            "passthrough_policy_fingerprint": policy_fingerprint,
        }
