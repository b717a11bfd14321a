#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Discover PCI devices, IOMMU groups and the passthrough-relevant host state from sysfs/procfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pci_passthrough_facts
short_description: Discover GPUs, IOMMU groups and passthrough readiness from sysfs and procfs
description:
  - Reads the kernel's own layout under C(sysfs_root) and C(procfs_root) and returns it as
    C(ansible_facts.pci_passthrough), that is every PCI function with its IDs, class, driver, IOMMU group,
    NUMA node, boot VGA flag and SR-IOV capability; the IOMMU groups; whether the IOMMU is active;
    CPU vendor and virtualization flag; whether the host is itself a virtual machine (the CPU's hypervisor flag);
    the running kernel command line; whether the host booted by EFI; which ACPI table describes the firmware's IOMMU.
  - Reads C(<sysfs_root>/bus/pci/devices/*) (symlinks into C(<sysfs_root>/devices/pci*)) and each
    device's C(vendor), C(device), C(class), C(numa_node), C(boot_vga), C(sriov_totalvfs),
    C(driver_override), C(resource), C(reset_method) files, whether it has a C(reset) file, and C(driver) and
    C(iommu_group) links, C(<sysfs_root>/kernel/iommu_groups),
    C(<sysfs_root>/class/iommu), C(<sysfs_root>/firmware/efi), the names in C(<sysfs_root>/firmware/acpi/tables)
    (never the tables themselves), C(<procfs_root>/cmdline) and C(<procfs_root>/cpuinfo).
  - Reads each device's memory windows (BARs) from its C(resource) file and its reset methods from C(reset_method)
    (kernels from 5.15) or the presence of the write-only C(reset) file (older ones); neither file is written, and
    C(reset) is never opened. A tree without C(resource) files (a capture taken before discovery read them) gives
    null for both.
  - Names each device from the host's PCI ID database (C(pci_ids_path)), read-only, as C(lspci) does.
  - Never writes anything. Point the roots at a captured or simulated tree to plan on a copy.
  - A captured tree is untrusted input. A file, link or directory that resolves outside C(sysfs_root) and
    C(procfs_root) is refused, and so is an attribute that is not a regular file (a FIFO, a device);
    neither is ever opened, and the error names the path, never what a file holds.
  - C(kernel_cmdline) is split by the project's kernel command-line model (C(plugins/module_utils/host/kernel_cmdline.py));
    a line it cannot model (an unclosed quote, a quote inside a name or value) is an error naming the file.
    Credentials on it (a C(*password*)/C(*secret*)/C(*token*) key's value, a URL's or an iSCSI root's password;
    C(plugins/module_utils/common/redact.py)) are masked as C(********), as the facts are printed and stored in plan files.
  - A directory on the way that cannot be read is an error naming it (permission denied), and a device's
    C(iommu_group) link to a group that does not exist is an error (a partial capture), not an IOMMU group.
version_added: "0.1.0"
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
options:
  pci_ids_path:
    description:
      - The PCI ID database (C(pci.ids), the file C(lspci) reads) for vendor, device and subsystem names.
      - When not set, the first of C(/usr/share/hwdata/pci.ids), C(/usr/share/misc/pci.ids) and
        C(/usr/share/pci.ids) that exists on the host; when none does, the names are null (install the
        C(pci.ids) or C(hwdata) package to have them).
      - When set, the file must exist and be a C(pci.ids) file.
    type: path
  procfs_root:
    description:
      - Where procfs is mounted, or the C(proc) directory of a captured or simulated host.
    type: path
    default: /proc
  sysfs_root:
    description:
      - Where sysfs is mounted, or the C(sys) directory of a captured or simulated host.
    type: path
    default: /sys
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only]
attributes:
  check_mode:
    description: Read-only; behaves the same in check mode.
notes:
  - Run C(scripts/mock_sysfs.py capture) on a host to take a copy of exactly what this module reads.
"""

EXAMPLES = r"""
- name: Discover GPUs and IOMMU groups on this host
  open_gpu_cloud.toolkit.pci_passthrough_facts:

- name: Plan on a captured tree instead of the live host
  open_gpu_cloud.toolkit.pci_passthrough_facts:
    sysfs_root: /srv/captures/gpu01/sys
    procfs_root: /srv/captures/gpu01/proc

- name: Read names from a copy of the PCI ID database
  open_gpu_cloud.toolkit.pci_passthrough_facts:
    pci_ids_path: /srv/captures/gpu01/pci.ids

- name: Show the GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts.pci_passthrough.devices | selectattr('class_id', 'match', '^03') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(pci_passthrough).
  returned: always
  type: complex
  contains:
    pci_passthrough:
      description: The host's passthrough-relevant state.
      type: dict
      contains:
        iommu_enabled:
          description: Whether the kernel has created IOMMU groups (the IOMMU is active).
          type: bool
          sample: true
        iommu_units:
          description: Names under C(/sys/class/iommu) (C(dmar*) on Intel, C(ivhd*) on AMD).
          type: list
          elements: str
          sample: [ivhd0]
        cpu_vendor:
          description: C(amd), C(intel) or null when unknown.
          type: str
          sample: amd
        cpu_model:
          description: The first CPU's model name.
          type: str
          sample: AMD EPYC 7352 24-Core Processor
        cpu_phys_bits:
          description:
            - The physical address bits of the first CPU (C(address sizes) in C(/proc/cpuinfo)), or null when it does
              not say. A guest cannot be given more (Nova's C(hw_maxphysaddr_bits); the flavors' address-space budget).
          type: int
          sample: 43
        virtualization:
          description: C(svm) (AMD-V), C(vmx) (VT-x) or null when the CPU flag is absent (disabled in firmware).
          type: str
          sample: svm
        hypervisor:
          description:
            - Whether the first CPU's flags in C(/proc/cpuinfo) include C(hypervisor), that is the CPU says it runs
              under a hypervisor and the host is itself a virtual machine.
            - A GPU passed into a virtual machine can be passed on to Nova's guests only when its hypervisor offers
              nested virtualization (C(virtualization) set) and a virtual IOMMU.
          type: bool
          sample: false
        iommu_firmware:
          description:
            - Which ACPI table of the firmware describes an IOMMU, from the names in C(/sys/firmware/acpi/tables),
              C(dmar) (Intel VT-d), C(ivrs) (AMD-Vi) or C(none) (the tables are there and neither is; the firmware
              offers no IOMMU, so no kernel argument can switch one on; in a virtual machine, no virtual IOMMU).
            - null when the tree has no C(firmware/acpi/tables) (a capture taken before the capture tool copied their
              names, or a host without ACPI). Unknown keeps no reboot from being planned.
            - The planner's rule (C(plugins/module_utils/passthrough/settle.py)) reads it.
          type: str
          sample: ivrs
        kernel_cmdline:
          description: The running kernel's command line, one argument per item (double-quoted values kept whole),
            credentials masked.
          type: list
          elements: str
          sample: [BOOT_IMAGE=/boot/vmlinuz, ro, iommu=pt]
        efi:
          description: Whether the host booted through EFI.
          type: bool
          sample: true
        devices:
          description:
            - Every PCI function, sorted by address.
            - "A function on vfio-pci read from the live C(/sys) also has C(host_modules): the kernel modules whose
              aliases match its modalias (as C(modprobe --resolve-alias) resolves them), the host driver that would
              take it."
            - "C(bars): the memory BARs in use from the C(resource) file (lines 0-5; I/O port BARs, the expansion ROM
              and VF BARs left out), each C(index), C(size) in bytes, C(is_64bit) and C(prefetchable)
              (the collection's C(plugins/module_utils/pci/bars.py)); null when the tree has no C(resource) file for the device."
            - "C(reset_methods): what C(reset_method) lists (e.g. C([flr, bus])), C([unknown]) when only C(reset)
              exists (a kernel before 5.15: some reset works), C([]) when neither exists (the kernel has no usable
              reset for the device); null when C(resource) is missing too (a capture that did not copy them).
              C(resettable): whether that list is not empty (null when it is null)."
          type: list
          elements: dict
          sample:
            - address: "0000:27:00.0"
              vendor_id: "10de"
              product_id: "1db4"
              class_id: "030200"
              driver: nouveau
              driver_module: nouveau
              iommu_group: "19"
              numa_node: 0
              boot_vga: false
              sriov_totalvfs: null
              driver_override: null
              vendor_name: NVIDIA Corporation
              device_name: GV100GL [Tesla V100 PCIe 16GB]
              subsystem_name: null
              bars:
                - {index: 0, size: 16777216, is_64bit: false, prefetchable: false}
                - {index: 1, size: 17179869184, is_64bit: true, prefetchable: true}
                - {index: 3, size: 33554432, is_64bit: true, prefetchable: true}
              reset_methods: [bus]
              resettable: true
        iommu_groups:
          description: IOMMU group id to the sorted addresses of its devices.
          type: dict
          sample: {"19": ["0000:27:00.0", "0000:28:00.0"]}
        pci_ids:
          description:
            - The PCI ID database the names come from, or null when the host has none (names are then null).
            - Each device's C(vendor_name), C(device_name) and C(subsystem_name) come from it (null when the
              database does not list the ID).
          type: str
          sample: /usr/share/misc/pci.ids
"""

import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import ids as pci_ids
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars as pci_bars
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host.kernel_cmdline import CmdlineError, split as split_cmdline
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.settle import iommu_firmware_from_tables

HEX4 = re.compile(r"^0x([0-9a-fA-F]{4})$")
HEX6 = re.compile(r"^0x([0-9a-fA-F]{6})$")
RESET_METHOD = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# The roots discovery may read under: a captured tree is untrusted input, and a link out of it must
# not make discovery read (and report) another file. Set by discover().
_ROOTS: list[str] = []
# Paths resolved in this run (_realpath), path -> real path. Reset by discover().
_REAL_PATHS: dict[str, str] = {}


class DiscoveryError(Exception):
    """A tree that cannot be read as sysfs/procfs; the message names the path and the fix."""


class _Unusual(Exception):
    """A path _realpath leaves to os.path.realpath (a link loop, ".." inside a link's target)."""


def _realpath(path: str) -> str:
    """os.path.realpath(path), remembered for the run (_REAL_PATHS), so a directory is resolved once: a device's
    dozen attributes then cost one lstat each, and a link's target is resolved from the link's own (resolved)
    directory, one component at a time, not again from the root. Anything unusual is left to os.path.realpath
    itself; the answer is always realpath's (a test compares both over every path of a captured tree)."""
    real = _REAL_PATHS.get(path)
    if real is None:
        parent, name = os.path.split(path)
        try:
            if name in ("", ".", ".."):
                raise _Unusual
            real = _follow(_realpath(parent), name, 0)
        except _Unusual:
            real = os.path.realpath(path)
        _REAL_PATHS[path] = real
    return real


def _follow(real_dir: str, name: str, depth: int) -> str:
    """The real path of real_dir/name, real_dir being resolved already (so its ".." is its parent by name)."""
    candidate = os.path.join(real_dir, name)
    try:
        if not stat.S_ISLNK(os.lstat(candidate).st_mode):
            return candidate
        target = os.readlink(candidate)
    except OSError:
        return candidate  # realpath keeps a name it cannot resolve as it is
    if depth >= 40:
        raise _Unusual
    current = os.sep if target.startswith(os.sep) else real_dir
    parts = [part for part in target.split(os.sep) if part not in ("", ".")]
    while parts and parts[0] == "..":
        current = os.path.dirname(current)
        parts.pop(0)
    if ".." in parts:
        raise _Unusual
    for part in parts:
        current = _follow(current, part, depth + 1)
    return current


def _inside(path: str) -> str:
    """Resolve path; refuse it when it leaves every root (a symlink out of a captured tree)."""
    real = _realpath(path)
    for root in _ROOTS:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    raise DiscoveryError(f"{path} leads outside sysfs_root and procfs_root (a symlink out of the tree): refusing "
                         "to read it; recapture the host or remove the link")


def _read(path: str, limit: int = 4096) -> str | None:
    """Read a small sysfs/procfs attribute; None when it does not exist. Unreadable files are errors.

    Only regular files inside the roots are read (checked before opening, so a FIFO or a device in a
    captured tree is refused, never opened); O_NONBLOCK|O_NOFOLLOW and fstat guard the open itself.
    """
    real = _regular(path)
    if real is None:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc.strerror}; run discovery as root or fix the file's permissions") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DiscoveryError(f"cannot read {path}: not a regular file")
        return os.read(fd, limit).decode("utf-8", "replace").strip()
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _regular(path: str) -> str | None:
    """The real path of an attribute file; None when it does not exist. One outside the roots, or that is not a
    regular file (a FIFO, a device), is an error naming it."""
    if not _lexists(path):
        return None
    real = _inside(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise DiscoveryError(f"cannot read {path}: {_kind(mode)}, not a regular file as sysfs and procfs attributes are")
    return real


def _lexists(path: str) -> bool:
    """Whether ``path`` exists (a dangling link counts); a directory on the way that cannot be searched is an error
    naming it (os.path.lexists would say "missing", and the message would blame the tree instead of the rights)."""
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc.strerror}; run discovery as root or fix the permissions of "
                             "the directories above it") from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "Is a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _listdir(path: str) -> list[str]:
    """Names in a directory of the tree; [] when it is absent. An unreadable one is an error naming it."""
    if not _lexists(path) or not os.path.isdir(path):
        return []
    try:
        return sorted(os.listdir(_inside(path)))
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc.strerror}; run discovery as root or fix the directory's "
                             "permissions") from None


def _link_name(path: str, must_exist: bool = False) -> str | None:
    """The last part of a symlink's target (a driver's or group's name); None when there is no link. With
    ``must_exist``, a link whose target is missing is an error: a dangling iommu_group link would otherwise pass
    for an IOMMU group (and an active IOMMU)."""
    try:
        target = os.readlink(path)
        real = _inside(path)
        if must_exist and not os.path.exists(real):
            raise DiscoveryError(f"{path} points to {target}, which does not exist: the tree is inconsistent (a "
                                 "partial or hand-made capture); recapture the host with scripts/mock_sysfs.py "
                                 "capture, or run discovery on the host itself")
        return os.path.basename(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == 22:  # EINVAL: exists but is not a symlink
            raise DiscoveryError(f"{path} should be a symlink (as in the kernel's sysfs) but is not") from None
        raise DiscoveryError(f"cannot read link {path}: {exc.strerror}") from None


def _required_hex(path: str, pattern: re.Pattern, what: str) -> str:
    value = _read(path)
    if value is None:
        raise DiscoveryError(f"{path} is missing: every PCI device in sysfs has a {what} file")
    match = pattern.match(value)
    if not match:
        raise DiscoveryError(f"{path} holds {value!r}, not a {what} like {'0x10de' if pattern is HEX4 else '0x030200'}")
    return match.group(1).lower()


def _optional_int(path: str) -> int | None:
    value = _read(path)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise DiscoveryError(f"{path} holds {value!r}, not an integer") from None


def _exists(path: str) -> bool:
    """Whether an attribute file exists, checked as ``_read`` checks it (inside the roots, a regular file) but never
    opened: the kernel's ``reset`` is write-only, and writing it resets the device."""
    return _regular(path) is not None


def read_windows(base: str) -> list | None:
    """The device's memory BARs from its ``resource`` file (the collection's plugins/module_utils/pci/bars.py); None without the file."""
    path = os.path.join(base, "resource")
    text = _read(path)
    if text is None:
        return None
    try:
        return pci_bars.parse_resource(text)
    except pci_bars.ResourceError as exc:
        raise DiscoveryError(f"{path} is not the kernel's resource file ({exc}); recapture the host with "
                             "scripts/mock_sysfs.py capture, or run discovery on the host itself") from None


def read_reset_methods(base: str, has_resource: bool) -> list | None:
    """The device's reset methods: ``reset_method``'s names (kernel 5.15 and later, in the kernel's order), else
    ``["unknown"]`` when only ``reset`` exists (an older kernel: some reset works), else ``[]`` (the kernel shows
    neither file when no reset works). None when the tree has no ``resource`` file either: a capture that did not
    copy these attributes, where their absence says nothing."""
    path = os.path.join(base, "reset_method")
    text = _read(path)
    if text is not None:
        methods = text.replace(",", " ").split()
        if not all(RESET_METHOD.match(name) for name in methods):
            raise DiscoveryError(f"{path} does not hold reset method names (like 'flr bus') as the kernel writes them")
        return methods
    if _exists(os.path.join(base, "reset")):
        return ["unknown"]
    return [] if has_resource else None


def read_device(devices_dir: str, address: str) -> dict:
    link = os.path.join(devices_dir, address)
    # Resolve the bus symlink once (into sys/devices/pci*/...), so each attribute read below does
    # not walk the link again.
    base = _inside(link)
    numa = _optional_int(os.path.join(base, "numa_node"))
    override = _read(os.path.join(base, "driver_override"))
    class_id = _required_hex(os.path.join(base, "class"), HEX6, "class code")
    bars = read_windows(base)
    reset_methods = read_reset_methods(base, bars is not None)
    return {
        "address": address.lower(),
        "vendor_id": _required_hex(os.path.join(base, "vendor"), HEX4, "vendor ID"),
        "product_id": _required_hex(os.path.join(base, "device"), HEX4, "device ID"),
        "class_id": class_id,
        "driver": _link_name(os.path.join(base, "driver")),
        # The kernel module providing the driver (its name can differ: driver xhci_hcd, module
        # xhci_pci); null for drivers built into the kernel.
        "driver_module": _link_name(os.path.join(base, "driver", "module")),
        "iommu_group": _link_name(os.path.join(base, "iommu_group"), must_exist=True),
        "numa_node": None if numa is None or numa < 0 else numa,
        # Only VGA-class devices have boot_vga.
        "boot_vga": class_id.startswith("0300") and _read(os.path.join(base, "boot_vga")) == "1",
        "sriov_totalvfs": _optional_int(os.path.join(base, "sriov_totalvfs")),
        "driver_override": None if override in (None, "", "(null)") else override,
        "bars": bars,
        "reset_methods": reset_methods,
        "resettable": None if reset_methods is None else bool(reset_methods),
    }


def parse_cpuinfo(text: str) -> tuple[str | None, str | None, str | None, bool]:
    """The first processor's vendor (amd/intel/None), model name, virtualization flag (svm/vmx/None) and whether
    it has the ``hypervisor`` flag (the CPU says it runs under a hypervisor: the host is a virtual machine)."""
    vendor_id = model = flags = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "vendor_id" and vendor_id is None:
            vendor_id = value.strip()
        elif key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and flags is None:
            flags = value.split()
        if vendor_id and model and flags is not None:
            break
    vendor = {"AuthenticAMD": "amd", "HygonGenuine": "amd", "GenuineIntel": "intel"}.get(vendor_id or "")
    flags = flags or []
    virt = "svm" if "svm" in flags else "vmx" if "vmx" in flags else None
    return vendor, model, virt, "hypervisor" in flags


def parse_address_bits(text: str) -> int | None:
    """The first processor's physical address bits (``address sizes : 43 bits physical, 48 bits virtual``), or None
    when cpuinfo does not say (an architecture or a kernel that does not write the line)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "address sizes":
            words = value.split()
            if len(words) >= 3 and words[0].isdigit() and words[1] == "bits" and words[2].startswith("physical"):
                return int(words[0])
            return None
    return None


def add_names(devices_dir: str, devices: list, database) -> None:
    """Set vendor_name, device_name, subsystem_name on each device (null without a database)."""
    for dev in devices:
        names = {"vendor_name": None, "device_name": None, "subsystem_name": None}
        if database is not None:
            base = os.path.join(devices_dir, dev["address"])
            sub = [_read(os.path.join(base, name)) for name in ("subsystem_vendor", "subsystem_device")]
            sub = [HEX4.match(v).group(1).lower() if v and HEX4.match(v) else None for v in sub]
            names = database.names(dev["vendor_id"], dev["product_id"], sub[0], sub[1])
        dev.update(names)


def discover(sysfs_root: str, procfs_root: str, database=None, resolve_alias=None) -> dict:
    """The host's facts. ``resolve_alias`` (the running kernel's ``modprobe --resolve-alias``; only for the live
    /sys) names the modules whose aliases match a device: for a device on vfio-pci it says which host driver would
    take it (``host_modules``), which its own driver link no longer does."""
    if not os.path.isdir(sysfs_root):
        raise DiscoveryError(
            f"sysfs_root {sysfs_root} does not exist or is not a directory: set it (inventory variable "
            f"passthrough_sysfs_root) to /sys or to the sys/ directory of a captured host")
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    if not os.path.isdir(devices_dir):
        raise DiscoveryError(
            f"{sysfs_root} is not a sysfs tree: {devices_dir} is missing; point sysfs_root "
            f"(passthrough_sysfs_root) at /sys or at a tree made by scripts/mock_sysfs.py capture/build")
    _ROOTS[:] = [os.path.realpath(sysfs_root), os.path.realpath(procfs_root)]
    _REAL_PATHS.clear()
    cmdline_path = os.path.join(procfs_root, "cmdline")
    cmdline = _read(cmdline_path)
    if cmdline is None:
        raise DiscoveryError(
            f"{cmdline_path} is missing: procfs_root {procfs_root} is not a procfs tree; set it "
            f"(passthrough_procfs_root) to /proc or to the proc/ directory of a captured host")
    try:
        # Credentials on the line (an iSCSI root's password) are masked here, where the line enters: the facts are
        # printed, stored in the plan file and quoted in messages (plugins/module_utils/common/redact.py).
        kernel_cmdline = [redact.redact(arg) for arg in split_cmdline(cmdline)]
    except CmdlineError as exc:
        raise DiscoveryError(f"{cmdline_path} cannot be read as a kernel command line: "
                             f"{redact.redact(str(exc))}") from None
    cpuinfo_path = os.path.join(procfs_root, "cpuinfo")
    # The first processor's block (vendor, model, flags) is within the first 64 KiB.
    cpuinfo = _read(cpuinfo_path, 65536)
    if cpuinfo is None:
        raise DiscoveryError(f"{cpuinfo_path} is missing: procfs_root {procfs_root} is not a procfs tree")
    cpu_vendor, cpu_model, virt, hypervisor = parse_cpuinfo(cpuinfo)

    entries = _listdir(devices_dir)
    devices = []
    groups: dict[str, list[str]] = {}
    for address in entries:
        if not pci_address.is_address(address.lower()):
            raise DiscoveryError(f"{os.path.join(devices_dir, address)}: {address!r} is not a PCI address like 0000:27:00.0")
        dev = read_device(devices_dir, address)
        if resolve_alias is not None and dev["driver"] == "vfio-pci":
            alias = _read(os.path.join(devices_dir, address, "modalias"))
            dev["host_modules"] = sorted(m for m in resolve_alias(alias) if m != "vfio_pci") if alias else []
        devices.append(dev)
        if dev["iommu_group"] is not None:
            groups.setdefault(dev["iommu_group"], []).append(dev["address"])
    add_names(devices_dir, devices, database)

    groups_dir = os.path.join(sysfs_root, "kernel", "iommu_groups")
    listed_groups = _listdir(groups_dir)
    units = _listdir(os.path.join(sysfs_root, "class", "iommu"))
    # Names only (the tables are readable by root alone): whether a DMAR or IVRS table is there.
    tables_dir = os.path.join(sysfs_root, "firmware", "acpi", "tables")
    tables = _listdir(tables_dir) if _lexists(tables_dir) and os.path.isdir(tables_dir) else None
    return {
        "iommu_enabled": bool(listed_groups) or bool(groups),
        "iommu_units": units,
        "cpu_vendor": cpu_vendor,
        "cpu_model": cpu_model,
        "cpu_phys_bits": parse_address_bits(cpuinfo),
        "virtualization": virt,
        "hypervisor": hypervisor,
        "kernel_cmdline": kernel_cmdline,
        "efi": os.path.isdir(os.path.join(sysfs_root, "firmware", "efi")),
        "iommu_firmware": iommu_firmware_from_tables(tables),
        "devices": devices,
        "iommu_groups": {g: sorted(a) for g, a in sorted(groups.items(), key=lambda kv: _group_key(kv[0]))},
        "pci_ids": database.path if database is not None else None,
    }


def _group_key(group: str):
    return (0, int(group), "") if group.isdigit() else (1, 0, group)


def _alias_resolver(module):
    """The running kernel's modules for a modalias, as modprobe resolves it (kmod's own rules); none without kmod."""
    modprobe = module.get_bin_path("modprobe")
    if not modprobe:
        return lambda alias: []

    def resolve(alias):
        rc, out, _err = module.run_command([modprobe, "--resolve-alias", alias], environ_update={"LC_ALL": "C"})
        return [line.strip().replace("-", "_") for line in out.splitlines() if line.strip()] if rc == 0 else []
    return resolve


def main():
    module = AnsibleModule(
        argument_spec={
            "pci_ids_path": {"type": "path"},
            "procfs_root": {"type": "path", "default": "/proc"},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    path = module.params["pci_ids_path"] or pci_ids.find()
    try:
        database = pci_ids.load(path) if path else None
        facts = discover(module.params["sysfs_root"], module.params["procfs_root"], database,
                         _alias_resolver(module) if os.path.realpath(module.params["sysfs_root"]) == "/sys" else None)
    except (DiscoveryError, pci_ids.PciIdsError) as exc:
        module.fail_json(msg=f"pci_passthrough_facts: {exc}")
    module.exit_json(changed=False, ansible_facts={"pci_passthrough": facts})


if __name__ == "__main__":
    main()
