"""An Intel host with a hand-edited GRUB line (custom args, single quotes, an old vfio-pci.ids, intel_iommu=off)
-> simulated reboot -> verified. (The demo's Intel host before its IOMMU is on: tests/integration/site/test_site_end_to_end.py.)"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["grub-custom"]


def test_grub_line(host):
    # Single quotes, the operator's args and the trailing comment kept; the old vfio-pci.ids and
    # intel_iommu=off replaced in place, the radeon blacklist merged with the planned one.
    assert sandbox.cmdline_value(host) == (
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet console=ttyS0,115200n8 vfio-pci.ids=10de:1eb8 intel_iommu=on "
        "modprobe.blacklist=radeon,nouveau,nvidiafb iommu=pt rd.driver.pre=vfio-pci'"
        "  # do not touch console")
    grub = sandbox.read(host, "etc/default/grub")
    assert '#GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n' in grub and 'GRUB_TERMINAL="console serial"\n' in grub


def test_each_arg_appears_once(host):
    args = sandbox.cmdline_value(host).split("=", 1)[1].split("#")[0].strip(" '\"").split()
    keys = [a.split("=")[0].replace("_", "-") for a in args]
    assert len(keys) == len(set(keys))


def test_rebooted_once_into_the_written_line_with_the_iommu_on(host):
    reboots = sandbox.reboots(host)
    assert len(reboots) == 1
    assert "intel_iommu=on" in reboots[0] and "intel_iommu=off" not in reboots[0]
    proc_cmdline = sandbox.read(host, "proc/cmdline")
    assert proc_cmdline.strip() == reboots[0]
    assert sandbox.exists(host, "sys/class/iommu/dmar0")
    groups = sorted(p.name for p in (sandbox.root(host) / "sys" / "kernel" / "iommu_groups").iterdir())
    assert "20" in groups


def test_gpus_on_vfio_pci_console_untouched(host):
    assert sandbox.driver(host, "0000:18:00.0") == "vfio-pci"
    assert sandbox.driver(host, "0000:03:00.0") == "ast"


def test_modprobe_config(host):
    lines = sandbox.content_lines(sandbox.read(host, "etc/modprobe.d/vfio.conf"))
    assert lines[0] == "options vfio-pci ids=10de:1eb8"
    assert "softdep nouveau pre: vfio-pci" in lines


def test_tools_ran_once(host):
    assert sandbox.calls(host) == [["update-grub"], ["update-initramfs", "-u", "-k", "all"]]
