"""Unit tests of the real-kernel harness's pure parts (no qemu): kernel log, GRUB line, capture, modules."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from realkernel import guest, klog, scenario, vm  # noqa: E402

DMESG = """\
[    0.000000] Kernel command line: quiet amd_iommu=on intel_iommu=1 iommu_pt vfio-pci.idz=1 rd.driver.pre=vfio-pci
[    0.049591] MMIO Stale Data: Unknown: No mitigations
[    0.061000] AMD-Vi: Unknown option - 'on'
[    0.062000] DMAR: Unknown option - '1'
[    0.070000] Malformed early option 'earlyprintk'
[    1.500000] Unknown kernel command line parameters "iommu_pt rd.driver.pre=vfio-pci", will be passed to user space.
[    6.014356] VFIO - User Level meta-driver version: 0.3
[    6.020000] vfio_pci: unknown parameter 'idz' ignored
[    6.030000] vfio_iommu_type1: `maybe' invalid for parameter `allow_unsafe_interrupts'
[    6.040000] vfio_pci: invalid id string "12345:1111"
"""


def test_klog_finds_each_kind_of_rejection_in_the_kernels_words():
    assert klog.cmdline_complaints(DMESG) == [
        "AMD-Vi: Unknown option - 'on'",
        "DMAR: Unknown option - '1'",
        "Malformed early option 'earlyprintk'",
        'Unknown kernel command line parameters "iommu_pt rd.driver.pre=vfio-pci", will be passed to user space.',
        "vfio_pci: unknown parameter 'idz' ignored",
        "vfio_iommu_type1: `maybe' invalid for parameter `allow_unsafe_interrupts'",
        'vfio_pci: invalid id string "12345:1111"',
    ]


def test_klog_does_not_count_initramfs_arguments_passed_to_user_space():
    line = '[ 1.5] Unknown kernel command line parameters "rd.driver.pre=vfio-pci BOOT_IMAGE=/vmlinuz", will be passed to user space.'
    assert klog.cmdline_complaints(line) == []
    assert klog.passed_to_userspace(line) == ["rd.driver.pre=vfio-pci", "BOOT_IMAGE=/vmlinuz"]
    klog.assert_cmdline_accepted(line + "\n[ 2.0] MMIO Stale Data: Unknown: No mitigations\n", "rd.driver.pre=vfio-pci")


def test_klog_assertion_quotes_the_kernel_and_the_line():
    with pytest.raises(AssertionError) as failure:
        klog.assert_cmdline_accepted(DMESG, "quiet amd_iommu=on")
    message = str(failure.value)
    assert message.startswith("the kernel rejected or ignored part of the command line `quiet amd_iommu=on`")
    assert "  AMD-Vi: Unknown option - 'on'" in message and "  vfio_pci: unknown parameter 'idz' ignored" in message


def test_first_boot_line_comes_from_the_cloud_image_drop_in_through_grub_cfg(tmp_path):
    sandbox = tmp_path / "sandbox"
    scenario.seed_sandbox(sandbox, "intel")
    assert scenario.grub_kernel_args(sandbox) == ["console=tty1", "console=ttyS0", "intel_iommu=off"]
    # The drop-in overrides /etc/default/grub: its value is what the generated entry boots.
    grub = sandbox / "etc" / "default" / "grub"
    grub.write_text(grub.read_text().replace('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"',
                                             'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash intel_iommu=on"'))
    subprocess.run(scenario.boot_config_command(sandbox), check=True)
    assert "intel_iommu=on" not in scenario.grub_kernel_args(sandbox)


def test_guest_files_ship_the_module_configuration_and_nothing_else(tmp_path):
    scenario.seed_sandbox(tmp_path / "s", "amd")
    tmp_path = tmp_path / "s"
    assert scenario.grub_kernel_args(tmp_path) == ["console=tty1", "console=ttyS0", "amd_iommu=off"]
    files = {"etc/modprobe.d/vfio.conf": b"options vfio-pci ids=1234:1111\n",
             "etc/modules-load.d/vfio.conf": b"vfio_pci\n",
             "etc/initramfs-tools/modules": b"vfio\n",
             "etc/default/grub.123.2026-11-21@19:15:37~": b"backup\n",
             "etc/initramfs-tools/hooks/vfio-pci-bind": b"#!/bin/sh\n"}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    assert scenario.guest_files(tmp_path) == {rel: files[rel] for rel in (
        "etc/modprobe.d/vfio.conf", "etc/modules-load.d/vfio.conf", "etc/initramfs-tools/modules")}


def _capture(tmp_path, members: dict, noise: str = "\r\n") -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, target in members.items():
            info = tarfile.TarInfo(name)
            if target.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, target[2:]
                tar.addfile(info)
            else:
                info.size = len(target)
                tar.addfile(info, io.BytesIO(target.encode()))
    encoded = base64.encodebytes(buf.getvalue()).decode().replace("\n", noise)
    path = tmp_path / "capture.b64"
    path.write_text(f"garbage\nRK-CAPTURE-BEGIN{noise}{encoded}RK-CAPTURE-END{noise}")
    return path


def test_unpack_capture_rebuilds_attributes_and_relative_links(tmp_path):
    path = _capture(tmp_path, {"./sys/devices/pci0000:00/0000:00:02.0/vendor": "0x1234\n",
                               "./sys/bus/pci/devices/0000:00:02.0": "->../../../devices/pci0000:00/0000:00:02.0"})
    root = vm.unpack_capture(path, tmp_path / "root")
    assert (root / "sys/bus/pci/devices/0000:00:02.0/vendor").read_text() == "0x1234\n"


def test_unpack_capture_names_a_missing_or_damaged_capture(tmp_path):
    (tmp_path / "none.b64").write_text("")
    with pytest.raises(vm.BootError, match="the guest sent no capture on ttyS1 .got 0 bytes.; console tail:\nboot log"):
        vm.unpack_capture(tmp_path / "none.b64", tmp_path / "r1", "boot log")
    (tmp_path / "bad.b64").write_text("RK-CAPTURE-BEGIN\nAAAA\nRK-CAPTURE-END\n")
    with pytest.raises(vm.BootError, match="the guest's capture is damaged"):
        vm.unpack_capture(tmp_path / "bad.b64", tmp_path / "r2")


def _ko(moddir: Path, rel: str, modinfo: str) -> None:
    path = moddir / "kernel" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF\x00" + modinfo.replace(";", "\x00").encode() + b"\x00")


def test_module_closure_follows_depends_and_softdeps_but_not_builtins(tmp_path):
    _ko(tmp_path, "drivers/vfio/pci/vfio-pci.ko", "depends=vfio-pci-core,vfio;name=vfio_pci")
    _ko(tmp_path, "drivers/vfio/pci/vfio-pci-core.ko", "depends=vfio,irqbypass")
    _ko(tmp_path, "drivers/vfio/vfio.ko", "softdep=post: vfio_iommu_type1 vfio_iommu_spapr_tce;depends=")
    _ko(tmp_path, "drivers/vfio/vfio_iommu_type1.ko", "depends=vfio")
    _ko(tmp_path, "virt/lib/irqbypass.ko", "depends=")
    _ko(tmp_path, "drivers/unused.ko", "depends=")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/pci/pcieport.ko\n")
    names = [p.name for p in guest.module_closure(tmp_path, ["vfio_pci", "pcieport"])]
    assert sorted(names) == ["irqbypass.ko", "vfio-pci-core.ko", "vfio-pci.ko", "vfio.ko", "vfio_iommu_type1.ko"]
    with pytest.raises(guest.GuestBuildError, match="module nvidia is neither in .* nor built into the kernel"):
        guest.module_closure(tmp_path, ["nvidia"])


def test_newc_archive_lays_out_directories_then_files(tmp_path):
    out = tmp_path / "overlay.cpio"
    guest.newc_archive({"etc/modprobe.d/vfio.conf": b"options vfio-pci ids=1234:1111\n"}, out)
    data = out.read_bytes()
    names = []
    offset = 0
    while True:
        header = data[offset:offset + 110].decode()
        assert header.startswith("070701")
        namesize, filesize = int(header[94:102], 16), int(header[54:62], 16)
        name = data[offset + 110:offset + 110 + namesize - 1].decode()
        names.append(name)
        offset += 110 + namesize
        offset += (4 - offset % 4) % 4
        body = data[offset:offset + filesize]
        offset += filesize + (4 - filesize % 4) % 4
        if name == "TRAILER!!!":
            break
        if name == "etc/modprobe.d/vfio.conf":
            assert body == b"options vfio-pci ids=1234:1111\n"
    assert names == ["etc", "etc/modprobe.d", "etc/modprobe.d/vfio.conf", "TRAILER!!!"]
    assert offset == len(data)
