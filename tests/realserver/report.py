#!/usr/bin/python3
"""What the test server shows of the host phase, as one JSON document on stdout: run as root on the server
(python3's standard library only), by the scenario's prepare step and its tests, in one SSH session.

    report.py [--initramfs] [--journal-boots N]

- ``boot_id`` (as the journal writes it, without dashes), ``cmdline`` (/proc/cmdline, split on blanks);
- ``devices``: every PCI function with its ID, class, IOMMU group, driver (or null) and driver_override;
- ``files``: the files the host phase reads or writes (GRUB defaults and drop-ins, the generated grub.cfg, modprobe
  and module-loading files, the bind script and unit, the initramfs modules and hooks, the state file);
- ``boots``: the boot ids the journal knows, oldest first; ``journal``: for the last N of them (default 2), the
  journal lines that matter here (kernel lines naming a PCI function, vfio, the start of the initramfs and of
  systemd, SSH logins), with their monotonic time;
- ``initramfs`` (with --initramfs): what lsinitramfs lists of vfio and modprobe in the current initramfs.
"""

import glob
import json
import os
import re
import subprocess
import sys

FILES = ["/etc/default/grub", "/etc/default/grub.d/*.cfg", "/boot/grub/grub.cfg", "/etc/modprobe.d/*.conf",
         "/etc/modules-load.d/*.conf", "/etc/initramfs-tools/modules", "/etc/initramfs-tools/hooks/*",
         "/usr/share/initramfs-tools/hooks/*broken*", "/usr/local/sbin/vfio-pci-bind",
         "/etc/systemd/system/vfio-pci-bind.service", "/var/lib/open-gpu-cloud/passthrough_host.json"]
# Programs of the server (systemd's and initramfs-tools'), not of the machine that runs the tests.
JOURNALCTL, LSINITRAMFS = "journalctl", "lsinitramfs"
JOURNAL_LINE = re.compile(r"\b0000:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]\b|vfio|Run /init as init process|"
                          r"systemd\[1\]: systemd [0-9]+|Accepted publickey|Reached target.*Multi-User")


def _run(args):
    return subprocess.run(args, capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C")).stdout


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def devices():
    out = {}
    for path in sorted(glob.glob("/sys/bus/pci/devices/*")):
        address = os.path.basename(path)
        driver, group = os.path.join(path, "driver"), os.path.join(path, "iommu_group")
        override = (_read(os.path.join(path, "driver_override")) or "").strip()
        out[address] = {
            "id": f"{(_read(os.path.join(path, 'vendor')) or '')[2:6]}:"
                  f"{(_read(os.path.join(path, 'device')) or '')[2:6]}",
            "class": (_read(os.path.join(path, "class")) or "")[2:8],
            "driver": os.path.basename(os.readlink(driver)) if os.path.islink(driver) else None,
            "driver_override": None if override in ("", "(null)") else override,
            "iommu_group": os.path.basename(os.readlink(group)) if os.path.islink(group) else None,
        }
    return out


def boots():
    ids = []
    for line in _run([JOURNALCTL, "--list-boots", "--no-pager"]).splitlines():
        words = line.split()
        if len(words) > 1 and re.fullmatch(r"[0-9a-f]{32}", words[1]):
            ids.append(words[1])
    return ids


def journal(boot):
    lines = _run([JOURNALCTL, "-b", boot, "-o", "short-monotonic", "--no-pager", "--no-hostname"]).splitlines()
    return [line for line in lines if JOURNAL_LINE.search(line)]


def main(argv):
    count = int(argv[argv.index("--journal-boots") + 1]) if "--journal-boots" in argv else 2
    known = boots()
    report = {
        "boot_id": (_read("/proc/sys/kernel/random/boot_id") or "").strip().replace("-", ""),  # as the journal writes it
        "cmdline": (_read("/proc/cmdline") or "").split(),
        "kernel_release": os.uname().release,
        "devices": devices(),
        "files": {path: _read(path) for pattern in FILES for path in sorted(glob.glob(pattern))},
        "boots": known,
        "journal": {boot: journal(boot) for boot in known[-count:]} if count else {},
    }
    if "--initramfs" in argv:
        listing = _run([LSINITRAMFS, "/boot/initrd.img-" + os.uname().release]).splitlines()
        report["initramfs"] = [p for p in listing if re.search(r"vfio|modprobe\.d/", p)]
    json.dump(report, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
