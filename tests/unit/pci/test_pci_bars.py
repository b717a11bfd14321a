"""plugins/module_utils/pci/bars.py of the collection: a device's memory windows from the kernel's resource file, and the guest address bits
they need; checked on a real kernel's capture (fixtures/captures/h200-vm-windows) and by properties."""

from __future__ import annotations

import os
import re
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars as pci_bars
from ogc_testlib import ROOT

GIB, MIB = 1 << 30, 1 << 20
CAPTURE = os.path.join(ROOT, "fixtures", "captures", "h200-vm-windows")
ZERO = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
# The H200's resource file on a real kernel (the capture's 0000:00:06.0): BARs 0, 2 and 4, each 64-bit prefetchable.
H200 = """0x0000104002000000 0x0000104002ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000100000000000 0x0000103fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000104000000000 0x0000104001ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
"""


def test_parse_the_real_kernels_lines():
    assert pci_bars.parse_resource(H200) == [
        {"index": 0, "size": 16 * MIB, "is_64bit": True, "prefetchable": True},
        {"index": 2, "size": 256 * GIB, "is_64bit": True, "prefetchable": True},
        {"index": 4, "size": 32 * MIB, "is_64bit": True, "prefetchable": True}]
    # A virtio function's 64-bit BAR that is not prefetchable (this machine's own /sys has such), the host bridge's
    # all-zero file.
    virtio = "0x0000004000000000 0x000000400007ffff 0x0000000000140204\n" + (ZERO + "\n") * 6
    assert pci_bars.parse_resource(virtio) == [{"index": 0, "size": 512 << 10, "is_64bit": True, "prefetchable": False}]
    assert pci_bars.parse_resource((ZERO + "\n") * 13) == []


def test_io_bars_the_rom_and_vf_bars_are_not_windows():
    lines = ["0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200",   # 32-bit, not prefetchable
             "0x0000000000003000 0x000000000000307f 0x0000000000040101",   # I/O ports
             ZERO, ZERO, ZERO, ZERO,
             "0x00000000f1000000 0x00000000f107ffff 0x0000000000046200",   # the expansion ROM
             "0x000000d000000000 0x000000d0ffffffff 0x000000000014220c"]   # a VF BAR
    assert pci_bars.parse_resource("\n".join(lines + [ZERO] * 5)) == [
        {"index": 0, "size": 16 * MIB, "is_64bit": False, "prefetchable": False}]


@pytest.mark.parametrize("text, message", [
    ("", "it has 0 line(s), not the 6 BAR lines"),
    ((ZERO + "\n") * 5, "it has 5 line(s)"),
    ("0x1 0x2\n" + (ZERO + "\n") * 6, "its line 1 is not '0x<start> 0x<end> 0x<flags>'"),
    ((ZERO + "\n") * 6 + "0x10 0x0f\n", "its line 7 is not"),                   # beyond the BARs too
    ("0x10 0x0f 0x200\n" + (ZERO + "\n") * 6, "its line 1 ends below its start"),
    ((ZERO + "\n") * 12 + "0x0 0x1 zz\n", "its line 13 is not"),
])
def test_what_the_kernel_does_not_write_is_refused(text, message):
    with pytest.raises(pci_bars.ResourceError, match=re.escape(message)):
        pci_bars.parse_resource(text)


def test_high_windows_are_the_64_bit_prefetchable_bars():
    bars = [{"index": 0, "size": 16 * MIB, "is_64bit": False, "prefetchable": False},
            {"index": 1, "size": 64 * GIB, "is_64bit": True, "prefetchable": True},
            {"index": 2, "size": 1 * MIB, "is_64bit": True, "prefetchable": False},
            {"index": 3, "size": 2 * MIB, "is_64bit": False, "prefetchable": True}]
    assert pci_bars.high_windows(bars) == [64 * GIB]


@pytest.mark.parametrize("windows, base, bits, ovmf", [
    ([], pci_bars.FOUR_GIB, 32, None),                       # nothing above the 32-bit space
    ([256 * MIB, 32 * MIB], pci_bars.FOUR_GIB, 33, None),    # T4, RTX 2080 Ti: 4G + 288M
    ([16 * GIB, 32 * MIB], pci_bars.FOUR_GIB, 36, None),     # V100 16GB: from 16G to 32G + 32M
    ([64 * GIB, 32 * MIB], pci_bars.FOUR_GIB, 38, 41),       # A100 40GB: 64G + 64G + 32M; more than OVMF's 32G
    ([16 * MIB, 256 * GIB, 32 * MIB], pci_bars.FOUR_GIB, 40, 42),   # the captured H200: 512G + 48M
    ([128 * GIB, 32 * MIB] * 8, pci_bars.FOUR_GIB, 41, 44),  # eight H100s in one guest: 128G + 1T + 256M
    ([16 * GIB, 32 * MIB], 100 * GIB, 38, None),             # 96 GiB of RAM above 4G first: 112G + 16G + 32M
    ([3 * MIB], pci_bars.FOUR_GIB, 33, None),                # not a power of two: takes 4M
])
def test_guest_phys_bits_examples(windows, base, bits, ovmf):
    assert pci_bars.guest_phys_bits_needed(windows, base) == bits
    if base == pci_bars.FOUR_GIB:
        assert pci_bars.ovmf_phys_bits_needed(windows) == ovmf


@pytest.mark.parametrize("windows, base", [([0], pci_bars.FOUR_GIB), ([-4096], pci_bars.FOUR_GIB),
                                           ([True], pci_bars.FOUR_GIB), (["16G"], pci_bars.FOUR_GIB),
                                           ([1.5], pci_bars.FOUR_GIB), ([4096], -1), ([4096], None)])
def test_bad_windows_and_bases_are_named(windows, base):
    bad = windows[0] if base == pci_bars.FOUR_GIB else base
    with pytest.raises(pci_bars.ResourceError, match=re.escape(repr(bad))):
        pci_bars.guest_phys_bits_needed(windows, base)


POW2 = st.integers(12, 44).map(lambda shift: 1 << shift)
SIZES = st.integers(1, 1 << 44)
BASES = st.integers(0, 1 << 42)


def _placed(windows, base):
    """Place the windows as firmware does: largest first, each at the next address aligned to its size."""
    at, placed = base, []
    for size in sorted((1 << (w - 1).bit_length() for w in windows), reverse=True):
        at = -(-at // size) * size
        placed.append((at, size))
        at += size
    return placed


@settings(max_examples=300, deadline=None)
@given(st.lists(POW2, max_size=10), BASES)
def test_property_every_window_fits_below_the_bits_and_one_fewer_is_too_few(windows, base):
    bits = pci_bars.guest_phys_bits_needed(windows, base)
    placed = _placed(windows, base)
    end = max([base] + [start + size for start, size in placed])
    for start, size in placed:
        assert start % size == 0 and start >= base and start + size <= 1 << bits
    for (a, sa), (b, _) in zip(placed, placed[1:]):
        assert a + sa <= b  # no overlap, no gap left behind: placed largest first
    assert bits == 32 or end > 1 << (bits - 1)  # the fewest that hold them
    assert bits >= 32


@settings(max_examples=200, deadline=None)
@given(st.lists(SIZES, max_size=8), SIZES, BASES, st.randoms(use_true_random=False))
def test_property_order_does_not_matter_and_more_never_needs_less(windows, extra, base, rnd):
    bits = pci_bars.guest_phys_bits_needed(windows, base)
    shuffled = list(windows)
    rnd.shuffle(shuffled)
    assert pci_bars.guest_phys_bits_needed(shuffled, base) == bits
    assert pci_bars.guest_phys_bits_needed(windows + [extra], base) >= bits
    assert pci_bars.guest_phys_bits_needed(windows, base + base // 2) >= bits
    # A size counts as the power of two at or above it.
    assert pci_bars.guest_phys_bits_needed([1 << (w - 1).bit_length() for w in windows], base) == bits


@settings(max_examples=200, deadline=None)
@given(st.lists(SIZES, max_size=8))
def test_property_ovmf_asks_only_beyond_its_defaults_and_never_for_less(windows):
    ovmf = pci_bars.ovmf_phys_bits_needed(windows)
    span, bits = pci_bars.mmio64_bytes(windows), pci_bars.guest_phys_bits_needed(windows)
    fits_defaults = span <= pci_bars.OVMF_DEFAULT_MMIO64_BYTES and bits <= pci_bars.QEMU_DEFAULT_PHYS_BITS
    assert (ovmf is None) is fits_defaults
    if ovmf is not None:
        # The width OVMF trusts, holding the span in the top eighth of the address space, and the windows at all.
        assert ovmf >= 41 and span <= 1 << (ovmf - 3) and ovmf >= bits


def test_window_facts_and_sizes():
    bars = pci_bars.parse_resource(H200)
    assert pci_bars.window_facts(bars) == {"bars_total_bytes": 256 * GIB + 48 * MIB, "bar64_largest_bytes": 256 * GIB,
                                           "mmio64_bytes": 256 * GIB + 48 * MIB, "guest_phys_bits_needed": 40,
                                           "ovmf_phys_bits_needed": 42}
    assert pci_bars.window_facts([]) == {"bars_total_bytes": 0, "bar64_largest_bytes": 0, "mmio64_bytes": 0,
                                         "guest_phys_bits_needed": 32, "ovmf_phys_bits_needed": None}
    assert set(pci_bars.window_facts(None).values()) == {None}  # facts without the resource file
    assert [pci_bars.size_text(n) for n in (16 * GIB, 256 * MIB, 4096, 128, 64 * GIB + 32 * MIB, 1 << 40, None)] == [
        "16G", "256M", "4K", "128", "65568M", "1T", "?"]


# ---- The real kernel's capture ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory, facts_module):
    out = tmp_path_factory.mktemp("h200-vm-windows")
    with tarfile.open(os.path.join(CAPTURE, "capture.tar.gz")) as tar:
        tar.extractall(out, filter="tar")
    return out, {d["address"]: d for d in facts_module.discover(str(out / "sys"), str(out / "proc"))["devices"]}


def test_the_capture_holds_what_the_kernel_printed(captured):
    """Each resource file in the capture is what `cat resource` printed on the host, and reset is write-only there."""
    out, devices = captured
    with open(os.path.join(CAPTURE, "sysfs-dump.txt"), encoding="utf-8") as handle:
        dump = handle.read()
    for address in devices:
        printed = re.search(rf"^== /sys/bus/pci/devices/{address} .*\n((?:0x.*\n)+)", dump, re.M).group(1)
        with open(out / "sys" / "bus" / "pci" / "devices" / address / "resource", encoding="utf-8") as handle:
            assert handle.read() == printed
    reset = out / "sys" / "bus" / "pci" / "devices" / "0000:00:06.0" / "reset"
    assert oct(os.lstat(os.path.realpath(reset)).st_mode & 0o777) == "0o200" and "reset_method: flr\n" in dump


def test_discovery_reads_the_windows_and_reset_the_kernel_shows(captured):
    _, devices = captured
    gpu = devices["0000:00:06.0"]
    assert gpu["bars"] == pci_bars.parse_resource(H200)
    assert (gpu["reset_methods"], gpu["resettable"]) == (["flr"], True)
    # What the kernel logged for the same BARs (dmesg in the dump): sizes and "64bit pref".
    assert [pci_bars.size_text(b["size"]) for b in gpu["bars"]] == ["16M", "256G", "32M"]
    virtio = devices["0000:00:01.0"]
    assert virtio["bars"] == [{"index": 0, "size": 512 << 10, "is_64bit": True, "prefetchable": False}]
    assert (virtio["reset_methods"], virtio["resettable"]) == ([], False)  # no reset file: the kernel has none
    assert devices["0000:00:00.0"]["bars"] == []


def test_the_planner_reads_the_captured_gpu(captured, planner, facts_module):
    """The capture's host has no IOMMU (a VM): nothing is offered; the same GPU offered shows its need."""
    out, _ = captured
    facts = facts_module.discover(str(out / "sys"), str(out / "proc"))
    facts = dict(facts, iommu_enabled=True,
                 devices=[dict(d, iommu_group=str(i)) for i, d in enumerate(facts["devices"])])
    plan = planner.passthrough_plan(facts, {}, "h200-vm")
    (gpu,) = plan["selected"]
    assert (gpu["bar64_largest_bytes"], gpu["guest_phys_bits_needed"], gpu["ovmf_phys_bits_needed"]) == (
        256 * GIB, 40, 42)
    assert (plan["guest_phys_bits_needed"], plan["ovmf_phys_bits_needed"]) == (40, 42)
    assert any("hw:maxphysaddr_bits=42" in note for note in plan["notes"])


# ---- address_space_properties: what the images ask Nova for --------------------------------------------------

G = 1 << 30


def test_no_property_when_the_defaults_map_every_host():
    assert pci_bars.address_space_properties({"v100": [16 * G, 32 << 20], "t4": [256 << 20], "none": []}) == {}


def test_the_neediest_host_sets_the_bits():
    props = pci_bars.address_space_properties({"v100": [16 * G], "a100": [64 * G], "h100x2": [128 * G, 128 * G]})
    assert props == {"hw_maxphysaddr_mode": "emulate",
                     "hw_maxphysaddr_bits": pci_bars.ovmf_phys_bits_needed([128 * G, 128 * G])}


@given(st.dictionaries(st.text(min_size=1, max_size=5),
                       st.lists(st.integers(1, 1 << 40), max_size=4), max_size=4))
@settings(max_examples=200)
def test_the_bits_cover_every_host(windows_by_host):
    props = pci_bars.address_space_properties(windows_by_host)
    needs = [pci_bars.ovmf_phys_bits_needed(w) for w in windows_by_host.values() if w]
    if not any(needs):
        assert props == {}
    else:
        assert props["hw_maxphysaddr_mode"] == "emulate"
        assert all(props["hw_maxphysaddr_bits"] >= n for n in needs if n)
        assert props["hw_maxphysaddr_bits"] in needs
