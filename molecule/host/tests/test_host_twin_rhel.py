"""Console GPU twin (per-address binding) and a RHEL-family host (GRUB_CMDLINE_LINUX, grub2-mkconfig, dracut)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["console-twin", "rhel-a100"]

PASSED = [f"0000:0b:00.{fn}" for fn in range(4)]
KEPT = {"0000:0a:00.0": "nvidia", "0000:0a:00.1": "snd_hda_intel", "0000:0a:00.2": "xhci_hcd", "0000:0a:00.3": "nvidia-gpu"}


def twin(host):
    return host.backend.get_hostname() == "console-twin"


def test_cmdline(host):
    if twin(host):
        # No vfio-pci.ids (it would take the console too), no NVIDIA blacklist (an NVIDIA GPU stays).
        assert sandbox.cmdline_value(host) == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt rd.driver.pre=vfio-pci"'
    else:
        line = sandbox.cmdline_value(host, "GRUB_CMDLINE_LINUX")
        assert line == ('GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rl-swap '
                        'rd.lvm.lv=rl/root rd.lvm.lv=rl/swap iommu=pt vfio-pci.ids=10de:20f1 rd.driver.pre=vfio-pci '
                        'modprobe.blacklist=nouveau,nvidiafb"')
        assert "GRUB_CMDLINE_LINUX_DEFAULT" not in sandbox.read(host, "etc/default/grub")


def test_per_address_binding_files(host):
    if not twin(host):
        assert not sandbox.exists(host, "usr/local/sbin/vfio-pci-bind")
        return
    script = sandbox.read(host, "usr/local/sbin/vfio-pci-bind")
    assert f"for dev in {' '.join(PASSED)}; do" in script
    assert host.file(str(sandbox.root(host) / "usr/local/sbin/vfio-pci-bind")).mode == 0o755
    conf = sandbox.content_lines(sandbox.read(host, "etc/modprobe.d/vfio.conf"))
    assert not any(line.startswith("options vfio-pci ids=") for line in conf)
    assert "install vfio-pci /usr/local/sbin/vfio-pci-bind; /sbin/modprobe --ignore-install vfio-pci $CMDLINE_OPTS" in conf
    assert "softdep nvidia pre: vfio-pci" in conf
    link = sandbox.root(host) / "etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service"
    assert os.readlink(link) == "/etc/systemd/system/vfio-pci-bind.service"
    assert "ExecStart=/usr/local/sbin/vfio-pci-bind" in sandbox.read(host, "etc/systemd/system/vfio-pci-bind.service")
    assert "copy_exec /usr/local/sbin/vfio-pci-bind" in sandbox.read(host, "etc/initramfs-tools/hooks/vfio-pci-bind")
    assert not sandbox.exists(host, "etc/modprobe.d/blacklist-passthrough.conf")


def test_bind_script_binds_only_its_addresses(host, tmp_path):
    """Run the generated script against a copy of the pre-reboot sysfs layout."""
    if not twin(host):
        return
    script = sandbox.root(host) / "usr/local/sbin/vfio-pci-bind"
    fake = tmp_path / "sys" / "bus" / "pci"
    for address in PASSED + list(KEPT):
        (fake / "devices" / address).mkdir(parents=True)
        (fake / "devices" / address / "driver_override").write_text("(null)\n")
    (fake / "drivers" / "vfio-pci").mkdir(parents=True)
    (fake / "drivers_probe").write_text("")
    result = host.run("VFIO_PCI_BIND_SYSFS=%s sh %s", str(tmp_path / "sys"), str(script))
    assert result.rc == 0, result.stderr
    for address in PASSED:
        assert (fake / "devices" / address / "driver_override").read_text() == "vfio-pci\n"
    for address in KEPT:
        assert (fake / "devices" / address / "driver_override").read_text() == "(null)\n"


def test_drivers_after_the_reboot(host):
    if twin(host):
        for address in PASSED:
            assert sandbox.driver(host, address) == "vfio-pci"
        for address, driver in KEPT.items():
            assert sandbox.driver(host, address) == driver
    else:
        for address in ("0000:41:00.0", "0000:61:00.0"):
            assert sandbox.driver(host, address) == "vfio-pci"


def test_distribution_tools(host):
    if twin(host):
        assert sandbox.calls(host) == [["update-grub"], ["update-initramfs", "-u", "-k", "all"]]
    else:
        assert sandbox.calls(host) == [
            ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg", "--update-bls-cmdline"], ["dracut", "-f", "--regenerate-all"]]
        dracut = sandbox.read(host, "etc/dracut.conf.d/vfio.conf")
        assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "' in dracut
        assert 'install_items+=" /etc/modprobe.d/vfio.conf "' in dracut
        assert not sandbox.exists(host, "etc/initramfs-tools/modules")
