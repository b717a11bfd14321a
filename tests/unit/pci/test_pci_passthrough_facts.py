"""Discovery on trees laid out as the kernel lays them out, and every error path with the bad tree itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest

from ogc_testlib import COLLECTION, COLLECTIONS, PCI_IDS, ROOT


def test_seed_server_facts(host_facts):
    facts = host_facts("seed-v100")
    assert facts["iommu_enabled"] is True
    assert facts["iommu_units"] == ["ivhd0"]
    assert (facts["cpu_vendor"], facts["virtualization"], facts["hypervisor"]) == ("amd", "svm", False)
    assert facts["cpu_model"] == "AMD EPYC 7352 24-Core Processor"
    assert facts["efi"] is True
    assert facts["kernel_cmdline"][-3:] == ["ro", "quiet", "splash"]
    assert facts["iommu_groups"]["19"] == ["0000:20:03.1", "0000:25:00.0", "0000:26:08.0", "0000:26:10.0",
                                           "0000:27:00.0", "0000:28:00.0"]
    assert facts["iommu_groups"]["87"][-2:] == ["0000:c3:00.0", "0000:c4:00.0"]
    gpus = [d for d in facts["devices"] if (d["vendor_id"], d["product_id"]) == ("10de", "1db4")]
    assert len(gpus) == 6
    v100 = next(d for d in gpus if d["address"] == "0000:a3:00.0")
    assert v100 == {"address": "0000:a3:00.0", "vendor_id": "10de", "product_id": "1db4", "class_id": "030200",
                    "driver": "nouveau", "driver_module": "nouveau", "iommu_group": "75", "numa_node": 1, "boot_vga": False,
                    "sriov_totalvfs": None, "driver_override": None,
                    # Named from Debian's pci.ids, as lspci names it.
                    "vendor_name": "NVIDIA Corporation", "device_name": "GV100GL [Tesla V100 PCIe 16GB]",
                    "subsystem_name": None,
                    # Its memory windows from its resource file, and the kernel's reset for it (reset_method).
                    "bars": [{"index": 0, "size": 16 << 20, "is_64bit": False, "prefetchable": False},
                             {"index": 1, "size": 16 << 30, "is_64bit": True, "prefetchable": True},
                             {"index": 3, "size": 32 << 20, "is_64bit": True, "prefetchable": True}],
                    "reset_methods": ["bus"], "resettable": True}
    assert facts["pci_ids"] == "/usr/share/misc/pci.ids"
    bmc = next(d for d in facts["devices"] if d["address"] == "0000:03:00.0")
    assert bmc["boot_vga"] is True and bmc["driver"] == "ast"
    assert (bmc["vendor_name"], bmc["device_name"]) == ("ASPEED Technology, Inc.", "ASPEED Graphics Family")
    bridge = next(d for d in facts["devices"] if d["address"] == "0000:20:03.1")
    assert bridge["driver"] is None and bridge["driver_module"] is None
    # The fixture gives the bridge no resource file (as a capture from before discovery read it): both unknown.
    assert (bridge["bars"], bridge["reset_methods"], bridge["resettable"]) == (None, None, None)
    # Groups are ordered numerically, devices by address.
    assert list(facts["iommu_groups"]) == sorted(facts["iommu_groups"], key=int)
    assert [d["address"] for d in facts["devices"]] == sorted(d["address"] for d in facts["devices"])


def test_intel_host_without_iommu(host_facts):
    facts = host_facts("intel-pre-iommu")
    assert facts["iommu_enabled"] is False and facts["iommu_groups"] == {} and facts["iommu_units"] == []
    assert (facts["cpu_vendor"], facts["virtualization"]) == ("intel", "vmx")
    assert all(d["iommu_group"] is None for d in facts["devices"])
    after = host_facts("intel-pre-iommu", iommu=True)
    assert after["iommu_units"] == ["dmar0"] and after["iommu_groups"]["20"] == ["0000:17:00.0", "0000:18:00.0"]


def test_sriov_numa_minus_one_unbound_and_override(host_facts, fixture_host, facts_module):
    facts = host_facts("a100-t4")
    a100 = next(d for d in facts["devices"] if d["address"] == "0000:41:00.0")
    assert a100["sriov_totalvfs"] == 16
    shared = host_facts("shared-group")
    assert all(d["numa_node"] is None for d in shared["devices"])  # numa_node -1 on a single-node host
    assert shared["efi"] is False
    root = fixture_host("console-twin", drivers={"0000:0b:00.0": None})
    with open(os.path.join(root, "sys/bus/pci/devices/0000:0b:00.0/driver_override"), "w") as fh:
        fh.write("vfio-pci\n")
    dev = next(d for d in facts_module.discover(f"{root}/sys", f"{root}/proc")["devices"] if d["address"] == "0000:0b:00.0")
    assert dev["driver"] is None and dev["driver_override"] == "vfio-pci"


def test_a_device_on_vfio_pci_names_the_modules_its_modalias_resolves_to(fixture_host, facts_module):
    root = fixture_host("console-twin", drivers={"0000:0b:00.0": "vfio-pci"})
    with open(os.path.join(root, "sys/bus/pci/devices/0000:0b:00.0/modalias"), "w") as fh:
        fh.write("pci:v000010DEd00001DB4sv000010DEsd00001212bc03sc02i00\n")
    asked = []

    def resolve(alias):
        asked.append(alias)
        return ["nouveau", "vfio_pci"]

    devices = {d["address"]: d for d in facts_module.discover(f"{root}/sys", f"{root}/proc", None, resolve)["devices"]}
    assert devices["0000:0b:00.0"]["host_modules"] == ["nouveau"]  # vfio-pci itself is no host driver
    assert asked == ["pci:v000010DEd00001DB4sv000010DEsd00001212bc03sc02i00"]  # asked for vfio-pci devices only
    assert not any("host_modules" in d for a, d in devices.items() if a != "0000:0b:00.0")
    # Without a resolver (a captured tree, not the live /sys) nothing is added.
    plain = facts_module.discover(f"{root}/sys", f"{root}/proc")["devices"]
    assert not any("host_modules" in d for d in plain)


def test_cpu_without_virtualization_flag(facts_module):
    parsed = facts_module.parse_cpuinfo("vendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fpu sse\n")
    assert parsed == ("intel", "Xeon", None, False)
    assert facts_module.parse_cpuinfo("vendor_id : HygonGenuine\nflags : svm\n")[::2] == ("amd", "svm")
    assert facts_module.parse_cpuinfo("") == (None, None, None, False)


def test_the_hypervisor_flag_says_the_host_is_a_virtual_machine(tmp_path, mock_sysfs, facts_module):
    # The first processor's flags are read, as for svm/vmx; the word must be a whole flag.
    guest = "vendor_id : GenuineIntel\nflags : fpu sse hypervisor lahf_lm\n\nflags : fpu\n"
    assert facts_module.parse_cpuinfo(guest) == ("intel", None, None, True)
    assert facts_module.parse_cpuinfo("flags : fpu vmx\n\nflags : hypervisor\n")[2:] == ("vmx", False)
    assert facts_module.parse_cpuinfo("flags : fpu not_hypervisor\n")[3] is False
    # A fixture says hypervisor: true (scripts/mock_sysfs.py), and discovery reports it.
    mock_sysfs.build_tree({"cpu": {"vendor": "intel", "virtualization": False, "hypervisor": True}, "devices": []},
                          str(tmp_path))
    facts = facts_module.discover(str(tmp_path / "sys"), str(tmp_path / "proc"))
    assert (facts["hypervisor"], facts["virtualization"]) == (True, None)


def test_quoted_cmdline_values_stay_whole(tmp_path, fixture_host, facts_module):
    root = tmp_path / "h"
    shutil.copytree(fixture_host("seed-v100"), root, symlinks=True)
    (root / "proc" / "cmdline").write_text('ro dyndbg="file drivers/vfio/* +p" iommu=pt\n')
    facts = facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert facts["kernel_cmdline"] == ["ro", 'dyndbg="file drivers/vfio/* +p"', "iommu=pt"]


def _gpu_dir(root, address="0000:27:00.0"):
    return os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / address)


def _gpu(facts_module, root, address="0000:27:00.0"):
    return next(d for d in facts_module.discover(str(root / "sys"), str(root / "proc"))["devices"]
                if d["address"] == address)


@pytest.mark.parametrize("change, methods", [
    (lambda d: None, ["bus"]),                                                        # reset_method: the kernel's
    (lambda d: open(os.path.join(d, "reset_method"), "w").write("flr bus\n"), ["flr", "bus"]),
    (lambda d: open(os.path.join(d, "reset_method"), "w").write("flr,pm\n"), ["flr", "pm"]),  # 5.15's first form
    (lambda d: open(os.path.join(d, "reset_method"), "w").write("\n"), []),           # every method disabled
    (lambda d: os.unlink(os.path.join(d, "reset_method")), ["unknown"]),             # a kernel before 5.15
    (lambda d: (os.unlink(os.path.join(d, "reset_method")), os.unlink(os.path.join(d, "reset"))), []),  # no reset
    # No resource file either: a capture that did not copy these attributes, where absence says nothing.
    (lambda d: [os.unlink(os.path.join(d, n)) for n in ("reset_method", "reset", "resource")], None),
])
def test_reset_methods_from_the_kernels_files(copy_of, facts_module, change, methods):
    root = copy_of()
    change(_gpu_dir(root))
    gpu = _gpu(facts_module, root)
    assert gpu["reset_methods"] == methods
    assert gpu["resettable"] is (None if methods is None else bool(methods))


def test_reset_is_never_opened(copy_of, facts_module, monkeypatch):
    """The kernel's reset file is write-only and writing it resets the device: discovery checks that it exists and
    is a regular file, never opens it."""
    root = copy_of()
    os.unlink(os.path.join(_gpu_dir(root), "reset_method"))
    opened, real_open = [], os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: (opened.append(os.fspath(path)), real_open(path, *a, **k))[1])
    assert _gpu(facts_module, root)["reset_methods"] == ["unknown"]
    assert any(p.endswith("/resource") for p in opened) and not any(p.endswith("/reset") for p in opened)


def test_windows_from_the_resource_file(copy_of, facts_module):
    root = copy_of()
    # A 64-bit non-prefetchable BAR, an I/O BAR, a ROM and a VF BAR (lines 7-12): only memory BARs 0-5 count.
    lines = ["0x000000c000000000 0x000000c00007ffff 0x0000000000140204",
             "0x0000000000000000 0x0000000000000000 0x0000000000000000",
             "0x0000000000002000 0x000000000000207f 0x0000000000040101",
             "0x0000000000000000 0x0000000000000000 0x0000000000000000",
             "0x00000000f1000000 0x00000000f1003fff 0x0000000000042208",
             "0x0000000000000000 0x0000000000000000 0x0000000000000000",
             "0x00000000f0000000 0x00000000f007ffff 0x0000000000046200",
             "0x000000d000000000 0x000000d0ffffffff 0x000000000014220c"] + ["0x%016x 0x%016x 0x%016x" % (0, 0, 0)] * 5
    with open(os.path.join(_gpu_dir(root), "resource"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    assert _gpu(facts_module, root)["bars"] == [
        {"index": 0, "size": 512 << 10, "is_64bit": True, "prefetchable": False},
        {"index": 4, "size": 16 << 10, "is_64bit": False, "prefetchable": True}]
    os.unlink(os.path.join(_gpu_dir(root), "resource"))
    assert _gpu(facts_module, root)["bars"] is None


# ---------------------------------------------------------------------------------------------
# Error paths: each with the bad tree itself.

@pytest.fixture()
def copy_of(tmp_path, fixture_host):
    def make(name="seed-v100"):
        root = tmp_path / name
        shutil.copytree(fixture_host(name), root, symlinks=True)
        return root
    return make


def dev_dir(root, address="0000:27:00.0"):
    return os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / address)


@pytest.mark.parametrize("breakage, message", [
    (lambda r: shutil.rmtree(r / "sys"), "does not exist or is not a directory"),
    (lambda r: shutil.rmtree(r / "sys" / "bus"), "is not a sysfs tree: .*/bus/pci/devices is missing"),
    (lambda r: os.unlink(r / "proc" / "cmdline"), "cmdline is missing: procfs_root .* is not a procfs tree"),
    (lambda r: os.unlink(r / "proc" / "cpuinfo"), "cpuinfo is missing"),
    (lambda r: open(os.path.join(dev_dir(r), "vendor"), "w").write("nvidia\n"), "vendor holds 'nvidia', not a vendor ID"),
    (lambda r: open(os.path.join(dev_dir(r), "class"), "w").write("0x0302\n"), "class holds '0x0302', not a class code"),
    (lambda r: os.unlink(os.path.join(dev_dir(r), "device")), "device is missing: every PCI device in sysfs has a device ID file"),
    (lambda r: open(os.path.join(dev_dir(r), "numa_node"), "w").write("zero\n"), "numa_node holds 'zero', not an integer"),
    (lambda r: (os.unlink(os.path.join(dev_dir(r), "vendor")), os.mkdir(os.path.join(dev_dir(r), "vendor"))),
     "cannot read .*vendor: Is a directory"),
    (lambda r: (os.unlink(os.path.join(dev_dir(r), "driver")), open(os.path.join(dev_dir(r), "driver"), "w").write("x")),
     "driver should be a symlink"),
    (lambda r: os.symlink("../../../devices/pci0000:00/0000:00:00.0", r / "sys" / "bus" / "pci" / "devices" / "bogus"),
     "'bogus' is not a PCI address"),
    (lambda r: open(os.path.join(dev_dir(r), "resource"), "w").write("0x0 0x0 0x0\n"),
     r"resource is not the kernel's resource file \(it has 1 line\(s\), not the 6 BAR lines .*: a truncated copy\); "
     "recapture the host"),
    (lambda r: open(os.path.join(dev_dir(r), "resource"), "w").write("0x1 0x0 0x0\n" * 6 + "secret words\n"),
     r"resource is not the kernel's resource file \(its line 7 is not '0x<start> 0x<end> 0x<flags>' as the kernel "
     r"writes it\)"),
    (lambda r: open(os.path.join(dev_dir(r), "resource"), "w").write("0x10 0x8 0x200\n" * 7),
     r"resource is not the kernel's resource file \(its line 1 ends below its start\)"),
    (lambda r: open(os.path.join(dev_dir(r), "reset_method"), "w").write("flr; rm -rf\n"),
     r"reset_method does not hold reset method names \(like 'flr bus'\)"),
])
def test_broken_trees_fail_with_the_path_and_the_fix(copy_of, facts_module, breakage, message):
    root = copy_of()
    breakage(root)
    with pytest.raises(facts_module.DiscoveryError, match=message):
        facts_module.discover(str(root / "sys"), str(root / "proc"))


# ---------------------------------------------------------------------------------------------
# Captured trees are untrusted: links out of the tree and non-regular attribute files are refused,
# with a short message that names the path and never what a file holds; a FIFO never hangs discovery.

SECRET = "s3cr3t-token-do-not-echo"


@pytest.fixture()
def outside_file(tmp_path):
    path = tmp_path / "outside" / "secret"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


def _swap_for_link(path, target):
    os.unlink(path)
    os.symlink(target, path)


@pytest.fixture()
def no_hang():
    """Fail (instead of hanging the run) when discovery blocks for more than 20 s."""
    def alarm(signum, frame):
        raise TimeoutError("discovery blocked")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("breakage, message", [
    (lambda r, o: _swap_for_link(os.path.join(dev_dir(r), "vendor"), o),
     r"/0000:27:00.0/vendor leads outside .* \(a symlink out of the tree\): refusing to read it"),
    (lambda r, o: _swap_for_link(r / "proc" / "cmdline", o), r"proc/cmdline leads outside"),
    (lambda r, o: _swap_for_link(r / "proc" / "cpuinfo", "/proc/cpuinfo"), r"proc/cpuinfo leads outside"),
    (lambda r, o: _swap_for_link(r / "sys" / "bus" / "pci" / "devices" / "0000:27:00.0", o.parent),
     r"devices/0000:27:00.0 leads outside"),
    (lambda r, o: _swap_for_link(os.path.join(dev_dir(r), "driver"), o.parent), r"0000:27:00.0/driver leads outside"),
    (lambda r, o: (shutil.rmtree(r / "sys" / "kernel" / "iommu_groups"),
                   os.symlink(o.parent, r / "sys" / "kernel" / "iommu_groups")), r"iommu_group leads outside"),
    (lambda r, o: (os.unlink(os.path.join(dev_dir(r), "vendor")), os.mkfifo(os.path.join(dev_dir(r), "vendor"))),
     r"cannot read .*/vendor: a FIFO \(named pipe\), not a regular file"),
    (lambda r, o: (os.unlink(r / "proc" / "cmdline"), os.mkfifo(r / "proc" / "cmdline")),
     r"cannot read .*proc/cmdline: a FIFO"),
    (lambda r, o: (os.unlink(os.path.join(dev_dir(r), "numa_node")),
                   os.mknod(os.path.join(dev_dir(r), "numa_node"), stat.S_IFCHR | 0o600, os.makedev(1, 3))),
     r"cannot read .*/numa_node: a device file"),
    # An older kernel's tree (reset without reset_method): reset's presence is checked, never by following it out.
    (lambda r, o: (os.unlink(os.path.join(dev_dir(r), "reset_method")),
                   _swap_for_link(os.path.join(dev_dir(r), "reset"), o)), r"0000:27:00.0/reset leads outside"),
    (lambda r, o: (os.unlink(os.path.join(dev_dir(r), "reset_method")), os.unlink(os.path.join(dev_dir(r), "reset")),
                   os.mkfifo(os.path.join(dev_dir(r), "reset"))),
     r"cannot read .*/reset: a FIFO \(named pipe\), not a regular file"),
    (lambda r, o: _swap_for_link(os.path.join(dev_dir(r), "resource"), o), r"0000:27:00.0/resource leads outside"),
    (lambda r, o: (r / "proc" / "cmdline").write_text('ro dyndbg="open\n'),
     r"proc/cmdline cannot be read as a kernel command line: the double quote .* is never closed"),
])
def test_untrusted_capture_is_refused_without_echo_or_hang(copy_of, facts_module, outside_file, no_hang,
                                                           breakage, message):
    root = copy_of()
    breakage(root, outside_file)
    with pytest.raises(facts_module.DiscoveryError, match=message) as caught:
        facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert SECRET not in str(caught.value)
    assert len(str(caught.value)) < 400


def test_remembered_paths_resolve_as_realpath_does(copy_of, facts_module):
    """Discovery resolves paths through those it has resolved before, and follows a link from the link's own
    directory (_realpath): the answer is os.path.realpath's for every path of a captured tree, links, links
    to links, missing names, "..", a link loop, an absolute link and a link with ".." inside its target
    included."""
    root = copy_of()
    odd = root / "sys" / "odd"
    odd.mkdir()
    os.symlink("self", odd / "self")
    os.symlink("ping", odd / "pong")
    os.symlink("pong", odd / "ping")
    os.symlink(str(root / "sys" / "bus"), odd / "absolute")
    os.symlink("../bus/pci/../pci/devices", odd / "dotdot-inside")
    os.symlink("missing/deeper", odd / "dangling")
    facts_module._REAL_PATHS.clear()  # pylint: disable=protected-access
    paths = []
    for top, dirs, files in os.walk(root / "sys"):
        for name in dirs + files:
            paths += [os.path.join(top, name), os.path.join(top, name, "missing"), os.path.join(top, name, "..")]
    devices = root / "sys" / "bus" / "pci" / "devices"
    paths += [str(devices / addr / attr) for addr in os.listdir(devices) for attr in ("vendor", "driver", "driver/module",
                                                                                       "iommu_group", "nothing")]
    paths += [str(odd / name / "x") for name in os.listdir(odd)]
    assert len(paths) > 1000
    for path in paths + paths:  # the second time through the remembered paths
        assert facts_module._realpath(path) == os.path.realpath(path), path  # pylint: disable=protected-access


def test_links_inside_the_tree_still_work(copy_of, facts_module):
    """A capture's own links (bus -> devices, driver, iommu_group) resolve inside the tree and are read."""
    root = copy_of()
    facts = facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert len(facts["devices"]) > 10 and facts["iommu_enabled"] is True


def run_module(args: dict) -> tuple[int, dict, str]:
    """Run the module the way Ansible does (JSON arguments), return rc, parsed result, stderr."""
    # The collection's module_utils it imports, as AnsiballZ packs them.
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, os.path.join(COLLECTION, "plugins", "modules", "pci_passthrough_facts.py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_module_returns_facts_and_never_changes(fixture_host):
    root = fixture_host("consumer-rtx")
    rc, result, _ = run_module({"sysfs_root": f"{root}/sys", "procfs_root": f"{root}/proc", "_ansible_check_mode": True})
    assert rc == 0 and result["changed"] is False
    facts = result["ansible_facts"]["pci_passthrough"]
    assert facts["iommu_groups"]["3"] == ["0000:00:01.1", "0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"]


def test_module_failure_is_a_message_not_a_traceback(tmp_path):
    rc, result, stderr = run_module({"sysfs_root": str(tmp_path / "nowhere"), "procfs_root": "/proc"})
    assert rc == 1 and result["failed"] is True
    assert result["msg"].startswith(f"pci_passthrough_facts: sysfs_root {tmp_path}/nowhere does not exist")
    assert "passthrough_sysfs_root" in result["msg"]
    assert "Traceback" not in stderr and "exception" not in result


def test_module_reads_the_real_sys_of_this_machine_read_only():
    """The same code reads a live /sys: whatever this machine has, the result is well formed."""
    rc, result, _ = run_module({})
    assert rc == 0, result
    facts = result["ansible_facts"]["pci_passthrough"]
    for device in facts["devices"]:
        assert len(device["vendor_id"]) == 4 and len(device["class_id"]) == 6
    for group, members in facts["iommu_groups"].items():
        assert members == sorted(members)


def test_module_names_devices_from_the_database_it_is_given(fixture_host, tmp_path):
    root = fixture_host("seed-v100")
    copy = tmp_path / "pci.ids"
    copy.write_bytes(open(PCI_IDS, "rb").read())
    rc, result, _ = run_module({"sysfs_root": f"{root}/sys", "procfs_root": f"{root}/proc", "pci_ids_path": str(copy)})
    assert rc == 0, result
    facts = result["ansible_facts"]["pci_passthrough"]
    assert facts["pci_ids"] == str(copy)
    bmc = next(d for d in facts["devices"] if d["address"] == "0000:03:00.0")
    assert (bmc["vendor_name"], bmc["device_name"]) == ("ASPEED Technology, Inc.", "ASPEED Graphics Family")


@pytest.mark.parametrize("path, needle", [
    ("missing.ids", "does not exist: install the pci.ids (Debian) or hwdata (Fedora/RHEL) package, or set pci_ids_path"),
    ("", "is a directory, not the pci.ids file"),
    ("notes.txt", "holds no vendors: it is not a pci.ids file"),
])
def test_module_bad_database_is_a_message_not_a_traceback(fixture_host, tmp_path, path, needle):
    root = fixture_host("seed-v100")
    (tmp_path / "notes.txt").write_text("not a database\n")
    rc, result, stderr = run_module({"sysfs_root": f"{root}/sys", "procfs_root": f"{root}/proc",
                                     "pci_ids_path": str(tmp_path / path)})
    assert rc == 1 and result["failed"] is True
    assert result["msg"].startswith("pci_passthrough_facts: " + str(tmp_path / path).rstrip("/"))
    assert needle in result["msg"]
    assert "Traceback" not in stderr


def test_without_a_database_names_are_null(fixture_host, facts_module):
    """Discovery without pci.ids (a host without the package): today's facts, names null."""
    root = fixture_host("seed-v100")
    facts = facts_module.discover(f"{root}/sys", f"{root}/proc")
    assert facts["pci_ids"] is None
    assert all(d["vendor_name"] is None and d["device_name"] is None and d["subsystem_name"] is None
               for d in facts["devices"])


def test_a_directory_that_cannot_be_read_is_named_not_reported_missing(copy_of, facts_module, monkeypatch):
    """A device directory of a capture that discovery may not search (mode 0, another owner): permission denied on
    it, not "class is missing" (root reads it regardless, so the denial is the system call's answer, mocked here)."""
    root = copy_of()
    blocked = dev_dir(root)
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if os.fspath(path).startswith(blocked + os.sep):
            raise PermissionError(13, "Permission denied", path)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    with pytest.raises(facts_module.DiscoveryError) as exc:
        facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert str(exc.value).startswith(f"cannot read {blocked}/")
    assert "Permission denied; run discovery as root or fix the permissions" in str(exc.value)
    assert "is missing" not in str(exc.value)


def test_a_dangling_iommu_group_link_is_not_an_active_iommu(copy_of, facts_module):
    """A capture whose iommu_groups directory is gone but whose devices still link to groups: refused, naming the
    link, instead of planning as if the IOMMU were on."""
    root = copy_of("intel-pre-iommu")
    device = dev_dir(root, "0000:00:00.0")
    os.symlink("../../../kernel/iommu_groups/7", os.path.join(device, "iommu_group"))
    with pytest.raises(facts_module.DiscoveryError) as exc:
        facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert str(exc.value).startswith(f"{device}/iommu_group points to ../../../kernel/iommu_groups/7, which does not "
                                     "exist: the tree is inconsistent")


def test_credentials_on_the_running_line_are_masked_in_the_facts(copy_of, facts_module):
    root = copy_of()
    cmdline = root / "proc" / "cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " netroot=iscsi:ogc:Zq8-pw@10.0.0.5::3260::iqn.x\n")
    facts = facts_module.discover(str(root / "sys"), str(root / "proc"))
    assert facts["kernel_cmdline"][-1] == "netroot=iscsi:ogc:********@10.0.0.5::3260::iqn.x"


@pytest.mark.parametrize("text, bits", [
    ("processor\t: 0\naddress sizes\t: 46 bits physical, 57 bits virtual\n", 46),
    ("address sizes : 43 bits physical, 48 bits virtual\naddress sizes : 52 bits physical, 57 bits virtual\n", 43),
    ("processor\t: 0\nvendor_id\t: GenuineIntel\n", None),          # a cpuinfo that does not say
    ("address sizes\t: lots of bits physical\n", None),              # not what the kernel writes: not guessed
])
def test_the_cpu_s_physical_address_bits_come_from_its_address_sizes_line(facts_module, text, bits):
    assert facts_module.parse_address_bits(text) == bits
