"""The address-space budget's firmware arithmetic proven on a real guest: Debian's OVMF and kernel under qemu.

A q35 guest of an Intel CPU with 1 GiB pages (as the host-model CPUs of GPU servers have) boots Debian's OVMF with
one device of a large 64-bit window behind a pcie-root-port of its own, as libvirt places a passed-through GPU:
ivshmem-plain, whose BAR2 is as large as the (sparse) memory behind it, stands in for a GPU's BAR1 (an A100's
64 GiB, several H100s' together). The guest's kernel says where the BAR went (its resource file, its dmesg).

With the address bits the project asks Nova for (``hw_maxphysaddr_bits``: plugins/module_utils/pci/bars.py
``phys_bits_for``, which module_utils/nova/address_space.py gives each image) the window is mapped; with QEMU's
default width, or one bit fewer than the project asks, OVMF leaves it out and the kernel cannot place it ("can't
assign; no space"): the guest loses the device, as a GPU guest loses a GPU. SeaBIOS's rule is covered by the unit
tests alone.
"""

from __future__ import annotations

import pytest

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars
from realkernel import vm

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

GIB = 1 << 30
DEVICE = "0000:01:00.0"  # behind the root port at 00:02.0
GUEST_RAM_MIB = 512


def window_start(boot):
    """Where the guest's kernel has the device's BAR2 (0: not assigned)."""
    lines = (boot.root / "sys" / "bus" / "pci" / "devices" / DEVICE / "resource").read_text().splitlines()
    assert (boot.root / "sys" / "bus" / "pci" / "devices" / DEVICE / "device").read_text().strip() == "0x1110"
    return int(lines[2].split()[0], 16)


@pytest.mark.parametrize("window_gib", [64, 512])
def test_the_bits_the_project_asks_for_map_the_window_and_fewer_lose_it(realkernel_guest, tmp_path, window_gib):
    guest, _built_s = realkernel_guest
    window = window_gib * GIB
    bits, fits = bars.phys_bits_for("uefi", GUEST_RAM_MIB << 20, bars.device_window([window]))
    assert fits and bits == {64: 41, 512: 42}[window_gib]
    fewer = None if bits == bars.OVMF_MIN_TRUSTED_BITS else bits - 1  # QEMU's default, or one bit short
    assert not bars.ovmf_fits(GUEST_RAM_MIB << 20, bars.device_window([window]), fewer or 40)

    mapped = vm.boot_window(guest, bits, window, tmp_path / "project", memory_mib=GUEST_RAM_MIB)
    start = window_start(mapped)
    # OVMF's aperture is the top eighth of the address space: the window sits there, within the guest's width.
    assert start >= (1 << bits) - (1 << (bits - 3)) and start + window <= 1 << bits, hex(start)
    assert f"{DEVICE}: BAR 2 [mem {start:#x}-{start + window - 1:#x} 64bit pref]" in mapped.dmesg

    lost = vm.boot_window(guest, fewer, window, tmp_path / "fewer", memory_mib=GUEST_RAM_MIB)
    assert window_start(lost) == 0
    assert "can't assign; no space" in lost.dmesg, lost.dmesg[-3000:]
