#!/usr/bin/env python3
"""Simulate the reboot of a sandbox host: rebuild ROOT/sys and ROOT/proc as the kernel would show them
after booting with the configuration the role wrote under ROOT.

Usage: simulate_reboot.py FIXTURE ROOT

For sandbox hosts only (the passthrough_host role's passthrough_host_reboot_command in the molecule
scenarios, the fault tests and the demo inventory); never on a real host. What it
models, from the files under ROOT and the fixture (fixtures/hosts/*.yml format, scripts/mock_sysfs.py):

- the kernel command line: what the boot loader reads, i.e. what the boot-config tool generated
  (tests/standins/simulate_boot_config.py in the sandboxes): the first menu entry's `linux` line of
  ROOT/boot/grub/grub.cfg, or the first kernel entry of ROOT/boot/loader/entries (BLS, as grubby sorts
  them: highest version first). Without either, the boot configuration was never generated and the host
  boots with the line it booted with before (ROOT/proc/cmdline): editing /etc/default/grub alone changes
  nothing at boot;
- the IOMMU: on AMD when the firmware has it on (fixture `iommu`, or `firmware.iommu`) and no
  amd_iommu=off/iommu=off; on Intel when the firmware has VT-d (fixture `firmware.iommu`, default true)
  and intel_iommu=on is given (or the fixture already had it on) and no intel_iommu=off/iommu=off;
- the drivers: vfio-pci for the addresses in the bind script and the IDs of vfio-pci.ids= or
  `options vfio-pci ids=` (vfio-pci cannot bind without an IOMMU: no driver then); no driver for a
  device whose driver is blacklisted (modprobe.blacklist= or `blacklist` in ROOT/etc/modprobe.d);
  the fixture's driver otherwise.

Each call writes a new boot id (ROOT/proc/sys/kernel/random/boot_id) and appends the new command line to
ROOT/.simulated-reboots (tests count reboots with it).
"""

import glob
import importlib.util
import os
import re
import sys
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("mock_sysfs", os.path.join(REPO, "scripts", "mock_sysfs.py"))
mock_sysfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mock_sysfs)

# Kernel driver name -> module name, where they differ.
MODULE_OF = {"xhci_hcd": "xhci_pci", "nvidia-gpu": "i2c_nvidia_gpu"}


def generated_cmdline(root):
    """The kernel command line the boot loader will pass, from the generated configuration."""
    cfg = os.path.join(root, "boot", "grub", "grub.cfg")
    if os.path.exists(cfg):
        in_entry = False
        with open(cfg, encoding="utf-8") as handle:
            for line in handle:
                words = line.split()
                if words[:1] == ["menuentry"]:
                    in_entry = True
                elif in_entry and words[:1] == ["linux"] and len(words) > 1:
                    return ["BOOT_IMAGE=" + words[1]] + words[2:]
        raise SystemExit(f"{cfg} has no menu entry with a linux line")
    entries = sorted(glob.glob(os.path.join(root, "boot", "loader", "entries", "*.conf")), reverse=True)
    for conf in entries:
        fields = {}
        with open(conf, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.strip().partition(" ")
                fields.setdefault(key, value)
        if "rescue" in fields.get("version", "") or "linux" not in fields:
            continue
        options = [w for w in fields.get("options", "").split() if not w.startswith("$")]
        return ["BOOT_IMAGE=(hd0,gpt2)" + fields["linux"]] + options
    with open(os.path.join(root, "proc", "cmdline"), encoding="utf-8") as handle:
        return handle.read().split()


def modprobe_conf(root):
    ids, blacklist = set(), set()
    for conf in sorted(glob.glob(os.path.join(root, "etc", "modprobe.d", "*.conf"))):
        with open(conf, encoding="utf-8") as handle:
            for line in handle:
                words = line.split()
                if len(words) >= 3 and words[:2] == ["options", "vfio-pci"]:
                    for opt in words[2:]:
                        if opt.startswith("ids="):
                            ids.update(opt[4:].split(","))
                elif len(words) == 2 and words[0] == "blacklist":
                    blacklist.add(words[1].replace("-", "_"))
    return ids, blacklist


def bind_addresses(root):
    path = os.path.join(root, "usr", "local", "sbin", "vfio-pci-bind")
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as handle:
        match = re.search(r"^for dev in (.*); do$", handle.read(), re.M)
    return set(match.group(1).split()) if match else set()


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    fixture_path, root = argv[1], argv[2]
    fixture = mock_sysfs.load_fixture(fixture_path)
    cmdline = generated_cmdline(root)
    args = [t for t in cmdline if not t.startswith(("BOOT_IMAGE=", "root=")) and t != "ro"]

    def has(arg):
        return any(a.replace("-", "_") == arg.replace("-", "_") for a in args)

    vendor = str((fixture.get("cpu") or {}).get("vendor", "amd")).lower()
    firmware_iommu = (fixture.get("firmware") or {}).get("iommu", True if vendor == "intel" else fixture.get("iommu", True))
    if vendor == "amd":
        iommu = bool(firmware_iommu) and not (has("amd_iommu=off") or has("iommu=off"))
    else:
        iommu = bool(firmware_iommu) and (has("intel_iommu=on") or bool(fixture.get("iommu")))
        iommu = iommu and not (has("intel_iommu=off") or has("iommu=off"))

    ids, blacklist = modprobe_conf(root)
    for arg in args:
        key, _, value = arg.partition("=")
        key = key.replace("-", "_")
        if key == "vfio_pci.ids":
            ids.update(value.split(","))
        elif key in ("modprobe.blacklist", "module_blacklist"):
            blacklist.update(v.replace("-", "_") for v in value.split(","))
    by_address = bind_addresses(root)

    drivers = {}
    for dev in fixture.get("devices") or []:
        address = str(dev["address"]).lower()
        if str(dev.get("class", "")).startswith("0604"):
            continue
        wants_vfio = address in by_address or str(dev["id"]).lower() in ids
        driver = dev.get("driver")
        if wants_vfio:
            driver = "vfio-pci" if iommu else None
        elif driver and MODULE_OF.get(driver, driver).replace("-", "_") in blacklist:
            driver = None
        drivers[address] = driver

    mock_sysfs.build_tree(fixture, root, iommu=iommu, cmdline=" ".join(cmdline), drivers=drivers)
    boot_id = os.path.join(root, "proc", "sys", "kernel", "random", "boot_id")
    os.makedirs(os.path.dirname(boot_id), exist_ok=True)
    with open(boot_id, "w", encoding="utf-8") as handle:
        handle.write(str(uuid.uuid4()) + "\n")
    with open(os.path.join(root, ".simulated-reboots"), "a", encoding="utf-8") as handle:
        handle.write(" ".join(cmdline) + "\n")
    print(f"simulated reboot of {root}: iommu {'on' if iommu else 'off'}, cmdline {' '.join(cmdline)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
