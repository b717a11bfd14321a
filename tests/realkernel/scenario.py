"""The real-kernel scenario's steps: discover + plan on a capture, configure a sandbox host, boot.

Used by tests/integration/realkernel/. The toolkit's own code does the work: discovery is
``plugins/modules/pci_passthrough_facts.py`` on the captured tree, planning is the ``passthrough_plan``
filter, and the host configuration is ``roles/passthrough_host`` run on a sandbox root
(``configure_host_with_role``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ogc_testlib import ansible_env, collection_module, collection_plugin, run_playbook, sandbox_host, write_inventory
from realkernel import klog, vm

REPO = Path(__file__).resolve().parents[2]

# Operator policy for the emulated host: QEMU's VGA/bochs-display (1234) and virtio-gpu (1af4) play
# the GPUs; the cirrus console (1013) does not.
POLICY = {"vendors": ["1234", "1af4"]}

# A host whose IOMMU is switched off on the command line: the first boot of each scenario. The sandbox
# is an Ubuntu 24.04 cloud image's boot layout (fixtures/distros/ubuntu2404-cloud), whose drop-in
# /etc/default/grub.d/50-cloudimg-settings.cfg sets GRUB_CMDLINE_LINUX_DEFAULT after /etc/default/grub:
# the "off" is put there, and the role must edit there for the next boot to change.
# (Debian's 6.1 kernel turns the Intel IOMMU on by default, CONFIG_INTEL_IOMMU_DEFAULT_ON_INTGPU_OFF,
# and the AMD one whenever the firmware has it: only an explicit "off" gives an IOMMU-less boot.)
DISTRO = REPO / "fixtures" / "distros" / "ubuntu2404-cloud"
DROP_IN = "etc/default/grub.d/50-cloudimg-settings.cfg"
INITIAL_OFF = {"intel": "intel_iommu=off", "amd": "amd_iommu=off"}
GUEST_CONFIG_PATHS = ["etc/modprobe.d", "etc/modules-load.d", "etc/initramfs-tools/modules", "etc/modules"]


# The discovery module and the planner's filter, both the collection's, imported plainly.
facts_module = collection_module("pci_passthrough_facts")
plan_module = collection_plugin("filter", "passthrough_plan")


def discover(boot: vm.Boot) -> dict:
    """pci_passthrough_facts on the tree captured from the guest."""
    return facts_module.discover(str(boot.root / "sys"), str(boot.root / "proc"))


def plan(facts: dict, host: str) -> dict:
    return plan_module.passthrough_plan(facts, POLICY, host=host)


def seed_sandbox(sandbox: Path, vendor: str, iommu_off: bool = True) -> None:
    """The cloud image's boot files, the IOMMU switched off in its drop-in (unless iommu_off is false: the image's
    line as it comes), and the grub.cfg the image's build generated from them (tests/standins/simulate_boot_config.py,
    as update-grub)."""
    shutil.copytree(DISTRO, sandbox, dirs_exist_ok=True)
    if iommu_off:
        drop_in = sandbox / DROP_IN
        drop_in.write_text(drop_in.read_text().replace('console=ttyS0"', 'console=ttyS0 %s"' % INITIAL_OFF[vendor]))
    subprocess.run(boot_config_command(sandbox), check=True)


def boot_config_command(sandbox: Path) -> list[str]:
    """The stand-in for update-grub: generates sandbox/boot/grub/grub.cfg from the sandbox's GRUB files."""
    return [sys.executable, str(REPO / "tests" / "standins" / "simulate_boot_config.py"), str(sandbox.parent / "boot-config.jsonl"),
            str(sandbox), "update-grub"]


def grub_kernel_args(sandbox: Path) -> list[str]:
    """The Linux command line of the default entry of the generated grub.cfg (what GRUB boots), without
    the image, root= and ro that the VM supplies itself."""
    for line in (sandbox / "boot" / "grub" / "grub.cfg").read_text().splitlines():
        words = line.split()
        if words[:1] == ["linux"]:
            return [w for w in words[2:] if not w.startswith("root=") and w != "ro"]
    raise AssertionError(f"{sandbox}/boot/grub/grub.cfg has no linux line")


ROLE = REPO / "roles" / "passthrough_host"


def reboot_log(sandbox: Path) -> Path:
    """Where the sandbox host's reboot command writes a line each time the role reboots it (beside the sandbox)."""
    return sandbox.parent / "reboots.log"


def configure_host_with_role(sandbox: Path, host: str, workdir: Path, verify: bool = False) -> str:
    """Run roles/passthrough_host on the sandbox root (which holds the last boot's sys/ and proc/).

    Its boot-config command generates grub.cfg from the sandbox's GRUB files (drop-ins included), and
    the next boot uses that grub.cfg's default entry; its initramfs command is ``true`` and its reboot command writes
    a line to ``reboot_log(sandbox)``: the test ships the modprobe configuration with the next boot, and that boot is
    the reboot. Its own verification is off: the real kernel and the re-plan verify.
    """
    # The plan role runs first (as in site.yml): it plans the sandbox and writes the plan the host role loads.
    hostvars = sandbox_host(sandbox, workdir / "plans", passthrough_policy=POLICY,
                            passthrough_host_root=str(sandbox), passthrough_host_os_family="Debian",
                            passthrough_host_boot_config_command=boot_config_command(sandbox),
                            passthrough_host_initramfs_command=["true"], passthrough_host_allow_reboot=True,
                            passthrough_host_reboot_command=["sh", "-c", f"echo reboot >> {reboot_log(sandbox)}"],
                            passthrough_host_verify=verify)
    workdir.mkdir(parents=True, exist_ok=True)
    write_inventory(workdir / "inventory.json", {host: hostvars})
    (workdir / "play.yml").write_text(
        "---\n- name: Configure the real-kernel guest's sandbox root\n  hosts: gpu_hosts\n"
        "  gather_facts: false\n  roles:\n    - role: open_gpu_cloud.toolkit.passthrough\n"
        "    - role: open_gpu_cloud.toolkit.passthrough_host\n")
    proc = run_playbook("-i", workdir / "inventory.json", workdir / "play.yml", env=ansible_env(LC_ALL="C.UTF-8"))
    (workdir / "ansible.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise AssertionError(f"roles/passthrough_host failed on the sandbox {sandbox} (rc {proc.returncode}):\n"
                             + "\n".join(proc.stdout.splitlines()[-25:]) + proc.stderr[-2000:])
    return proc.stdout


def configure_host(sandbox: Path, step: "Step", workdir: Path, verify: bool = False) -> str:
    """Configure the sandbox host from the last boot: its sys/ and proc/ become the sandbox's, then
    roles/passthrough_host runs on it (discovery, planning and the files, as on a real host)."""
    for name in ("sys", "proc"):
        link = sandbox / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(step.boot.root / name)
    return configure_host_with_role(sandbox, step.plan["host"], workdir, verify=verify)


def guest_files(sandbox: Path) -> dict:
    """The module configuration the role wrote, as files for the guest's /etc."""
    files = {}
    for rel in GUEST_CONFIG_PATHS:
        path = sandbox / rel
        for item in sorted(path.rglob("*")) if path.is_dir() else [path] if path.is_file() else []:
            if item.is_file():
                files[str(item.relative_to(sandbox))] = item.read_bytes()
    return files


def expectations(host_plan: dict, facts: dict) -> list[str]:
    """What the guest checks after booting with the plan's configuration."""
    lines = ["iommu on"]
    lines += [f"vfio {address}" for address in host_plan["vfio_devices"]]
    lines += [f"host {d['address']}" for d in facts["devices"] if d["address"] not in host_plan["vfio_devices"]]
    return lines


@dataclass
class Step:
    """One boot of a scenario and what came of it."""

    name: str
    boot: vm.Boot
    facts: dict
    plan: dict
    cmdline: list[str]
    complaints: list[str] = field(default_factory=list)


def boot_and_plan(guest, machine: str, args: list[str], workdir: Path, name: str, host: str,
                  files: dict | None = None, expect: list[str] | None = None) -> Step:
    boot = vm.boot(guest, machine, args, workdir / name, files=files, expect=expect)
    facts = discover(boot)
    return Step(name=name, boot=boot, facts=facts, plan=plan(facts, host), cmdline=list(args),
                complaints=klog.cmdline_complaints(boot.dmesg))


def comparable(host_plan: dict) -> dict:
    """The parts of a plan that must not change once the host runs it: selection, groups, bindings."""
    keys = ("selected", "groups", "vfio_devices", "vfio_ids", "bind_by_address", "host_devices", "excluded",
            "kernel_args", "softdep_drivers", "blacklist_modules", "aliases")
    return {key: host_plan[key] for key in keys}


# At most this many configure-and-reboot rounds per scenario. The first plan on an IOMMU-less boot
# binds every GPU provisionally; a GPU that the real groups then show in a shared group is released
# by a second round, so two rounds always suffice for this host.
MAX_ROUNDS = 2


@dataclass
class Flow:
    """A whole scenario: the first (IOMMU-off) boot, then each configure-and-reboot round."""

    vendor: str
    sandbox: Path
    steps: list[Step] = field(default_factory=list)
    final_role_run: str = ""  # the role's output on the last boot's tree, with its verification on

    @property
    def wall_s(self) -> float:
        return sum(step.boot.wall_s for step in self.steps)


def run_flow(guest, vendor: str, workdir: Path) -> Flow:
    """Boot with the sandbox's GRUB line, plan, configure, reboot with exactly the configured line.

    Stops early when the kernel complains about the line or a check inside the guest fails: the
    tests turn that into a failure quoting the kernel or the guest.
    """
    host = f"realkernel-{vendor}"
    sandbox = workdir / "sandbox"
    seed_sandbox(sandbox, vendor)
    flow = Flow(vendor=vendor, sandbox=sandbox)
    step = boot_and_plan(guest, vendor, grub_kernel_args(sandbox), workdir, "boot1", host, expect=["iommu off"])
    flow.steps.append(step)
    for round_no in range(1, MAX_ROUNDS + 1):
        if step.complaints or step.boot.check_result != "pass" or not step.plan["reboot_required"]:
            break
        applied = step
        configure_host(sandbox, applied, workdir / f"configure{round_no}")
        step = boot_and_plan(guest, vendor, grub_kernel_args(sandbox), workdir, f"boot{round_no + 1}", host,
                             files=guest_files(sandbox), expect=expectations(applied.plan, applied.facts))
        flow.steps.append(step)
    if len(flow.steps) > 1 and not step.plan["reboot_required"]:
        # Converged: the role, run again on the real kernel's tree, must find nothing to do and
        # pass its own verification.
        flow.final_role_run = configure_host(sandbox, step, workdir / "verify", verify=True)
    return flow


@dataclass
class LeftAlone:
    """A host whose IOMMU no reboot can turn on: its boot, and the host role's run on its tree."""

    vendor: str
    step: Step
    role_run: str
    files_before: dict
    files_after: dict
    boot_config_calls: list[str]
    reboots: list[str]


def sandbox_files(sandbox: Path) -> dict:
    """{relative path: bytes} of every regular file under the sandbox root (not through its sys/ and proc/ links)."""
    return {str(path.relative_to(sandbox)): path.read_bytes() for path in sorted(sandbox.rglob("*"))
            if path.is_file() and not path.is_symlink() and path.relative_to(sandbox).parts[0] not in ("sys", "proc")}


def run_without_viommu(guest, vendor: str, workdir: Path) -> LeftAlone:
    """The same emulated GPU host with no vIOMMU (a virtual machine whose hypervisor offers none: no DMAR or IVRS
    table), booted with the image's own line; then the plan and host roles on its tree, exactly as on the chain's
    hosts. No kernel argument can give it an IOMMU: the role must write nothing and not reboot."""
    host = f"realkernel-{vendor}-no-viommu"
    sandbox = workdir / "sandbox"
    seed_sandbox(sandbox, vendor, iommu_off=False)
    step = boot_and_plan(guest, f"{vendor}-no-iommu", grub_kernel_args(sandbox), workdir, "boot1", host,
                         expect=["iommu off"])
    calls = sandbox.parent / "boot-config.jsonl"
    before, calls_before = sandbox_files(sandbox), calls.read_text().splitlines()
    role_run = configure_host(sandbox, step, workdir / "configure")
    log = reboot_log(sandbox)
    return LeftAlone(vendor=vendor, step=step, role_run=role_run, files_before=before, files_after=sandbox_files(sandbox),
                     boot_config_calls=calls.read_text().splitlines()[len(calls_before):],
                     reboots=log.read_text().splitlines() if log.exists() else [])
