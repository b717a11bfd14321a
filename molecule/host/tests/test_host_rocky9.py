"""A Rocky Linux 9 host with default variables after converge: GRUB_CMDLINE_LINUX edited, the BLS
entries regenerated from it, the rebooted kernel has the plan, one reboot."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["rocky-a100"]

INSTALLED = ("crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rl-swap rd.lvm.lv=rl/root "
             "rd.lvm.lv=rl/swap")


def test_grub_cmdline_linux_has_the_plan(host):
    grub = sandbox.read(host, "etc/default/grub")
    lines = [entry for entry in grub.splitlines() if entry.startswith("GRUB_CMDLINE_LINUX=")]
    assert len(lines) == 1 and lines[0].startswith(f'GRUB_CMDLINE_LINUX="{INSTALLED} ')
    assert "iommu=pt" in lines[0] and "vfio-pci.ids=10de:20f1" in lines[0]
    assert "GRUB_CMDLINE_LINUX_DEFAULT" not in grub and "GRUB_ENABLE_BLSCFG=true" in grub


def test_bls_entries_and_running_kernel(host):
    entries = sandbox.root(host) / "boot" / "loader" / "entries"
    kernel = entries / "3c1a8e2f5b7d4e9a8c6b2d1f0e4a7b3c-5.14.0-362.8.1.el9_3.x86_64.conf"
    options = [entry for entry in kernel.read_text().splitlines() if entry.startswith("options ")][0].split()
    running = sandbox.read(host, "proc/cmdline").split()
    for arg in ("iommu=pt", "vfio-pci.ids=10de:20f1"):
        assert arg in options and arg in running
    assert "rd.lvm.lv=rl/root" in running
    assert "iommu=pt" in sandbox.read(host, "etc/kernel/cmdline")


def test_one_reboot_nothing_pending(host):
    assert len(sandbox.reboots(host)) == 1
    state = json.loads(sandbox.read(host, "var/lib/open-gpu-cloud/passthrough_host.json"))
    assert state["pending"] == [] and state["reboot"] is None and state["version"] == 2
    assert state["generated_from"].startswith("sha256:")  # what grub2-mkconfig last generated from
    names = [call[0] for call in sandbox.calls(host)]
    assert names.count("grub2-mkconfig") == 1 and names.count("dracut") == 1
