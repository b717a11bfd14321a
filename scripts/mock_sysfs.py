#!/usr/bin/env python3
"""Build, capture and describe sysfs/procfs trees laid out exactly as the Linux kernel lays them out.

The same discovery code reads a real host's /sys and these trees, so the builder reproduces the
kernel's layout, symlinks included:

    sys/devices/pci0000:20/0000:20:03.1/0000:27:00.0/{vendor,device,class,numa_node,...}
    sys/devices/.../0000:27:00.0/driver      -> ../../../../bus/pci/drivers/nvidia
    sys/devices/.../0000:27:00.0/iommu_group -> ../../../../kernel/iommu_groups/19
    sys/devices/.../0000:27:00.0/subsystem   -> ../../../../bus/pci
    sys/bus/pci/devices/0000:27:00.0         -> ../../../devices/pci0000:20/0000:20:03.1/0000:27:00.0
    sys/bus/pci/drivers/nvidia/0000:27:00.0  -> ../../../../devices/pci0000:20/0000:20:03.1/0000:27:00.0
    sys/kernel/iommu_groups/19/devices/0000:27:00.0 -> ../../../../devices/pci0000:20/...
    sys/class/iommu/ivhd0 -> ../../devices/pci0000:00/0000:00:00.2/iommu/ivhd0   (AMD)
    sys/class/iommu/dmar0 -> ../../devices/virtual/iommu/dmar0                   (Intel)
    proc/cmdline, proc/cpuinfo, sys/firmware/efi/

Fixture description (YAML, see fixtures/hosts/*.yml):

    cpu: {vendor: amd, model: "AMD EPYC 7352 24-Core Processor", virtualization: true, count: 2}
                                 # hypervisor: true adds the CPU's hypervisor flag (a virtual machine)
    cmdline: "BOOT_IMAGE=/boot/vmlinuz root=UUID=... ro quiet"
    efi: true
    iommu: true                  # false: the kernel has not enabled the IOMMU (no groups at all)
    acpi_tables: [APIC, DSDT, FACP, IVRS]   # names in sys/firmware/acpi/tables (empty files, as the capture tool
                                 # copies them): DMAR (VT-d) or IVRS (AMD-Vi) when the firmware offers an IOMMU;
                                 # without the key there is no tables directory (unknown, as in older captures)
    files: {etc/default/grub: "..."}   # any other files of the host, relative to the root
    devices:
      - {address: "0000:20:03.1", id: "1022:1483", class: "060400", group: 19}
      - {address: "0000:27:00.0", id: "10de:1db4", class: "030200", parent: "0000:20:03.1",
         group: 19, driver: nvidia, numa: 0, sriov_totalvfs: 16, boot_vga: false,
         bars: {0: 16M, 1: 16G pref64, 3: 32M pref64}, reset_method: bus}

    A device's ``bars`` (BAR index 0-5, 6 for the expansion ROM, to "SIZE [KIND]": a size in bytes or with K, M, G
    or T, and mem32 (the default), mem64, pref32, pref64, io or rom, as lspci -v describes each region) give it the
    kernel's ``resource`` file; without ``bars`` it has none, as in a capture taken before the capture tool copied
    it (discovery then reports null windows and reset methods). ``reset_method`` (the kernel's names, e.g.
    "flr bus") gives it the ``reset_method`` file and the write-only ``reset`` file, as kernels from 5.15 show a
    device that some reset works on; ``reset: true`` alone gives ``reset`` only (an older kernel); neither: the
    kernel has no usable reset for it (no file).

Commands:
    mock_sysfs.py build FIXTURE ROOT [--set-driver ADDR=DRIVER ...] [--iommu on|off] [--cmdline ...]
    mock_sysfs.py synthetic ROOT --devices N        (benchmark tree)
    mock_sysfs.py capture ARCHIVE [--sysfs /sys] [--procfs /proc]   (read-only on the source)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tarfile
import tempfile

# The project's PCI identifier rules (the collection's plugins/module_utils/pci/address.py, pure Python), as discovery
# uses them, for building trees from fixtures. `build` and `synthetic` need the collection importable: the callers
# put the directory holding ansible_collections/ on PYTHONPATH (pytest's pythonpath does it for the tests).
# playbooks/capture.yml copies this file alone to a host, where only `capture` runs: it needs no identifier rules
# there (and finds neither the collection nor, maybe, Ansible).
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections")
try:
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
except ImportError:  # pragma: no cover - on a captured host
    pci_address = None

CLASS_RE = re.compile(r"^[0-9a-f]{6}$")
SIZE_RE = re.compile(r"^(\d+)([KMGT]?)$")
RESET_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# The flags the kernel shows in a BAR's line of `resource` (include/linux/ioport.h's IORESOURCE_* bits with the
# BAR's own low bits, as __pci_read_base sets them), by the kind lspci -v names: memory 32/64-bit, prefetchable or
# not, I/O ports, the expansion ROM (disabled).
BAR_FLAGS = {"mem32": 0x00040200, "mem64": 0x00140204, "pref32": 0x00042208, "pref64": 0x0014220c,
             "io": 0x00040101, "rom": 0x00046200}
# Lines of `resource`: an endpoint's BARs, ROM and SR-IOV VF BARs (PCI_BRIDGE_RESOURCES with CONFIG_PCI_IOV); a
# bridge's also its four windows (DEVICE_COUNT_RESOURCE).
RESOURCE_LINES = {False: 13, True: 17}

CPU_FLAGS_BASE = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2"
CPU_VENDOR_IDS = {"amd": "AuthenticAMD", "intel": "GenuineIntel"}
# Driver name (bus/pci/drivers/<name>) -> the module providing it, where they differ; vfio-pci is a
# module named vfio_pci. Drivers mapped to None are built into the kernel (no module link).
DRIVER_MODULES = {"xhci_hcd": "xhci_pci", "nvidia-gpu": "i2c_nvidia_gpu", "bochs-drm": "bochs", "pcieport": None}


class FixtureError(ValueError):
    """A fixture description that cannot be built; the message names the entry and the fix."""


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _symlink(target_abs: str, link_path: str) -> None:
    """Create link_path pointing at target_abs with a relative target, as sysfs does."""
    os.makedirs(os.path.dirname(link_path), exist_ok=True)
    rel = os.path.relpath(target_abs, os.path.dirname(link_path))
    if os.path.lexists(link_path):
        os.unlink(link_path)
    os.symlink(rel, link_path)


def _validate_device(dev: dict, index: int) -> dict:
    where = f"devices[{index}]"
    if not isinstance(dev, dict):
        raise FixtureError(f"{where}: expected a mapping, got {dev!r}")
    address = str(dev.get("address", "")).lower()
    if not pci_address.is_address(address):
        raise FixtureError(f"{where}: address {dev.get('address')!r} is not of the form 0000:27:00.0")
    ident = str(dev.get("id", "")).lower()
    if not pci_address.is_model_id(ident):
        raise FixtureError(f"{where} ({address}): id {dev.get('id')!r} is not vendor:device in hex, e.g. 10de:1db4")
    klass = str(dev.get("class", "")).lower().removeprefix("0x")
    if not CLASS_RE.match(klass):
        raise FixtureError(f"{where} ({address}): class {dev.get('class')!r} is not 6 hex digits, e.g. 030200")
    out = dict(dev)
    out.update(address=address, id=ident, **{"class": klass})
    if dev.get("bars") is not None:
        out["bars"] = _bars(dev["bars"], f"{where} ({address})")
    reset = dev.get("reset_method")
    if reset is not None and not (isinstance(reset, str) and all(RESET_RE.match(n) for n in reset.split())):
        raise FixtureError(f"{where} ({address}): reset_method {reset!r} is not the kernel's method names, e.g. "
                           "'flr bus'")
    return out


def _bars(bars, where: str) -> dict:
    """A fixture's ``bars`` as ``{index: (size, kind)}``, checked."""
    if not isinstance(bars, dict):
        raise FixtureError(f"{where}: bars must map a BAR index to 'SIZE [KIND]', e.g. {{1: 16G pref64}}")
    out = {}
    for index, text in bars.items():
        words = str(text).split()
        kind = words[1] if len(words) == 2 else "rom" if index == 6 and len(words) == 1 else "mem32"
        match = SIZE_RE.match(words[0]) if 1 <= len(words) <= 2 else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= 6 or not match \
                or kind not in BAR_FLAGS or (index == 6) != (kind == "rom"):
            raise FixtureError(f"{where}: bars {index!r}: {text!r} is not 'SIZE [KIND]' for a BAR 0-5 (KIND one of "
                               "mem32, mem64, pref32, pref64, io) or the ROM 6 (rom), e.g. 1: 16G pref64")
        size = int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[match.group(2)]
        if size <= 0 or size & (size - 1):
            raise FixtureError(f"{where}: bars {index}: {text!r}: a BAR's size is a power of two")
        out[index] = (size, kind)
    return out


def _resource_text(bars: dict, bridge: bool, next_free: dict) -> str:
    """The kernel's ``resource`` file for these BARs: each placed at the next free address of its kind, aligned to
    its size (``next_free`` holds those addresses for the whole tree)."""
    lines = ["0x%016x 0x%016x 0x%016x" % (0, 0, 0)] * RESOURCE_LINES[bridge]
    for index, (size, kind) in sorted(bars.items()):
        space = "io" if kind == "io" else "high" if kind in ("mem64", "pref64") else "low"
        start = -(-next_free[space] // size) * size
        next_free[space] = start + size
        lines[index] = "0x%016x 0x%016x 0x%016x" % (start, start + size - 1, BAR_FLAGS[kind])
    return "\n".join(lines) + "\n"


def build_tree(fixture: dict, root: str, *, iommu: bool | None = None, cmdline: str | None = None,
               drivers: dict | None = None) -> None:
    """Write the sysfs/procfs tree (and extra files) a fixture describes under root.

    ``iommu``, ``cmdline`` and ``drivers`` override the fixture (used to build the state after a
    simulated reboot). An existing ``root/sys`` and ``root/proc`` are replaced; other files under root
    (a sandbox host's /etc) are left alone unless the fixture lists them and they do not exist yet.
    """
    if not isinstance(fixture, dict):
        raise FixtureError("the fixture must be a mapping with at least a 'devices' list")
    devices = [_validate_device(d, i) for i, d in enumerate(fixture.get("devices") or [])]
    by_addr = {}
    for dev in devices:
        if dev["address"] in by_addr:
            raise FixtureError(f"device {dev['address']} is listed twice")
        by_addr[dev["address"]] = dev
    iommu_on = bool(fixture.get("iommu", True)) if iommu is None else iommu
    cpu = fixture.get("cpu") or {}
    cpu_vendor = str(cpu.get("vendor", "amd")).lower()
    if cpu_vendor not in CPU_VENDOR_IDS:
        raise FixtureError(f"cpu.vendor {cpu_vendor!r} must be amd or intel")
    drivers = {k.lower(): v for k, v in (drivers or {}).items()}

    sysfs = os.path.join(root, "sys")
    procfs = os.path.join(root, "proc")
    for path in (sysfs, procfs):
        if os.path.lexists(path):
            shutil.rmtree(path)

    # Device directories nest under their parent bridge, below the root bus directory.
    dirs: dict[str, str] = {}

    def device_dir(address: str, trail: tuple = ()) -> str:
        if address in dirs:
            return dirs[address]
        if address in trail:
            raise FixtureError(f"device {address}: its parent chain loops ({' -> '.join(trail + (address,))})")
        dev = by_addr[address]
        parent = dev.get("parent")
        if parent:
            parent = str(parent).lower()
            if parent not in by_addr:
                raise FixtureError(f"device {address}: parent {parent} is not in the fixture's device list")
            base = device_dir(parent, trail + (address,))
        else:
            base = os.path.join(sysfs, "devices", f"pci{address[:7]}")
        dirs[address] = os.path.join(base, address)
        return dirs[address]

    parents = {str(d.get("parent")).lower() for d in devices if d.get("parent")}
    # Where the BARs of the tree go: I/O ports, the 32-bit window below 4 GiB, the 64-bit window at 2 TiB.
    next_free = {"io": 0x1000, "low": 0xc0000000, "high": 0x20000000000}
    bus_pci = os.path.join(sysfs, "bus", "pci")
    groups_dir = os.path.join(sysfs, "kernel", "iommu_groups")
    os.makedirs(os.path.join(bus_pci, "devices"), exist_ok=True)
    os.makedirs(os.path.join(bus_pci, "drivers"), exist_ok=True)
    os.makedirs(groups_dir, exist_ok=True)
    os.makedirs(os.path.join(sysfs, "class", "iommu"), exist_ok=True)

    for dev in devices:
        address = dev["address"]
        ddir = device_dir(address)
        vendor, product = dev["id"].split(":")
        _write(os.path.join(ddir, "vendor"), f"0x{vendor}\n")
        _write(os.path.join(ddir, "device"), f"0x{product}\n")
        _write(os.path.join(ddir, "class"), f"0x{dev['class']}\n")
        sub = str(dev.get("subsystem_id", dev["id"])).lower().split(":")
        _write(os.path.join(ddir, "subsystem_vendor"), f"0x{sub[0]}\n")
        _write(os.path.join(ddir, "subsystem_device"), f"0x{sub[1]}\n")
        numa = dev.get("numa", -1)
        _write(os.path.join(ddir, "numa_node"), f"{numa}\n")
        _write(os.path.join(ddir, "driver_override"), f"{dev.get('driver_override') or '(null)'}\n")
        _write(os.path.join(ddir, "enable"), "1\n")
        if dev["class"].startswith("0300"):
            _write(os.path.join(ddir, "boot_vga"), "1\n" if dev.get("boot_vga") else "0\n")
        if dev.get("sriov_totalvfs") is not None:
            _write(os.path.join(ddir, "sriov_totalvfs"), f"{int(dev['sriov_totalvfs'])}\n")
            _write(os.path.join(ddir, "sriov_numvfs"), "0\n")
        if dev.get("bars") is not None:
            bridge = address in parents or dev["class"][:4] in ("0604", "0609")
            _write(os.path.join(ddir, "resource"), _resource_text(dev["bars"], bridge, next_free))
        if dev.get("reset_method"):
            _write(os.path.join(ddir, "reset_method"), " ".join(dev["reset_method"].split()) + "\n")
        if dev.get("reset_method") or dev.get("reset"):
            _write(os.path.join(ddir, "reset"), "")
            os.chmod(os.path.join(ddir, "reset"), 0o200)  # write-only, as the kernel's: writing it resets
        _symlink(bus_pci, os.path.join(ddir, "subsystem"))
        _symlink(ddir, os.path.join(bus_pci, "devices", address))
        driver = drivers.get(address, dev.get("driver"))
        if driver:
            drv_dir = os.path.join(bus_pci, "drivers", driver)
            os.makedirs(drv_dir, exist_ok=True)
            module = DRIVER_MODULES.get(driver, driver.replace("-", "_"))
            if module and not os.path.lexists(os.path.join(drv_dir, "module")):
                mod_dir = os.path.join(sysfs, "module", module)
                os.makedirs(mod_dir, exist_ok=True)
                _symlink(mod_dir, os.path.join(drv_dir, "module"))
            _symlink(drv_dir, os.path.join(ddir, "driver"))
            _symlink(ddir, os.path.join(drv_dir, address))
        group = dev.get("group")
        if iommu_on and group is not None:
            gdir = os.path.join(groups_dir, str(group))
            os.makedirs(os.path.join(gdir, "devices"), exist_ok=True)
            _write(os.path.join(gdir, "type"), "DMA\n")
            _symlink(gdir, os.path.join(ddir, "iommu_group"))
            _symlink(ddir, os.path.join(gdir, "devices", address))

    if iommu_on:
        if cpu_vendor == "amd":
            unit = os.path.join(sysfs, "devices", "pci0000:00", "0000:00:00.2", "iommu", "ivhd0")
            os.makedirs(unit, exist_ok=True)
            _symlink(unit, os.path.join(sysfs, "class", "iommu", "ivhd0"))
        else:
            unit = os.path.join(sysfs, "devices", "virtual", "iommu", "dmar0")
            os.makedirs(unit, exist_ok=True)
            _symlink(unit, os.path.join(sysfs, "class", "iommu", "dmar0"))

    if fixture.get("efi", True):
        _write(os.path.join(sysfs, "firmware", "efi", "fw_platform_size"), "64\n")
    else:
        os.makedirs(os.path.join(sysfs, "firmware"), exist_ok=True)
    tables = fixture.get("acpi_tables")
    if tables is not None:
        if not isinstance(tables, list) or not all(isinstance(t, str) and t.isalnum() and len(t) <= 8 for t in tables):
            raise FixtureError(f"acpi_tables must be a list of ACPI table names like [APIC, DMAR], got {tables!r}")
        os.makedirs(os.path.join(sysfs, "firmware", "acpi", "tables"), exist_ok=True)
        for name in tables:
            _write(os.path.join(sysfs, "firmware", "acpi", "tables", name), "")

    _write(os.path.join(procfs, "cmdline"), (cmdline if cmdline is not None else str(fixture.get("cmdline", ""))).strip() + "\n")
    _write(os.path.join(procfs, "cpuinfo"), _cpuinfo(cpu, cpu_vendor))

    for rel, content in (fixture.get("files") or {}).items():
        target = os.path.join(root, rel)
        if not os.path.exists(target):
            _write(target, content)


def _cpuinfo(cpu: dict, vendor: str) -> str:
    flags = CPU_FLAGS_BASE
    if cpu.get("virtualization", True):
        flags += " svm" if vendor == "amd" else " vmx"
    if cpu.get("hypervisor", False):
        flags += " hypervisor"
    flags += " " + " ".join(cpu.get("extra_flags", []))
    model = cpu.get("model", "AMD EPYC 7352 24-Core Processor" if vendor == "amd" else "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz")
    blocks = []
    for n in range(int(cpu.get("count", 2))):
        blocks.append(
            f"processor\t: {n}\nvendor_id\t: {CPU_VENDOR_IDS[vendor]}\ncpu family\t: 23\n"
            f"model name\t: {model}\nflags\t\t: {flags.strip()}\n"
        )
    return "\n".join(blocks) + "\n"


def synthetic_fixture(count: int) -> dict:
    """A host with ``count`` PCI functions: root ports, each with a GPU, its audio function and a NIC.

    200 root ports per PCI domain (slot/function pairs on bus 00), so large counts spread over domains.
    """
    devices: list[dict] = []
    i = 0
    while len(devices) < count:
        domain, index = divmod(i, 200)
        bus = index + 1
        port = f"{domain:04x}:00:{index // 8:02x}.{index % 8}"
        group = i * 2
        devices.append({"address": port, "id": "1022:1483", "class": "060400", "group": group})
        for fn, ident, klass, driver, grp in (
            (0, "10de:1db4", "030200", "nvidia", group),
            (1, "10de:10f8", "040300", "snd_hda_intel", group),
            (2, "8086:1533", "020000", "igb", group + 1),
        ):
            devices.append({"address": f"{domain:04x}:{bus:02x}:00.{fn}", "id": ident, "class": klass,
                            "parent": port, "group": grp, "driver": driver, "numa": i % 2})
        i += 1
    return {"cpu": {"vendor": "amd"}, "cmdline": "ro quiet", "efi": True, "iommu": True, "devices": devices[:count]}


# --------------------------------------------------------------------------------------------------
# Capture: copy the parts of a real host's /sys and /proc that discovery reads (read-only there).

def capture(archive: str, sysfs: str = "/sys", procfs: str = "/proc") -> int:
    """Copy what discovery reads from sysfs/procfs into a tar.gz with the kernel's layout.

    Regular attribute files are copied by content, symlinks are recreated as symlinks (a raw tar of
    /sys fails: its files report sizes that are not their content). Returns the number of devices.
    """
    attrs = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node",
             "boot_vga", "sriov_totalvfs", "sriov_numvfs", "driver_override", "enable", "resource", "reset_method")
    links = ("driver", "iommu_group", "subsystem")
    bus_devices = os.path.join(sysfs, "bus", "pci", "devices")
    if not os.path.isdir(bus_devices):
        raise FixtureError(f"{bus_devices} does not exist: {sysfs} is not a sysfs mount")
    with tempfile.TemporaryDirectory() as tmp:
        out_sys = os.path.join(tmp, "sys")
        count = 0
        for address in sorted(os.listdir(bus_devices)):
            link = os.path.join(bus_devices, address)
            real = os.path.realpath(link)
            rel_dev = os.path.relpath(real, sysfs)
            ddir = os.path.join(out_sys, rel_dev)
            os.makedirs(ddir, exist_ok=True)
            _copy_link(link, os.path.join(out_sys, "bus", "pci", "devices", address))
            for name in attrs:
                src = os.path.join(real, name)
                try:
                    with open(src, encoding="utf-8", errors="replace") as handle:
                        _write(os.path.join(ddir, name), handle.read())
                except OSError:
                    continue
            # `reset` is write-only (reading it is refused, writing it resets the device): its presence is copied,
            # as an empty file that the archive marks write-only like the kernel's.
            if os.path.exists(os.path.join(real, "reset")):
                _write(os.path.join(ddir, "reset"), "")
            for name in links:
                src = os.path.join(real, name)
                if os.path.islink(src):
                    _copy_link(src, os.path.join(ddir, name))
                    if name == "driver":
                        drv = os.path.realpath(src)
                        out_drv = os.path.join(out_sys, os.path.relpath(drv, sysfs))
                        _copy_link(os.path.join(drv, address), os.path.join(out_drv, address))
                        module = os.path.join(drv, "module")
                        if os.path.islink(module) and not os.path.lexists(os.path.join(out_drv, "module")):
                            os.makedirs(os.path.join(out_sys, os.path.relpath(os.path.realpath(module), sysfs)), exist_ok=True)
                            _copy_link(module, os.path.join(out_drv, "module"))
            count += 1
        groups = os.path.join(sysfs, "kernel", "iommu_groups")
        os.makedirs(os.path.join(out_sys, "kernel", "iommu_groups"), exist_ok=True)
        if os.path.isdir(groups):
            for group in os.listdir(groups):
                gdev = os.path.join(groups, group, "devices")
                for address in os.listdir(gdev) if os.path.isdir(gdev) else []:
                    _copy_link(os.path.join(gdev, address), os.path.join(out_sys, "kernel", "iommu_groups", group, "devices", address))
        class_iommu = os.path.join(sysfs, "class", "iommu")
        os.makedirs(os.path.join(out_sys, "class", "iommu"), exist_ok=True)
        if os.path.isdir(class_iommu):
            for unit in os.listdir(class_iommu):
                src = os.path.join(class_iommu, unit)
                os.makedirs(os.path.join(out_sys, os.path.relpath(os.path.realpath(src), sysfs)), exist_ok=True)
                _copy_link(src, os.path.join(out_sys, "class", "iommu", unit))
        if os.path.isdir(os.path.join(sysfs, "firmware", "efi")):
            os.makedirs(os.path.join(out_sys, "firmware", "efi"), exist_ok=True)
        # The firmware's ACPI tables by name only (DMAR: VT-d, IVRS: AMD-Vi; their presence says whether the firmware
        # offers an IOMMU at all): empty files, as the tables themselves are readable by root alone and never needed.
        tables = os.path.join(sysfs, "firmware", "acpi", "tables")
        if os.path.isdir(tables):
            out_tables = os.path.join(out_sys, "firmware", "acpi", "tables")
            os.makedirs(out_tables, exist_ok=True)
            for name in sorted(os.listdir(tables)):
                if os.path.isfile(os.path.join(tables, name)) and not os.path.islink(os.path.join(tables, name)):
                    _write(os.path.join(out_tables, name), "")
        for name in ("cmdline", "cpuinfo"):
            with open(os.path.join(procfs, name), encoding="utf-8", errors="replace") as handle:
                _write(os.path.join(tmp, "proc", name), handle.read())
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(os.path.join(tmp, "sys"), arcname="sys", filter=_write_only_reset)
            tar.add(os.path.join(tmp, "proc"), arcname="proc")
    return count


def _write_only_reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A device's ``reset`` goes into the archive write-only (0200), as sysfs has it."""
    if info.isfile() and os.path.basename(info.name) == "reset":
        info.mode = 0o200
    return info


def _copy_link(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    os.symlink(os.readlink(src), dst)


def load_fixture(path: str) -> dict:
    import yaml  # PyYAML comes with ansible-core in the toolkit's venv

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise FixtureError(f"cannot read fixture {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise FixtureError(f"fixture {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise FixtureError(f"fixture {path} must be a mapping with a 'devices' list")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write a fixture's tree under ROOT (ROOT/sys, ROOT/proc, ROOT/etc...)")
    b.add_argument("fixture")
    b.add_argument("root")
    b.add_argument("--iommu", choices=["on", "off"], help="override the fixture's IOMMU state")
    b.add_argument("--cmdline", help="override the kernel command line")
    b.add_argument("--set-driver", action="append", default=[], metavar="ADDR=DRIVER",
                   help="override a device's driver (empty DRIVER: no driver)")
    s = sub.add_parser("synthetic", help="write a synthetic tree with N PCI functions (benchmarks)")
    s.add_argument("root")
    s.add_argument("--devices", type=int, default=5000)
    c = sub.add_parser("capture", help="copy what discovery reads from a real /sys and /proc into ARCHIVE (tar.gz)")
    c.add_argument("archive")
    c.add_argument("--sysfs", default="/sys")
    c.add_argument("--procfs", default="/proc")
    args = parser.parse_args(argv)
    if args.command != "capture" and pci_address is None:
        print(f"mock_sysfs: {args.command} needs the collection open_gpu_cloud.toolkit importable: run it with "
              f"PYTHONPATH={COLLECTIONS}", file=sys.stderr)
        return 2
    try:
        if args.command == "build":
            drivers = {}
            for item in args.set_driver:
                addr, sep, drv = item.partition("=")
                if not sep:
                    raise FixtureError(f"--set-driver {item!r}: expected ADDR=DRIVER")
                drivers[addr] = drv or None
            iommu = None if args.iommu is None else args.iommu == "on"
            build_tree(load_fixture(args.fixture), args.root, iommu=iommu, cmdline=args.cmdline, drivers=drivers)
        elif args.command == "synthetic":
            build_tree(synthetic_fixture(args.devices), args.root)
        else:
            n = capture(args.archive, args.sysfs, args.procfs)
            print(f"captured {n} PCI functions into {args.archive}")
    except FixtureError as exc:
        print(f"mock_sysfs: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
