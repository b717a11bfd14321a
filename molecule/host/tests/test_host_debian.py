"""The seed V100 server and the consumer four-function host after converge (and a simulated reboot)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["seed-v100", "consumer-rtx"]

V100 = ["0000:27:00.0", "0000:28:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:c4:00.0"]
RTX = [f"0000:0{card}:00.{fn}" for card in (1, 2) for fn in range(4)]


def is_seed(host):
    return host.backend.get_hostname() == "seed-v100"


def test_grub_line_has_the_planned_args_once_and_keeps_the_rest(host):
    line = sandbox.cmdline_value(host)
    ids = "10de:1db4" if is_seed(host) else "10de:10f7,10de:1ad6,10de:1ad7,10de:1e07"
    before = "quiet splash" if is_seed(host) else "quiet"
    assert line == (f'GRUB_CMDLINE_LINUX_DEFAULT="{before} iommu=pt vfio-pci.ids={ids} rd.driver.pre=vfio-pci '
                    'modprobe.blacklist=nouveau,nvidiafb"')
    grub = sandbox.read(host, "etc/default/grub")
    assert 'GRUB_CMDLINE_LINUX=""' in grub and "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`" in grub


def test_grub_backup_holds_the_original(host):
    backups = sorted((sandbox.root(host) / "etc" / "default").glob("grub.*~"))
    assert len(backups) == 1
    before = "quiet splash" if is_seed(host) else "quiet"
    assert f'GRUB_CMDLINE_LINUX_DEFAULT="{before}"\n' in backups[0].read_text()


def test_modprobe_options_and_softdeps(host):
    lines = sandbox.content_lines(sandbox.read(host, "etc/modprobe.d/vfio.conf"))
    if is_seed(host):
        assert lines == ["options vfio-pci ids=10de:1db4", "softdep nouveau pre: vfio-pci",
                         "softdep nvidia pre: vfio-pci", "softdep nvidiafb pre: vfio-pci"]
    else:
        assert lines[0] == "options vfio-pci ids=10de:10f7,10de:1ad6,10de:1ad7,10de:1e07"
        assert "softdep snd_hda_intel pre: vfio-pci" in lines and "softdep xhci_pci pre: vfio-pci" in lines
        assert "softdep i2c_nvidia_gpu pre: vfio-pci" in lines
    assert not any(line.startswith("install ") for line in lines)


def test_blacklist_and_early_modules(host):
    assert sandbox.content_lines(sandbox.read(host, "etc/modprobe.d/blacklist-passthrough.conf")) == [
        "blacklist nouveau", "blacklist nvidiafb"]
    assert sandbox.content_lines(sandbox.read(host, "etc/modules-load.d/vfio.conf")) == [
        "vfio", "vfio_iommu_type1", "vfio_pci"]
    modules = sandbox.read(host, "etc/initramfs-tools/modules")
    assert "vfio\nvfio_iommu_type1\nvfio_pci\n" in modules and modules.count("vfio_pci") == 1


def test_no_per_address_binding_when_ids_suffice(host):
    for rel in ("usr/local/sbin/vfio-pci-bind", "etc/systemd/system/vfio-pci-bind.service",
                "etc/initramfs-tools/hooks/vfio-pci-bind"):
        assert not sandbox.exists(host, rel)


def test_tools_ran_once_each_and_one_reboot(host):
    assert sandbox.calls(host) == [["update-grub"], ["update-initramfs", "-u", "-k", "all"]]
    reboots = sandbox.reboots(host)
    assert len(reboots) == 1 and "vfio-pci.ids=" in reboots[0]


def test_devices_are_on_vfio_pci_after_the_reboot(host):
    for address in (V100 if is_seed(host) else RTX):
        assert sandbox.driver(host, address) == "vfio-pci", address
    console = "0000:03:00.0" if is_seed(host) else "0000:31:00.0"
    assert sandbox.driver(host, console) == "ast"
