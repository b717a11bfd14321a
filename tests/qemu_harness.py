"""The tests' one qemu harness: the real kernel (tests/realkernel/vm.py), the real Debian server and the boot that
installs its boot loader (tests/realserver/), and the GPU guest image (tests/helpers/gpu_image.py) all start
qemu-system-x86_64 here.

- ``command``: the machine every test boots: q35 under TCG (no KVM here), no default devices, no user
  configuration, no display; a guest's reboot ends qemu unless the caller keeps it (the server).
- ``run_to_poweroff``: one boot to its end, bounded: qemu is killed at the timeout and on every other way out
  (an error, an interrupt), its CPU time counted on its own pid (wait4), its command and what it printed kept
  beside the guest's files.
- ``tail``: the end of a console log, for the messages that say why a guest failed.

Each caller keeps what is its own: its devices and disks, what the guest reports and how it is read, and its
error type (the message carries the console's tail). The long-lived server (tests/realserver/vm.py) starts qemu
detached under ``timeout -s KILL`` with ``binary()`` and ``command()``: it outlives a test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class QemuMissing(RuntimeError):
    """qemu-system-x86_64 is not installed."""


def binary() -> str:
    """The path of qemu-system-x86_64 (Debian's qemu-system-x86, installed by scripts/setup-system.sh)."""
    found = shutil.which("qemu-system-x86_64")
    if not found:
        raise QemuMissing("qemu-system-x86_64 is not installed: run scripts/setup-system.sh as root (it installs "
                          "qemu-system-x86 and every other Debian package in requirements/debian-packages.txt)")
    return found


def command(memory_mib: int, cpu: str | None = None, smp: int = 1, machine: str = "q35",
            reboot: bool = False) -> list[str]:
    """The start of every qemu command line of the tests: MACHINE under TCG with MEMORY_MIB and SMP CPUs of model
    CPU (qemu's default when None), nothing the caller does not add; with ``reboot`` false a guest's reboot ends
    qemu (-no-reboot), as a boot that must power off expects."""
    cmd = [binary(), "-machine", machine, "-accel", "tcg"]
    if cpu:
        cmd += ["-cpu", cpu]
    cmd += ["-m", str(memory_mib), "-smp", str(smp), "-nodefaults", "-no-user-config", "-display", "none"]
    return cmd if reboot else cmd + ["-no-reboot"]


@dataclass
class Run:
    """How one boot ended: qemu's exit status (None when it was killed at the timeout), its wall and CPU seconds,
    and what qemu itself printed (not the guest's console)."""

    returncode: int | None
    wall_s: float
    cpu_s: float
    output: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_to_poweroff(cmd: list[str], timeout: float, log_dir: str | Path | None = None, poll=None,
                    interval: float = 0.1) -> Run:
    """Run CMD until qemu exits (the guest powered off) or TIMEOUT seconds pass (qemu killed: ``timed_out``).

    log_dir: where qemu.cmd (the command line) and qemu.out (what qemu printed) are kept; none: nowhere.
    poll: called every INTERVAL seconds while the guest runs (a caller's look at a forwarded port). qemu is killed
    on every way out, an exception of POLL's or an interrupt included."""
    if log_dir is not None:
        Path(log_dir, "qemu.cmd").write_text(" ".join(cmd) + "\n", encoding="utf-8")
        out = open(Path(log_dir, "qemu.out"), "w+b")  # pylint: disable=consider-using-with  # closed below
    else:
        out = tempfile.TemporaryFile()  # pylint: disable=consider-using-with  # closed below
    started = time.monotonic()
    with out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        usage = None
        try:
            # wait4 on qemu's own pid: its CPU time stays its own even when several guests run side by side.
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() - started > timeout:
                    break
                if poll is not None:
                    poll()
                time.sleep(interval)
        finally:
            killed = proc.returncode is None
            if killed:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        said = out.read().decode(errors="replace").strip()
    return Run(returncode=None if killed else proc.returncode, wall_s=round(time.monotonic() - started, 1),
               cpu_s=round(usage.ru_utime + usage.ru_stime, 1), output=said)


def tail(path: str | Path, lines: int = 40) -> str:
    """The last LINES lines of a console log (or a note that there is none)."""
    path = Path(path)
    text = path.read_text(errors="replace") if path.exists() else "(no console output)"
    return "\n".join(text.splitlines()[-lines:])
