# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""What a PCI function is, for passthrough, and the tables the planner decides with: the rules the planner,
the report and the verifier (``plugins/module_utils/passthrough/verify.py``) share, so they cannot disagree about,
say, which devices of an IOMMU group need nothing (the PCI bridges).

* A PCI bridge (class 0604, PCI-to-PCI; 0609, semi-transparent PCI-to-PCI) is not an endpoint a VM
  uses: vfio-pci binds only endpoints, and a bridge in an IOMMU group needs nothing for the group to
  be usable.
* A display device is class 03xx (VGA, 3D, other display controller).
* The functions of one card share a slot: ``0000:27:00.0`` and ``0000:27:00.1`` are one card.

What a CPU vendor's IOMMU needs on the kernel line is ``kernel_cmdline.vendor_iommu_args`` (one rule for
the planner and the host checks).
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.alias import alias_from_model_name
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.ids import marketing_name
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError

NVIDIA = "10de"
AMD_GPU = "1002"
DEFAULT_VENDORS = (NVIDIA, AMD_GPU)
VENDOR_NAMES = {NVIDIA: "nvidia", AMD_GPU: "amd", "1a03": "aspeed", "102b": "matrox", "8086": "intel",
                "1234": "qemu", "1b36": "redhat", "15ad": "vmware", "1af4": "virtio"}

# Short alias names the project chose for well-known models ("vendor:product" -> alias). Model names
# come from the host's PCI ID database (facts' device_name); a model not listed here gets an alias
# derived from that name (GA104GL [RTX A4000] -> rtx-a4000, plugins/module_utils/pci/alias.py), and without a
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
# PCI bridges need nothing in a group: the one rule, for the planner and the verifier.
BRIDGE_CLASSES = ("0604", "0609")
# Host drivers that must load after vfio-pci so they do not claim a passed device first.
GPU_DRIVERS = {NVIDIA: ("nouveau", "nvidia", "nvidiafb"), AMD_GPU: ("amdgpu", "radeon")}
FUNCTION_DRIVERS = {"0403": "snd_hda_intel", "0c03": "xhci_pci", "0c80": "i2c_nvidia_gpu"}
# Driver names as sysfs shows them -> the module that provides them (softdep takes module names).
DRIVER_MODULES = {"xhci_hcd": "xhci_pci", "nvidia-gpu": "i2c_nvidia_gpu"}
NVIDIA_BLACKLIST = ["nouveau", "nvidiafb"]
EARLY_MODULES = ["vfio", "vfio_iommu_type1", "vfio_pci"]
UNSAFE_INTERRUPTS = "vfio_iommu_type1.allow_unsafe_interrupts=1"
NVIDIA_HOST_DRIVER_BLACKLIST = ("modprobe.blacklist=nouveau,nvidia,nvidiafb,nvidia_drm", "module_blacklist=nouveau,nvidia")


def plan_error(host, message):
    """The planner's error: ``passthrough_plan: host <host>: <message>``."""
    prefix = f"host {host}: " if host else ""
    return PlanError(f"passthrough_plan: {prefix}{message}")


def class_name(class_id: str) -> str:
    return CLASS_NAMES.get(class_id[:4], f"class {class_id[:4]} device")


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


def is_bridge(dev) -> bool:
    """Whether a device of the facts is a PCI bridge, which a group needs nothing from."""
    return str(dev.get("class_id") or "")[:4] in BRIDGE_CLASSES


def is_display(dev) -> bool:
    """Whether a device of the facts is a display device (class 03xx)."""
    return str(dev.get("class_id") or "").startswith("03")


def slot(address: str) -> str:
    """The slot of a PCI address, without its function (``0000:27:00.1`` -> ``0000:27:00``)."""
    return address.rsplit(".", 1)[0]
