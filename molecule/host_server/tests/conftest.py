"""What the scenario's tests share: the server over SSH (testinfra), its reports, playbook runs, the results the
prepare step kept, and the stand-ins of the fast tests set up on the same files as the real tools.

The tests run on the control host (molecule's verifier) in file order: test_converged.py reads the server as the
converge left it, then test_faults.py changes it (a reboot that never comes back, an operator's edit, the Ubuntu
cloud image's GRUB drop-in).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra
import yaml

REPO = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
STATE = EPHEMERAL / "server"
RESULTS = EPHEMERAL / "results"
PLANS = EPHEMERAL / "plans"
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
HOST = "debian-server"
sys.path.insert(0, str(REPO / "tests"))

from ogc_testlib import SCRIPT_ENV, reboot_standin, run_playbook  # noqa: E402  pylint: disable=wrong-import-position
from realserver import vm  # noqa: E402  pylint: disable=wrong-import-position

# The emulated GPU host (tests/realkernel/vm.py): two GPUs of one model (1234:1111) in groups of their own, the
# first with its audio function; a virtio GPU sharing its group with a NIC behind a PCI bridge; the console.
GPU_A, GPU_A_AUDIO, GPU_B, GPU_SHARED, SHARED_NIC, CONSOLE = (
    "0000:01:00.0", "0000:01:00.1", "0000:02:00.0", "0000:05:01.0", "0000:05:02.0", "0000:00:06.0")
# The operator's own kernel arguments in the image's /etc/default/grub (tests/realserver/customize.sh) and Debian's
# GRUB_CMDLINE_LINUX_DEFAULT.
OPERATOR_ARGS = ["console=ttyS0,115200n8", "no_timer_check", "mitigations=off", "init_on_alloc=0"]
STATE_FILE = "/var/lib/open-gpu-cloud/passthrough_host.json"


def server():
    """The server through testinfra's SSH backend (as root through sudo), on the port of its current boot."""
    return testinfra.get_host(f"ssh://{vm.SSH_HOST}", ssh_config=str(STATE / "ssh_config"), sudo=True)


def report(*options: str) -> dict:
    """tests/realserver/report.py run on the server, in one SSH session."""
    return vm.report(STATE, *options)


def playbook(*names: str, extra: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """ansible-playbook on the scenario's inventory with the project's playbooks (and molecule's environment); its
    stdout holds stderr too (where Ansible reports a failed task)."""
    args = ["-i", INVENTORY, *(REPO / "playbooks" / name for name in names)]
    if extra:
        args += ["-e", json.dumps(extra)]
    if check:
        args += ["--check", "--diff"]
    # Molecule's environment and directory as they are (its ANSIBLE_CONFIG, collections and roles paths), no colour.
    return run_playbook(*args, env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"), cwd=os.getcwd(),
                        timeout=3600, merge=True)


def recap(output: str) -> dict:
    """The PLAY RECAP counters of the server: {"ok": 12, "changed": 0, ...}."""
    lines = [line for line in output.splitlines() if line.startswith(f"{HOST} ") and "ok=" in line]
    assert lines, f"no recap for {HOST} in:\n{output[-3000:]}"
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", lines[-1])}


def words(output: str) -> str:
    """The output with the YAML callback's line wrapping undone, for searching messages."""
    return " ".join(output.split())


def recorded(rep: dict) -> dict:
    """What the host's state file (plugins/modules/host_state.py) records of unfinished work in a report: its pending steps
    and its reboot (the file's other fields are the role's own bookkeeping)."""
    state = json.loads(rep["files"][STATE_FILE])
    return {"pending": state["pending"], "reboot": state["reboot"]}


def plan() -> dict:
    """The server's plan as playbooks/plan.yml (or host.yml's plan after the reboot) stored it: the plan file's
    ``plan`` (beside the facts it was made from)."""
    return json.loads((PLANS / f"{HOST}.json").read_text())["plan"]


def kept(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def grub_default_line(files: dict) -> list[str]:
    """The default entry's line in the server's generated /boot/grub/grub.cfg, as GRUB passes it to the kernel:
    BOOT_IMAGE= and the linux line's arguments (plugins/module_utils/host/boot_config.py reads it the same way)."""
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_config  # pylint: disable=import-outside-toplevel

    text = files["/boot/grub/grub.cfg"]
    image = re.search(r"^\s*linux\s+(\S+)", text, re.M).group(1)
    return [f"BOOT_IMAGE={image}"] + boot_config.grub_cfg_default_args(text)


def held_by(journal: list[str], driver: str, address: str) -> list[str]:
    """The journal lines where ``driver`` speaks of the device at ``address``: the kernel's dev_printk prefix
    ("snd_hda_intel 0000:01:00.1: ...") or DRM's registration ("Initialized bochs-drm ... for 0000:01:00.0")."""
    return [line for line in journal if address in line and re.search(rf"(^|\s){re.escape(driver)}\s", line)]


def monotonic(line: str) -> float:
    return float(re.match(r"\[\s*([\d.]+)\]", line).group(1))


def write_tree(root: Path, files: dict, cmdline: list[str]) -> None:
    """The server's files (paths as on the server) and its running command line under a sandbox root."""
    for path, text in files.items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cmdline").write_text(" ".join(cmdline) + "\n")


def fixture_of(rep: dict) -> dict:
    """A fixtures/hosts description (scripts/mock_sysfs.py) of the server as a report shows it: its CPU, its
    IOMMU, every PCI function with the driver it has in that boot."""
    devices = [{"address": address, "id": dev["id"], "class": dev["class"], "driver": dev["driver"],
                **({"group": int(dev["iommu_group"])} if dev["iommu_group"] is not None else {})}
               for address, dev in sorted(rep["devices"].items())]
    return {"description": "the test server (tests/realserver), as its boot showed it", "cpu": {"vendor": "amd"},
            "cmdline": " ".join(rep["cmdline"]), "efi": True, "iommu": any(d.get("group") is not None for d in devices),
            "devices": devices}


def simulated_boot_line(tmp: Path, rep: dict) -> list[str]:
    """tests/standins/simulate_boot_config.py (update-grub's stand-in) on the server's GRUB files and running command
    line: the default entry's line it generates, read like the real one."""
    root = tmp / "grub-root"
    write_tree(root, {p: t for p, t in rep["files"].items() if p.startswith("/etc/default/grub")}, rep["cmdline"])
    subprocess.run([sys.executable, str(REPO / "tests" / "standins" / "simulate_boot_config.py"), str(tmp / "calls.jsonl"),
                    str(root), "update-grub"], check=True, capture_output=True, text=True)
    return grub_default_line({"/boot/grub/grub.cfg": (root / "boot" / "grub" / "grub.cfg").read_text()})


def simulated_reboot(tmp: Path, booted_from: dict, configured: dict) -> tuple[list[str], dict]:
    """tests/standins/simulate_reboot.py (the reboot's stand-in) on a sandbox of the server as ``booted_from`` showed it,
    holding the files the host phase wrote as ``configured`` shows them: the command line and the drivers it
    says the next boot gets."""
    root = tmp / "reboot-root"
    fixture = tmp / "server.yml"
    fixture.write_text(yaml.safe_dump(fixture_of(booted_from)))
    written = {p: t for p, t in configured["files"].items()
               if p.startswith(("/etc/modprobe.d/", "/usr/local/sbin/", "/boot/grub/"))}
    subprocess.run([sys.executable, str(REPO / "scripts" / "mock_sysfs.py"), "build", str(fixture), str(root)],
                   check=True, capture_output=True, text=True, env=SCRIPT_ENV)
    write_tree(root, written, booted_from["cmdline"])
    subprocess.run(reboot_standin(fixture, root), check=True, capture_output=True, text=True)
    devices = root / "sys" / "bus" / "pci" / "devices"
    drivers = {d.name: (os.path.basename(os.readlink(d / "driver")) if (d / "driver").is_symlink() else None)
               for d in sorted(devices.iterdir())}
    return (root / "proc" / "cmdline").read_text().split(), drivers


@pytest.fixture(scope="session")
def before() -> dict:
    """The server before the host phase (prepare.yml)."""
    return kept("before.json")


@pytest.fixture(scope="session")
def converged() -> dict:
    """The server as the converge and the second converge left it."""
    rep = report("--initramfs", "--journal-boots", "3")
    (RESULTS / "converged.json").write_text(json.dumps(rep, indent=1))
    return rep
