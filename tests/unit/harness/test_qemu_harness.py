"""tests/qemu_harness.py, the tests' one qemu harness: its machine, its bounded runs, and that every qemu the tests
start comes from it. The runs here are stand-in commands (no qemu): what is proved is the bounding, not a boot."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import qemu_harness

ROOT = Path(__file__).resolve().parents[3]


def test_the_machine_is_q35_under_tcg_and_a_boot_ends_at_the_guest_s_reboot(monkeypatch):
    monkeypatch.setattr(qemu_harness, "binary", lambda: "/usr/bin/qemu-system-x86_64")
    cmd = qemu_harness.command(512, "EPYC")
    assert cmd == ["/usr/bin/qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-cpu", "EPYC", "-m", "512",
                   "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]
    kept = qemu_harness.command(1024, reboot=True, smp=2, machine="pc")
    assert "-no-reboot" not in kept and "-cpu" not in kept and kept[2] == "pc" and kept[kept.index("-smp") + 1] == "2"


def test_a_missing_qemu_names_the_setup(monkeypatch):
    monkeypatch.setattr(qemu_harness.shutil, "which", lambda _name: None)
    with pytest.raises(qemu_harness.QemuMissing, match="run scripts/setup-system.sh as root"):
        qemu_harness.binary()


def test_a_run_keeps_its_command_and_what_it_printed(tmp_path):
    run = qemu_harness.run_to_poweroff(["sh", "-c", "echo powered off; exit 3"], 30, log_dir=tmp_path)
    assert (run.returncode, run.output, run.timed_out) == (3, "powered off", False)
    assert (tmp_path / "qemu.cmd").read_text() == "sh -c echo powered off; exit 3\n"
    assert (tmp_path / "qemu.out").read_text() == "powered off\n"
    # Without a log directory nothing is kept, and the output still comes back.
    assert qemu_harness.run_to_poweroff(["sh", "-c", "echo x"], 30).output == "x"


def test_a_guest_that_never_powers_off_is_killed_at_the_timeout():
    started = time.monotonic()
    run = qemu_harness.run_to_poweroff(["sleep", "60"], 0.5)
    assert run.timed_out and run.returncode is None and time.monotonic() - started < 10


def test_a_failing_look_at_the_guest_kills_it_too(tmp_path):
    pid_file = tmp_path / "pid"

    def poll():  # gives up once the "guest" runs
        if pid_file.exists() and pid_file.read_text().strip():
            raise RuntimeError("the caller gave up")

    with pytest.raises(RuntimeError, match="gave up"):
        qemu_harness.run_to_poweroff(["sh", "-c", f"echo $$ > {pid_file}.new && mv {pid_file}.new {pid_file} && "
                                      "exec sleep 60"], 60, poll=poll, interval=0.1)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists(), "the process outlived the harness"


def test_no_test_starts_qemu_but_through_the_harness():
    """Every boot of the tests goes through qemu_harness.command (the server's too, for its machine)."""
    files = [p for top in ("tests", "molecule", "bench") for p in (ROOT / top).rglob("*.py")
             if "__pycache__" not in p.parts and p.name not in ("qemu_harness.py", Path(__file__).name)]
    assert len(files) > 50
    offenders = [str(p.relative_to(ROOT)) for p in files
                 if re.search(r"""\[\s*["']qemu-system-x86_64["']|-accel["']\s*,\s*["']tcg""", p.read_text())]
    assert not offenders, f"these files build a qemu command of their own; use qemu_harness.command: {offenders}"
