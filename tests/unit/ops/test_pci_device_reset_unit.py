"""pci_device_reset: the pure rule (plugins/module_utils/pci/reset.py: decide, holds; examples and properties) and the module
on sandbox hosts built by scripts/mock_sysfs.py from the seed V100 fixture (the kernel's layout): check mode writes
nothing, a real run writes 1 to reset, and every reason not to (not on vfio-pci, held open, no usable reset, a link
out of the tree) skips the device with what to do. The playbook around it: tests/integration/ops/test_return_gpus.py.
"""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import FIXTURES, collection_module

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import reset as pci_reset  # noqa: E402

RC = "CUSTOM_PCI_10DE_1DB4"
UUID = "5c3f0e1a-0b7e-4bb1-9a53-5a4c4f0c2c11"
RESETTABLE = {"address": "0000:27:00.0", "resettable": True, "reset_methods": ["bus"]}


@pytest.fixture(scope="module")
def reset_module():
    return collection_module("pci_device_reset")


# ------------------------------------------------------------------ pure parts

def device(**changes):
    """What sysfs shows of a device that may be reset."""
    view = dict(present=True, path="/sys/bus/pci/devices/0000:27:00.0", driver="vfio-pci", iommu_group="19",
                reset_path="/sys/devices/pci0000:20/0000:27:00.0/reset", holders=[], unreadable=[])
    view.update(changes)
    return view


@pytest.mark.parametrize("changes, entry, kind, words", [
    ({"present": False}, RESETTABLE, "blocked", "is not on the PCI bus (/sys/bus/pci/devices/0000:27:00.0 is missing)"),
    ({"driver": "nvidia"}, RESETTABLE, "blocked", "is bound to nvidia, not vfio-pci"),
    ({"driver": None}, RESETTABLE, "blocked", "is bound to no driver, not vfio-pci"),
    ({"iommu_group": None}, RESETTABLE, "blocked", "has no IOMMU group"),
    ({"holders": [{"pid": 4242, "comm": "qemu-system-x86", "target": "/dev/vfio/19"}]}, RESETTABLE, "blocked",
     "its IOMMU group 19 is held open by qemu-system-x86 (pid 4242, /dev/vfio/19)"),
    ({"unreadable": [{"path": "/proc/7/fd", "error": "Permission denied"}]}, RESETTABLE, "blocked",
     "cannot tell whether a process holds its IOMMU group 19: /proc/7/fd: Permission denied"),
    ({}, None, "no_reset", "is not in the host's passthrough plan"),
    ({}, dict(RESETTABLE, resettable=None), "no_reset", "does not say whether the kernel can reset it"),
    ({}, dict(RESETTABLE, resettable=False, reset_methods=[]), "no_reset", "has no usable reset"),
    ({"reset_path": None}, RESETTABLE, "no_reset", "the plan says the kernel can reset it (bus), but sysfs has no"),
])
def test_decide_skips_with_the_reason(changes, entry, kind, words):
    decision = pci_reset.decide("gpu01", "0000:27:00.0", device(**changes), entry, UUID, RC)
    assert decision["action"] == "skip" and decision["kind"] == kind
    assert decision["reason"].startswith("gpu01: GPU 0000:27:00.0") and words in decision["reason"]
    assert "not reset, not returned" in decision["reason"]


def test_decide_names_the_command_that_returns_it_by_hand():
    reason = pci_reset.decide("gpu01", "0000:27:00.0", device(), dict(RESETTABLE, resettable=False), UUID,
                              RC)["reason"]
    assert f"`openstack resource provider inventory set {UUID} --amend --resource {RC}:reserved=0`" in reason
    assert "Drain and reboot the host" in reason and "return_gpus_without_reset=true" in reason


def test_decide_resets_a_device_that_may_be_reset():
    assert pci_reset.decide("gpu01", "0000:27:00.0", device(), RESETTABLE) == dict(action="reset", kind=None,
                                                                                   reason="")


@given(present=st.booleans(), driver=st.sampled_from(["vfio-pci", "nvidia", None]),
       group=st.sampled_from(["19", None]), held=st.booleans(), unreadable=st.booleans(),
       entry=st.sampled_from([None, True, False, "unknown"]), reset_file=st.booleans())
@settings(max_examples=200, deadline=None)
def test_decide_property(present, driver, group, held, unreadable, entry, reset_file):
    """Reset exactly when every condition holds; what may harm the device or its user (blocked) wins over what the
    kernel cannot do (no_reset); every reason names the host and the device."""
    view = device(present=present, driver=driver, iommu_group=group,
                  holders=[{"pid": 1, "comm": "qemu", "target": "/dev/vfio/19"}] if held else [],
                  unreadable=[{"path": "/proc/1/fd", "error": "Permission denied"}] if unreadable else [],
                  reset_path="/sys/x/reset" if reset_file else None)
    plan = None if entry is None else dict(RESETTABLE, resettable=None if entry == "unknown" else entry)
    decision = pci_reset.decide("gpu01", "0000:27:00.0", view, plan, UUID, RC)
    harmful = not present or driver != "vfio-pci" or group is None or held or unreadable
    unable = plan is None or plan["resettable"] is not True or not reset_file
    assert (decision["action"] == "reset") == (not harmful and not unable)
    if decision["action"] == "skip":
        assert decision["kind"] == ("blocked" if harmful else "no_reset")
        assert decision["reason"].startswith("gpu01: GPU 0000:27:00.0")


@pytest.mark.parametrize("target, held", [
    ("/dev/vfio/19", True),
    ("/dev/vfio/19 (deleted)", True),          # the node was removed since it was opened: still held
    ("/dev/vfio/noiommu-19", True),
    ("/dev/vfio/devices/vfio3", True),         # iommufd's vfio cdev of this device
    ("/dev/vfio/190", False),
    ("/dev/vfio/1", False),
    ("/dev/vfio/vfio", False),                 # the container, shared by every group
    ("/dev/vfio/devices/vfio30", False),
    ("socket:[12345]", False),
    (None, False),
])
def test_holds(target, held):
    assert pci_reset.holds(target, pci_reset.vfio_nodes("19", ["vfio3"])) is held


@given(group=st.integers(0, 4096), other=st.integers(0, 4096))
def test_holds_only_its_own_group(group, other):
    assert pci_reset.holds(f"/dev/vfio/{other}", pci_reset.vfio_nodes(str(group))) == (group == other)


def test_plan_entry():
    plan = {"selected": [{"address": "0000:27:00.0", "resettable": True}, {"address": "0000:44:00.0"}]}
    assert pci_reset.plan_entry(plan, "0000:44:00.0") == {"address": "0000:44:00.0"}
    assert pci_reset.plan_entry(plan, "0000:a3:00.0") is None
    assert pci_reset.plan_entry({}, "0000:27:00.0") is None


# ------------------------------------------------------------------ the module on sandbox hosts

@pytest.fixture
def host(tmp_path, mock_sysfs, facts_module, planner):
    """A configured seed host (its GPUs on vfio-pci) whose 0000:44:00.0 the kernel has no reset for, and its plan."""
    fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, "seed-v100.yml"))
    for dev in fixture["devices"]:
        if dev["address"] == "0000:44:00.0":
            dev.pop("reset_method")
    root = tmp_path / "seed"
    mock_sysfs.build_tree(fixture, str(root))
    plan = planner.passthrough_plan(facts_module.discover(str(root / "sys"), str(root / "proc")), {}, "seed")
    mock_sysfs.build_tree(fixture, str(root), drivers={a: "vfio-pci" for a in plan["vfio_devices"]})
    assert {s["address"]: s["resettable"] for s in plan["selected"]}["0000:44:00.0"] is False
    return root, plan


def args(root, plan, *addresses):
    return {"host": "seed", "plan": plan, "sysfs_root": str(root / "sys"), "procfs_root": str(root / "proc"),
            "devices": [{"address": a, "provider": UUID, "resource_class": RC} for a in addresses]}


def reset_size(root, address):
    """Bytes written to a device's reset (mode 0200, as the kernel's: read its size, not its content)."""
    return os.stat(os.path.join(root, "sys", "bus", "pci", "devices", address, "reset")).st_size


def test_check_mode_writes_nothing_then_a_real_run_writes_1(reset_module, run_module, host):
    root, plan = host
    check = run_module(reset_module, args(root, plan, "0000:27:00.0"), check_mode=True)
    assert check["changed"] is True and check["reset"] == ["0000:27:00.0"] and check["not_reset"] == []
    assert check["devices"][0]["outcome"] == "would_reset" and reset_size(root, "0000:27:00.0") == 0
    real = run_module(reset_module, args(root, plan, "0000:27:00.0"))
    assert real["changed"] is True and real["devices"][0]["outcome"] == "reset"
    item = real["devices"][0]
    assert item["driver"] == "vfio-pci" and item["iommu_group"] == "19" and item["holders"] == []
    assert item["reset_path"] == os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / "0000:27:00.0" / "reset")
    os.chmod(item["reset_path"], 0o600)
    assert open(item["reset_path"], encoding="utf-8").read() == "1"


def test_a_device_without_a_usable_reset_is_skipped_with_the_command(reset_module, run_module, host):
    root, plan = host
    result = run_module(reset_module, args(root, plan, "0000:44:00.0", "0000:27:00.0"))
    assert result["changed"] is True and result["reset"] == ["0000:27:00.0"]
    [skipped] = result["not_reset"]
    assert skipped["address"] == "0000:44:00.0" and skipped["kind"] == "no_reset"
    assert skipped["reason"].startswith("seed: GPU 0000:44:00.0 has no usable reset")
    assert f"openstack resource provider inventory set {UUID} --amend --resource {RC}:reserved=0" in skipped["reason"]
    assert not os.path.exists(root / "sys" / "bus" / "pci" / "devices" / "0000:44:00.0" / "reset")


def test_a_group_held_open_is_not_reset(reset_module, run_module, host):
    root, plan = host
    fd_dir = root / "proc" / "4242" / "fd"
    fd_dir.mkdir(parents=True)
    (root / "proc" / "4242" / "comm").write_text("qemu-system-x86\n")
    os.symlink("/dev/vfio/19", fd_dir / "31")
    os.symlink("/dev/vfio/vfio", fd_dir / "30")  # the container: every group's, nobody's in particular
    other = root / "proc" / "4300" / "fd"
    other.mkdir(parents=True)
    os.symlink("/dev/vfio/75", other / "9")  # group 75: holds 0000:a3:00.0, not 0000:27:00.0
    result = run_module(reset_module, args(root, plan, "0000:27:00.0", "0000:a3:00.0", "0000:c3:00.0"))
    assert result["changed"] is True and result["reset"] == ["0000:c3:00.0"]
    held, held_too, free = result["devices"]
    assert held["outcome"] == "skipped" and held["kind"] == "blocked"
    assert held["holders"] == [{"pid": 4242, "comm": "qemu-system-x86", "fd": 31, "target": "/dev/vfio/19"}]
    assert "its IOMMU group 19 is held open by qemu-system-x86 (pid 4242, /dev/vfio/19)" in held["reason"]
    assert held_too["holders"] == [{"pid": 4300, "comm": None, "fd": 9, "target": "/dev/vfio/75"}]
    assert "held open by ? (pid 4300, /dev/vfio/75)" in held_too["reason"]
    assert free["outcome"] == "reset" and free["holders"] == []
    assert reset_size(root, "0000:27:00.0") == 0 and reset_size(root, "0000:a3:00.0") == 0
    assert reset_size(root, "0000:c3:00.0") == 1


def test_an_unreadable_fd_directory_blocks(reset_module, run_module, host, monkeypatch):
    root, plan = host
    (root / "proc" / "77" / "fd").mkdir(parents=True)
    real_listdir = os.listdir

    def listdir(path):
        if str(path).endswith("/77/fd"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_listdir(path)

    monkeypatch.setattr(pci_reset.os, "listdir", listdir)
    item = run_module(reset_module, args(root, plan, "0000:27:00.0"))["devices"][0]
    assert item["outcome"] == "skipped" and item["kind"] == "blocked"
    assert f"{root}/proc/77/fd: Permission denied" in item["reason"] and "Run as root" in item["reason"]


def test_a_device_on_a_host_driver_is_not_reset(reset_module, run_module, host, mock_sysfs):
    root, plan = host
    fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, "seed-v100.yml"))
    mock_sysfs.build_tree(fixture, str(root))  # everything back on nouveau
    item = run_module(reset_module, args(root, plan, "0000:27:00.0"))["devices"][0]
    assert item["kind"] == "blocked" and "is bound to nouveau, not vfio-pci" in item["reason"]
    assert reset_size(root, "0000:27:00.0") == 0


@pytest.mark.parametrize("address, words", [
    ("0000:61:00.0", "seed: GPU 0000:61:00.0 is bound to i40e, not vfio-pci"),   # a NIC the host uses
    ("0000:99:00.0", "seed: GPU 0000:99:00.0 is not on the PCI bus"),
])
def test_other_devices_are_blocked(reset_module, run_module, host, address, words):
    root, plan = host
    item = run_module(reset_module, args(root, plan, address))["devices"][0]
    assert item["outcome"] == "skipped" and item["kind"] == "blocked" and words in item["reason"]


def test_a_device_missing_from_the_plan(reset_module, run_module, host):
    root, plan = host
    plan = dict(plan, selected=[s for s in plan["selected"] if s["address"] != "0000:27:00.0"])
    item = run_module(reset_module, args(root, plan, "0000:27:00.0"))["devices"][0]
    assert item["kind"] == "no_reset" and "is not in the host's passthrough plan" in item["reason"]


def test_links_out_of_the_tree_are_refused(reset_module, run_module, host, tmp_path):
    root, plan = host
    outside = tmp_path / "outside"
    outside.write_text("")
    base = os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / "0000:27:00.0")
    os.unlink(os.path.join(base, "reset"))
    os.symlink(str(outside), os.path.join(base, "reset"))
    item = run_module(reset_module, args(root, plan, "0000:27:00.0"))["devices"][0]
    assert item["outcome"] == "skipped" and item["kind"] == "blocked"
    assert f"leads outside {root}/sys (a symlink out of the tree, to {outside})" in item["reason"]
    assert outside.read_text() == ""
    # The device's own link out of the tree.
    link = root / "sys" / "bus" / "pci" / "devices" / "0000:44:00.0"
    os.unlink(link)
    os.symlink(str(tmp_path), link)
    item = run_module(reset_module, args(root, plan, "0000:44:00.0"))["devices"][0]
    assert item["kind"] == "blocked" and "leads outside" in item["reason"]


def test_a_failed_write_is_reported_per_device(reset_module, run_module, host, monkeypatch):
    root, plan = host

    def write(_fd, _data):
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(pci_reset.os, "write", write)
    result = run_module(reset_module, args(root, plan, "0000:27:00.0"))
    assert "failed" not in result and result["changed"] is False
    item = result["devices"][0]
    assert item["outcome"] == "failed" and item["kind"] == "blocked"
    assert "writing 1 to" in item["reason"] and "Inappropriate ioctl for device" in item["reason"]


@pytest.mark.parametrize("change, words", [
    (lambda a, root: a.update(sysfs_root=str(root)), "is not a sysfs tree"),
    (lambda a, root: a.update(procfs_root=str(root / "sys")), "is not a procfs tree"),
    (lambda a, root: a.update(sysfs_root="relative/sys"), "sysfs_root ('relative/sys') is not an absolute path"),
    (lambda a, root: a.update(plan={"plan": 1}), "plan is not a passthrough plan"),
    (lambda a, root: a.update(devices=[{"address": "27:00"}]), "'27:00' is not a PCI address"),
])
def test_refusals_fail_before_any_write(reset_module, run_module, host, change, words):
    root, plan = host
    module_args = args(root, plan, "0000:27:00.0")
    change(module_args, root)
    result = run_module(reset_module, module_args)
    assert result["failed"] is True and words in result["msg"] and "Traceback" not in result["msg"]
    assert reset_size(root, "0000:27:00.0") == 0
