"""Boot the real-kernel test guest under qemu (TCG) as a small GPU host, and read what it reports.

One boot = one qemu run with a q35 machine, an Intel or AMD vIOMMU (or none: firmware IOMMU off),
and emulated devices standing in for a GPU host (see ``DEVICES``). The kernel command line is the
line under test followed by the harness's own ``HARNESS_ARGS``. Files
for the guest's /etc (the role's modprobe.d, the expectations checked inside the guest) travel as a
second cpio archive appended to the initramfs. The guest's /init (``init.sh``) prints its checks on
the console and sends a tar of what discovery reads over ttyS1; ``Boot.root`` holds it unpacked,
ready for ``pci_passthrough_facts`` with ``sysfs_root=<root>/sys`` and ``procfs_root=<root>/proc``.

Every qemu run is bounded: on timeout the process is killed and ``BootError`` carries the console.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import qemu_harness
from realkernel import guest as guestlib

# Appended to every command line under test: the console the harness reads, exit instead of
# hanging on a panic, and no timer-IRQ check (under TCG on a busy machine the check can miss its
# ticks, and with interrupt remapping on the kernel then panics: "timer doesn't work through
# Interrupt-remapped IO-APIC"; virtual machines' images pass it for the same reason).
HARNESS_ARGS = ["console=ttyS0", "panic=-1", "no_timer_check"]

# The emulated host. Addresses the guest's kernel assigns (stable: fixed slots and chassis numbers):
#   00:06.0  cirrus-vga       1013:00b8 VGA, the host console (boot VGA)
#   00:02.0  pcie-root-port   -> 01:00.0 secondary-vga 1234:1111 + 01:00.1 ich9-intel-hda 8086:293e
#                                (a "GPU" with its audio function: multifunction, one slot, one group)
#   00:03.0  pcie-root-port   -> 02:00.0 bochs-display 1234:1111 (display controller 0380)
#   00:04.0  pcie-root-port   -> 03:00.0 e1000e 8086:10d3 (the host's NIC, its own group)
#   00:05.0  pcie-root-port   -> 04:00.0 pcie-pci-bridge -> 05:01.0 virtio-gpu-pci 1af4:1050
#                                                           05:02.0 e1000 8086:100e
#                                (conventional PCI behind a bridge: one group, a GPU next to a NIC)
#   00:1f.*  ICH9 LPC/SATA/SMBus (q35's own, one group)
#   00:01.0  with amd-iommu only: the AMD IOMMU's own function (the slot is left free for it)
DEVICES = [
    "cirrus-vga,bus=pcie.0,addr=0x6",
    "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x2",
    "pcie-root-port,id=rp2,bus=pcie.0,chassis=2,addr=0x3",
    "pcie-root-port,id=rp3,bus=pcie.0,chassis=3,addr=0x4",
    "pcie-root-port,id=rp4,bus=pcie.0,chassis=4,addr=0x5",
    "secondary-vga,bus=rp1,addr=0x0.0,multifunction=on",
    "ich9-intel-hda,bus=rp1,addr=0x0.1",
    "bochs-display,bus=rp2",
    "e1000e,bus=rp3,netdev=nic0",
    "pcie-pci-bridge,id=pb1,bus=rp4",
    "virtio-gpu-pci,bus=pb1,addr=0x1",
    "e1000,bus=pb1,addr=0x2,netdev=nic1",
]
NETDEVS = ["hubport,id=nic0,hubid=0", "hubport,id=nic1,hubid=1"]

MACHINES = {
    # name: (CPU model flags, vIOMMU device or None)
    "intel": ("qemu64,vendor=GenuineIntel", "intel-iommu"),
    "amd": ("qemu64,vendor=AuthenticAMD,+svm", "amd-iommu"),
    "intel-no-iommu": ("qemu64,vendor=GenuineIntel", None),
    "amd-no-iommu": ("qemu64,vendor=AuthenticAMD,+svm", None),
}


class BootError(RuntimeError):
    """qemu failed, timed out, or the guest did not report; the message carries the console tail."""


@dataclass
class Boot:
    """What one boot produced."""

    machine: str
    cmdline: str
    console: str
    wall_s: float
    cpu_s: float = 0.0  # qemu's user+sys time: the wall time on an idle core (TCG runs one vCPU thread)
    root: Path | None = None
    dmesg: str = ""
    checks: list[str] = field(default_factory=list)
    check_result: str | None = None
    times: dict = field(default_factory=dict)

    @property
    def failed_checks(self) -> list[str]:
        return [line for line in self.checks if line.startswith("RK-CHECK FAIL")]


def qemu_command(guest: guestlib.Guest, machine: str, cmdline: str, initrd: Path, console: Path,
                 capture: Path) -> list[str]:
    if machine not in MACHINES:
        raise ValueError(f"unknown machine {machine!r}; known: {', '.join(MACHINES)}")
    cpu, iommu = MACHINES[machine]
    cmd = qemu_harness.command(512, cpu)
    if iommu:  # the vIOMMU must come before the devices it translates for
        cmd += ["-device", iommu]
    for netdev in NETDEVS:
        cmd += ["-netdev", netdev]
    for device in DEVICES:
        cmd += ["-device", device]
    cmd += ["-serial", f"file:{console}", "-serial", f"file:{capture}",
            "-kernel", str(guest.kernel), "-initrd", str(initrd), "-append", cmdline]
    return cmd


# One boot takes 15-20 s of CPU (TCG); on a loaded machine the wall time is several times that.
DEFAULT_TIMEOUT = float(os.environ.get("OGC_REALKERNEL_BOOT_TIMEOUT", "300"))


def boot(guest: guestlib.Guest, machine: str, args: list[str] | str, workdir: Path, files: dict | None = None,
         expect: list[str] | None = None, timeout: float | None = None) -> Boot:
    """Boot once with the command line ``args`` (+ HARNESS_ARGS); return what the guest reported.

    ``files`` maps guest paths (``etc/modprobe.d/vfio.conf``) to contents; ``expect`` lines
    (``iommu on``, ``vfio 0000:01:00.0``, ``host 0000:03:00.0``) are checked inside the guest.
    """
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    line = args if isinstance(args, str) else " ".join(args)
    cmdline = " ".join([line, *HARNESS_ARGS]).strip()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    overlay = dict(files or {})
    overlay["etc/realkernel/expect"] = ("\n".join(expect or []) + "\n").encode()
    overlay = {name: data.encode() if isinstance(data, str) else data for name, data in overlay.items()}
    initrd = workdir / "initrd.cpio"
    guestlib.newc_archive(overlay, workdir / "overlay.cpio")
    with initrd.open("wb") as out:  # the kernel unpacks concatenated archives in order
        for part in (guest.initramfs, workdir / "overlay.cpio"):
            with part.open("rb") as src:
                shutil.copyfileobj(src, out)
    console, capture = workdir / "console.log", workdir / "capture.b64"
    run = qemu_harness.run_to_poweroff(qemu_command(guest, machine, cmdline, initrd, console, capture), timeout,
                                       log_dir=workdir)
    if run.timed_out:
        raise BootError(f"{machine} guest did not power off within {timeout:.0f} s (qemu killed); "
                        f"console tail:\n{qemu_harness.tail(console)}")
    text = console.read_text(errors="replace") if console.exists() else ""
    if run.returncode != 0:
        raise BootError(f"qemu exited {run.returncode}: {run.output}\n"
                        f"console tail:\n{qemu_harness.tail(console)}")
    result = Boot(machine=machine, cmdline=cmdline, console=text, wall_s=run.wall_s, cpu_s=run.cpu_s)
    result.checks = [line.strip() for line in text.splitlines() if line.startswith("RK-CHECK ")]
    match = re.search(r"^RK-CHECK-RESULT (\w+)", text, re.M)
    result.check_result = match.group(1) if match else None
    result.times = {m.group(1): float(m.group(2)) for m in re.finditer(r"^RK-TIME (\S+) ([\d.]+)", text, re.M)}
    result.root = unpack_capture(capture, workdir / "root", text)
    result.dmesg = (result.root / "dmesg.txt").read_text(errors="replace")
    return result


# A GPU's large 64-bit window, emulated: ivshmem-plain's BAR2 is its shared memory, as large as the memory backend
# behind it (a sparse file here: nothing of it is touched). Behind a pcie-root-port of its own, as libvirt places a
# passed-through device in a q35 guest. OVMF from Debian's ovmf package boots the guest's kernel from QEMU's fw_cfg.
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
IVSHMEM_ID = "1af4:1110"


def window_command(guest: guestlib.Guest, phys_bits: int | None, window_bytes: int, memory_mib: int, initrd: Path,
                   console: Path, capture: Path, workdir: Path) -> list[str]:
    """An Intel q35 guest under OVMF with one device of a WINDOW_BYTES 64-bit window; PHYS_BITS None leaves QEMU's
    default width (40), as a guest Nova is told nothing about gets."""
    backing = workdir / "window.img"
    with backing.open("wb") as handle:
        handle.truncate(window_bytes)  # sparse
    vars_copy = workdir / "OVMF_VARS.fd"
    shutil.copyfile(OVMF_VARS, vars_copy)
    cpu = "qemu64,vendor=GenuineIntel,+pdpe1gb" + (f",phys-bits={phys_bits}" if phys_bits else "")
    cmd = qemu_harness.command(memory_mib, cpu)
    cmd += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
            "-drive", f"if=pflash,format=raw,unit=1,file={vars_copy}",
            "-object", f"memory-backend-file,id=window,mem-path={backing},size={window_bytes},share=on",
            "-device", "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x2",
            "-device", "ivshmem-plain,memdev=window,bus=rp1",
            "-serial", f"file:{console}", "-serial", f"file:{capture}",
            "-kernel", str(guest.kernel), "-initrd", str(initrd), "-append", " ".join(HARNESS_ARGS)]
    return cmd


def boot_window(guest: guestlib.Guest, phys_bits: int | None, window_bytes: int, workdir: Path,
                memory_mib: int = 512, timeout: float | None = None) -> Boot:
    """Boot once under OVMF with one large window (window_command); the guest reports as any boot does, its sysfs
    (the device's resource file: where the firmware and the kernel put each BAR) and its dmesg in ``Boot.root``."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    guestlib.newc_archive({"etc/realkernel/expect": b"\n"}, workdir / "overlay.cpio")
    initrd = workdir / "initrd.cpio"
    with initrd.open("wb") as out:
        for part in (guest.initramfs, workdir / "overlay.cpio"):
            with part.open("rb") as src:
                shutil.copyfileobj(src, out)
    console, capture = workdir / "console.log", workdir / "capture.b64"
    command = window_command(guest, phys_bits, window_bytes, memory_mib, initrd, console, capture, workdir)
    run = qemu_harness.run_to_poweroff(command, timeout, log_dir=workdir)
    (workdir / "window.img").unlink()
    if run.timed_out:
        raise BootError(f"the OVMF guest did not power off within {timeout:.0f} s (qemu killed); "
                        f"console tail:\n{qemu_harness.tail(console)}")
    if run.returncode != 0:
        raise BootError(f"qemu exited {run.returncode}: {run.output}\nconsole tail:\n{qemu_harness.tail(console)}")
    text = console.read_text(errors="replace") if console.exists() else ""
    result = Boot(machine=f"ovmf-intel-{phys_bits or 'default'}-bits", cmdline=" ".join(HARNESS_ARGS), console=text,
                  wall_s=run.wall_s, cpu_s=run.cpu_s)
    result.root = unpack_capture(capture, workdir / "root", text)
    result.dmesg = (result.root / "dmesg.txt").read_text(errors="replace")
    return result


def unpack_capture(capture: Path, dest: Path, console: str = "") -> Path:
    """Turn the guest's base64 tar (between RK-CAPTURE-BEGIN/END) into a tree at dest."""
    raw = capture.read_bytes().decode("ascii", "replace") if capture.exists() else ""
    match = re.search(r"RK-CAPTURE-BEGIN\s*(.*?)RK-CAPTURE-END", raw, re.S)
    if not match:
        raise BootError(f"the guest sent no capture on ttyS1 (got {len(raw)} bytes); console tail:\n"
                        f"{_tail_text(console)}")
    try:
        data = base64.b64decode(re.sub(r"[^A-Za-z0-9+/=]", "", match.group(1)))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(dest, filter="tar")
    except (binascii.Error, tarfile.TarError, OSError, EOFError) as exc:
        raise BootError(f"the guest's capture is damaged: {exc}") from None
    return dest


def _tail_text(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])
