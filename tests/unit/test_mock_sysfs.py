"""The mocked sysfs reproduces the kernel's layout: relative symlinks that resolve where the kernel's do."""

from __future__ import annotations

import os
import tarfile

import pytest

from ogc_testlib import FIXTURES


def test_layout_matches_the_kernel(fixture_host):
    root = fixture_host("seed-v100")
    sysfs = os.path.join(root, "sys")
    link = os.path.join(sysfs, "bus/pci/devices/0000:27:00.0")
    assert os.readlink(link) == "../../../devices/pci0000:20/0000:20:03.1/0000:25:00.0/0000:26:08.0/0000:27:00.0"
    device = os.path.realpath(link)
    assert device == os.path.realpath(os.path.join(sysfs, "devices/pci0000:20/0000:20:03.1/0000:25:00.0/0000:26:08.0/0000:27:00.0"))
    assert os.readlink(os.path.join(device, "iommu_group")) == "../../../../../../kernel/iommu_groups/19"
    assert os.path.realpath(os.path.join(device, "iommu_group")) == os.path.realpath(os.path.join(sysfs, "kernel/iommu_groups/19"))
    assert os.path.realpath(os.path.join(device, "driver")) == os.path.realpath(os.path.join(sysfs, "bus/pci/drivers/nouveau"))
    assert os.path.realpath(os.path.join(sysfs, "bus/pci/drivers/nouveau/0000:27:00.0")) == device
    assert os.path.realpath(os.path.join(sysfs, "kernel/iommu_groups/19/devices/0000:28:00.0")).endswith("0000:26:10.0/0000:28:00.0")
    assert os.path.realpath(os.path.join(device, "subsystem")) == os.path.realpath(os.path.join(sysfs, "bus/pci"))
    with open(os.path.join(device, "vendor")) as fh:
        assert fh.read() == "0x10de\n"
    with open(os.path.join(device, "class")) as fh:
        assert fh.read() == "0x030200\n"
    assert os.readlink(os.path.join(sysfs, "class/iommu/ivhd0")) == "../../devices/pci0000:00/0000:00:00.2/iommu/ivhd0"
    assert os.path.isdir(os.path.join(sysfs, "firmware/efi"))
    assert not os.path.exists(os.path.join(device, "boot_vga"))  # only VGA-class devices have it
    with open(os.path.join(root, "etc/default/grub")) as fh:
        assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"' in fh.read()


def test_rebuild_replaces_sys_and_keeps_the_hosts_etc(tmp_path, mock_sysfs):
    fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, "intel-pre-iommu.yml"))
    mock_sysfs.build_tree(fixture, str(tmp_path))
    grub = tmp_path / "etc/default/grub"
    grub.write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on"\n')
    mock_sysfs.build_tree(fixture, str(tmp_path), iommu=True, cmdline="ro intel_iommu=on",
                          drivers={"0000:18:00.0": "vfio-pci"})
    assert grub.read_text() == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on"\n'
    assert (tmp_path / "proc/cmdline").read_text() == "ro intel_iommu=on\n"
    assert os.path.basename(os.readlink(tmp_path / "sys/bus/pci/devices/0000:18:00.0/driver")) == "vfio-pci"
    assert os.listdir(tmp_path / "sys/kernel/iommu_groups")


def test_capture_round_trip_gives_the_same_facts(tmp_path, fixture_host, mock_sysfs, facts_module):
    root = fixture_host("consumer-rtx")
    archive = tmp_path / "capture.tar.gz"
    count = mock_sysfs.capture(str(archive), os.path.join(root, "sys"), os.path.join(root, "proc"))
    assert count == 20
    out = tmp_path / "out"
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="tar")
    original = facts_module.discover(os.path.join(root, "sys"), os.path.join(root, "proc"))
    assert facts_module.discover(str(out / "sys"), str(out / "proc")) == original


def test_capture_refuses_a_tree_that_is_not_sysfs(tmp_path, mock_sysfs):
    with pytest.raises(mock_sysfs.FixtureError, match="is not a sysfs mount"):
        mock_sysfs.capture(str(tmp_path / "a.tgz"), str(tmp_path), "/proc")


def test_synthetic_tree_has_the_requested_size(tmp_path, mock_sysfs, facts_module):
    mock_sysfs.build_tree(mock_sysfs.synthetic_fixture(450), str(tmp_path))
    facts = facts_module.discover(str(tmp_path / "sys"), str(tmp_path / "proc"))
    assert len(facts["devices"]) == 450
    assert len({d["address"] for d in facts["devices"]}) == 450


@pytest.mark.parametrize("fixture, message", [
    ({"devices": [{"address": "27:00.0", "id": "10de:1db4", "class": "030200"}]}, "is not of the form 0000:27:00.0"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de1db4", "class": "030200"}]}, "is not vendor:device"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "0302"}]}, "is not 6 hex digits"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "parent": "0000:20:03.1"}]},
     "parent 0000:20:03.1 is not in the fixture"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200"}] * 2}, "is listed twice"),
    ({"cpu": {"vendor": "arm"}, "devices": []}, "cpu.vendor 'arm' must be amd or intel"),
    (["not", "a", "mapping"], "must be a mapping"),
])
def test_bad_fixture_descriptions(tmp_path, mock_sysfs, fixture, message):
    with pytest.raises(mock_sysfs.FixtureError, match=message):
        mock_sysfs.build_tree(fixture, str(tmp_path))


def test_cli_reports_errors_without_traceback(tmp_path, mock_sysfs, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("devices: [{address: nope}]\n")
    assert mock_sysfs.main(["build", str(bad), str(tmp_path / "root")]) == 2
    assert "mock_sysfs: devices[0]: address 'nope'" in capsys.readouterr().err
    assert mock_sysfs.main(["build", str(tmp_path / "missing.yml"), str(tmp_path / "root")]) == 2
    assert "cannot read fixture" in capsys.readouterr().err
