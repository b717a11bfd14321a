"""The mocked sysfs reproduces the kernel's layout: relative symlinks that resolve where the kernel's do."""

from __future__ import annotations

import os
import re
import stat
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


def test_windows_and_resets_as_the_kernel_shows_them(fixture_host):
    """A device's bars give it the kernel's resource file (13 lines for an endpoint, 17 for a bridge), reset_method
    the kernel's names and a write-only reset; a device the fixture says nothing of has neither (an old capture)."""
    root = fixture_host("consumer-rtx")
    devices = os.path.join(root, "sys", "bus", "pci", "devices")
    with open(os.path.join(devices, "0000:01:00.0", "resource")) as fh:
        lines = fh.read().splitlines()
    assert len(lines) == 13
    assert all(re.fullmatch(r"0x[0-9a-f]{16} 0x[0-9a-f]{16} 0x[0-9a-f]{16}", line) for line in lines)
    start, end, flags = (int(x, 16) for x in lines[1].split())
    assert (end - start + 1, flags, start % (end - start + 1)) == (256 << 20, 0x0014220c, 0)  # 256M 64-bit pref
    assert lines[5].endswith("0x0000000000040101") and lines[6].endswith("0x0000000000046200")  # I/O, ROM
    assert lines[7:] == ["0x%016x 0x%016x 0x%016x" % (0, 0, 0)] * 6  # no VF BARs
    # The 2080 Ti has no reset the kernel offers (its fixture says so): no reset, no reset_method.
    assert not {"reset", "reset_method"} & set(os.listdir(os.path.realpath(os.path.join(devices, "0000:01:00.0"))))
    assert not os.path.exists(os.path.join(devices, "0000:31:00.0", "resource"))  # the BMC: not described
    seed = os.path.join(fixture_host("seed-v100"), "sys", "bus", "pci", "devices", "0000:27:00.0")
    with open(os.path.join(seed, "reset_method")) as fh:
        assert fh.read() == "bus\n"
    assert stat.S_IMODE(os.lstat(os.path.realpath(os.path.join(seed, "reset"))).st_mode) == 0o200


def test_a_bridges_resource_has_its_window_lines(tmp_path, mock_sysfs):
    mock_sysfs.build_tree({"devices": [
        {"address": "0000:00:01.1", "id": "1022:1483", "class": "060400", "bars": {}},
        {"address": "0000:01:00.0", "id": "10de:1db4", "class": "030200", "parent": "0000:00:01.1", "reset": True,
         "bars": {0: "16M", 1: "16G pref64", 3: "32M pref64"}}]}, str(tmp_path))
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    assert len((devices / "0000:00:01.1" / "resource").read_text().splitlines()) == 17
    gpu = os.path.realpath(devices / "0000:01:00.0")
    assert os.path.exists(os.path.join(gpu, "reset")) and not os.path.exists(os.path.join(gpu, "reset_method"))


def test_capture_keeps_resource_reset_method_and_a_write_only_reset(tmp_path, fixture_host, mock_sysfs, facts_module):
    root = fixture_host("a100-t4")
    archive = tmp_path / "capture.tar.gz"
    mock_sysfs.capture(str(archive), os.path.join(root, "sys"), os.path.join(root, "proc"))
    with tarfile.open(archive) as tar:
        resets = [m for m in tar.getmembers() if m.name.endswith("/reset")]
        assert len(resets) == 4 and all(m.mode == 0o200 and m.size == 0 for m in resets)
        tar.extractall(tmp_path / "out", filter="tar")
    original = facts_module.discover(os.path.join(root, "sys"), os.path.join(root, "proc"))
    copied = facts_module.discover(str(tmp_path / "out" / "sys"), str(tmp_path / "out" / "proc"))
    assert copied == original
    a100 = next(d for d in copied["devices"] if d["address"] == "0000:41:00.0")
    assert a100["reset_methods"] == ["flr", "bus"] and a100["bars"][1]["size"] == 64 << 30


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
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "bars": ["16M"]}]},
     r"bars must map a BAR index to 'SIZE \[KIND\]'"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "bars": {7: "16M"}}]},
     r"bars 7: '16M' is not 'SIZE \[KIND\]'"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "bars": {1: "16G pref"}}]},
     r"bars 1: '16G pref' is not"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "bars": {6: "512K io"}}]},
     r"bars 6: '512K io' is not"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "bars": {1: "24M"}}]},
     r"bars 1: '24M': a BAR's size is a power of two"),
    ({"devices": [{"address": "0000:27:00.0", "id": "10de:1db4", "class": "030200", "reset_method": "flr;bus"}]},
     r"reset_method 'flr;bus' is not the kernel's method names"),
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
