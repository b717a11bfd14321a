"""Ubuntu 24.04 cloud-image hosts after converge: the arguments went where grub-mkconfig takes them
(the image's drop-in), the generated grub.cfg and the rebooted kernel have them, one reboot each."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["cloud-v100", "cloud-operator"]

REPO = Path(__file__).resolve().parents[3]
DISTROS = REPO / "fixtures" / "distros"
PLANNED = "iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"


def name(host):
    return host.backend.get_hostname()


def line(host, rel, variable):
    return [entry for entry in sandbox.read(host, rel).splitlines() if entry.startswith(variable + "=")][-1]


def test_arguments_in_the_drop_in_that_takes_effect(host):
    if name(host) == "cloud-v100":
        assert line(host, "etc/default/grub.d/50-cloudimg-settings.cfg", "GRUB_CMDLINE_LINUX_DEFAULT") == (
            f'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 {PLANNED}"')
        # /etc/default/grub's own value would have no effect: it is left exactly as shipped.
        assert sandbox.read(host, "etc/default/grub") == (DISTROS / "ubuntu2404-cloud/etc/default/grub").read_text()
    else:
        assert line(host, "etc/default/grub.d/60-operator.cfg", "GRUB_CMDLINE_LINUX_DEFAULT") == (
            'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT console=ttyS0,115200n8 vfio_pci.ids=10de:1db4 '
            'iommu=pt rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"')
        # iommu=off removed from the other variable; the operator's rd.driver.pre=nvme kept.
        assert line(host, "etc/default/grub", "GRUB_CMDLINE_LINUX") == 'GRUB_CMDLINE_LINUX="rd.driver.pre=nvme"'
        assert sandbox.read(host, "etc/default/grub.d/50-cloudimg-settings.cfg") == (
            DISTROS / "ubuntu2404-cloud/etc/default/grub.d/50-cloudimg-settings.cfg").read_text()


def kernel_names(args):
    """The kernel compares parameter names with - and _ alike (vfio-pci.ids is vfio_pci.ids)."""
    return [arg.split("=", 1)[0].replace("-", "_") + arg[len(arg.split("=", 1)[0]):] for arg in args]


def test_generated_grub_cfg_and_running_kernel_have_the_plan(host):
    cfg = sandbox.read(host, "boot/grub/grub.cfg")
    default_linux = kernel_names([entry.split() for entry in cfg.splitlines() if entry.strip().startswith("linux")][0])
    running = kernel_names(sandbox.read(host, "proc/cmdline").split())
    for arg in kernel_names(PLANNED.split()):
        assert arg in default_linux and arg in running
    assert "iommu=off" not in running and "vfio_pci.ids=10de:1b80" not in running
    if name(host) == "cloud-operator":
        assert "rd.driver.pre=nvme" in running
    assert sandbox.exists(host, "sys/kernel/iommu_groups/0")


def test_one_reboot_and_nothing_left_pending(host):
    assert len(sandbox.reboots(host)) == 1
    state = json.loads(sandbox.read(host, "var/lib/open-gpu-cloud/passthrough_host.json"))
    assert state["pending"] == [] and state["reboot"] is None


def test_tools_ran_once(host):
    names = [call[0] for call in sandbox.calls(host)]
    assert names.count("update-grub") == 1 and names.count("update-initramfs") == 1


def test_devices_on_vfio(host):
    for address in ("0000:27:00.0", "0000:44:00.0", "0000:c4:00.0"):
        assert sandbox.driver(host, address) == "vfio-pci"
