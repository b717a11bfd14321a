# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""A PCI function's memory windows (BARs), as the kernel shows them in sysfs, and what a guest needs to map them.

The one place for these rules: discovery (``plugins/modules/pci_passthrough_facts.py``) parses with ``parse_resource``,
the planner (``plugins/module_utils/passthrough/planner.py``) derives ``window_facts`` and ``guest_phys_bits_needed``, the
reports print ``size_text``.

``<sysfs>/bus/pci/devices/<address>/resource`` is the kernel's text file (drivers/pci/pci-sysfs.c,
``resource_show``): one line per resource, ``0x%016llx 0x%016llx 0x%016llx`` (start, end, flags). Lines 0-5 are
the BARs, line 6 the expansion ROM; an endpoint's file goes on with its SR-IOV VF BARs (lines 7-12, with
CONFIG_PCI_IOV), a bridge's with its windows. An unused resource is all zeros; its length is ``end - start + 1``,
or 0 when ``end`` is 0 (the kernel's ``pci_resource_len``). The flags are include/linux/ioport.h's, which that
header says stay put because this file shows them: ``IORESOURCE_IO`` 0x100, ``IORESOURCE_MEM`` 0x200,
``IORESOURCE_PREFETCH`` 0x2000, ``IORESOURCE_MEM_64`` 0x00100000 (a 64-bit prefetchable BAR reads 0x0014220c,
a 32-bit non-prefetchable one 0x00040200).
"""

from __future__ import annotations

import re

IORESOURCE_IO = 0x00000100
IORESOURCE_MEM = 0x00000200
IORESOURCE_PREFETCH = 0x00002000
IORESOURCE_MEM_64 = 0x00100000
# Lines 0-5 of the resource file are the BARs (PCI_STD_NUM_BARS); line 6 is the expansion ROM.
BAR_COUNT = 6

FOUR_GIB = 1 << 32
# What a guest gets without hw:maxphysaddr_*: QEMU's x86 CPU models default to 40 physical address bits (1 TiB),
# unless the distribution's machine type turns host-phys-bits on; OVMF builds that do not size their 64-bit PCI
# aperture from the guest's address width give it 32 GiB.
QEMU_DEFAULT_PHYS_BITS = 40
OVMF_DEFAULT_MMIO64_BYTES = 32 << 30

_LINE = re.compile(r"^0x([0-9a-fA-F]{1,16}) 0x([0-9a-fA-F]{1,16}) 0x([0-9a-fA-F]{1,16})$")
_UNITS = ((60, "E"), (50, "P"), (40, "T"), (30, "G"), (20, "M"), (10, "K"))


class ResourceError(ValueError):
    """A resource file, or a window list, that is not what the kernel writes; the message says which line or value."""


def parse_resource(text: str) -> list[dict]:
    """The memory BARs of a device from the text of its sysfs ``resource`` file.

    :returns: ``[{"index": 0-5, "size": bytes, "is_64bit": bool, "prefetchable": bool}]`` for each memory BAR in
        use, by index; I/O port BARs, the expansion ROM and the VF BARs are left out (a guest maps none of them in
        its 64-bit MMIO space). ``[]`` for a device without memory BARs.
    :raises ResourceError: a line that is not ``0x<start> 0x<end> 0x<flags>``, an end below its start, fewer than
        the six BAR lines (a truncated copy); the message names the line, not what it holds.
    """
    lines = str(text).strip().splitlines()
    if len(lines) < BAR_COUNT:
        raise ResourceError(f"it has {len(lines)} line(s), not the {BAR_COUNT} BAR lines (and more) the kernel writes: "
                            "a truncated copy")
    bars = []
    for index, line in enumerate(lines):
        match = _LINE.match(line.strip())
        if not match:
            raise ResourceError(f"its line {index + 1} is not '0x<start> 0x<end> 0x<flags>' as the kernel writes it")
        if index >= BAR_COUNT:
            continue
        start, end, flags = (int(part, 16) for part in match.groups())
        if end and end < start:
            raise ResourceError(f"its line {index + 1} ends below its start")
        size = end - start + 1 if end else 0
        if size and flags & IORESOURCE_MEM:
            bars.append({"index": index, "size": size, "is_64bit": bool(flags & IORESOURCE_MEM_64),
                         "prefetchable": bool(flags & IORESOURCE_PREFETCH)})
    return bars


def high_windows(bars: list[dict]) -> list[int]:
    """The sizes of the windows a guest maps above 4 GiB: the 64-bit prefetchable memory BARs.

    A 64-bit BAR that is not prefetchable stays below 4 GiB: a PCI bridge, the root port a passed device sits behind
    in a q35 guest included, forwards non-prefetchable memory only through its 32-bit window.
    """
    return [window["size"] for window in bars if window["is_64bit"] and window["prefetchable"]]


def _window(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ResourceError(f"a window size must be a positive number of bytes, got {value!r}")
    return 1 << (value - 1).bit_length()  # a BAR is a power of two; anything else takes the next one


def mmio64_bytes(windows: list[int]) -> int:
    """The 64-bit MMIO aperture the windows take, each aligned to its size: the sum of their sizes, each rounded up
    to a power of two (placed largest first, as firmware allocates, they leave no gap between them)."""
    return sum(_window(size) for size in windows)


def guest_phys_bits_needed(windows: list[int], base: int = FOUR_GIB) -> int:
    """The fewest guest physical address bits that map these 64-bit windows (bytes each) above ``base``.

    The rule: the guest's firmware places its 64-bit PCI windows above the 32-bit space (``base``, 4 GiB; raise it
    by the guest's RAM above 4 GiB, which comes first), each aligned to its size, largest first (as EDK2's and
    Linux's allocators do: by descending alignment). So they start at ``base`` rounded up to the largest window and
    end ``mmio64_bytes(windows)`` later, and the guest needs ``n`` address bits where ``2**n`` is the first power of
    two at or above that end: never fewer than 32. It is the need of one guest with these windows: for a flavor with
    several GPUs, pass the windows of all of them. Not the tightest packing (smaller windows could fill the gap below
    the largest), but the one firmware makes.

    Why it matters: QEMU gives an x86 guest 40 address bits by default (1 TiB) unless its machine type passes the
    host's through; a guest whose windows end above its address width cannot map them. And OVMF, the UEFI firmware,
    gives its 64-bit aperture 32 GiB unless it trusts the guest's width (``ovmf_phys_bits_needed``): a GPU whose
    64-bit windows exceed that (an A100 40GB's 64 GiB BAR1, the 128 GiB of an A100 80GB or H100) boots with the BAR
    unmapped, and its driver fails to start.

    What Nova offers (nova 33, read from its code): the flavor extra specs ``hw:maxphysaddr_mode`` (``passthrough``:
    the host CPU's width; ``emulate``: the width in ``hw:maxphysaddr_bits``) and ``hw:maxphysaddr_bits``, or the
    image properties ``hw_maxphysaddr_mode`` and ``hw_maxphysaddr_bits`` (the flavor's win; a mode set differently in
    both is refused). Only the libvirt driver honours them (it writes ``<cpu><maxphysaddr
    mode= bits=/>``), and only with libvirt 8.7.0 or newer (``MIN_LIBVIRT_MAXPHYSADDR``), where a compute node
    reports the traits ``COMPUTE_ADDRESS_SPACE_PASSTHROUGH`` and ``COMPUTE_ADDRESS_SPACE_EMULATED``; the scheduler
    requires the mode's trait, and turns ``hw:maxphysaddr_bits`` into ``capabilities:cpu_info:maxphysaddr:bits >=
    <bits>`` (the ComputeCapabilitiesFilter; the ImagePropertiesFilter checks the image property). Nova 33's API does
    not list the two flavor extra specs among its validators: with microversion 2.86 or later it refuses them as
    unknown ("does not appear to be a valid extra spec"), so set them with an older microversion or use the image
    properties.

    :param windows: the sizes in bytes of the windows (``high_windows``); a size that is not a power of two counts
        as the next one.
    :param base: where the 64-bit windows may start, in bytes (4 GiB: the 32-bit space).
    :raises ResourceError: a size that is not a positive integer, a base that is not a non-negative integer.
    """
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise ResourceError(f"base must be a non-negative number of bytes, got {base!r}")
    sizes = [_window(size) for size in windows]
    end = base
    if sizes:
        largest = max(sizes)
        end = -(-base // largest) * largest + sum(sizes)
    return max(32, (end - 1).bit_length())


def ovmf_phys_bits_needed(windows: list[int]) -> int | None:
    """The guest address bits with which OVMF, the UEFI firmware, maps these 64-bit windows (bytes each); None when
    its defaults map them (they fit its default aperture and QEMU's default width).

    OVMF (edk2's OvmfPkg/Library/PlatformInitLib/MemDetect.c: ``PlatformAddressWidthFromCpuid``,
    ``PlatformDynamicMmioWindow``) trusts the width the guest CPU reports only when it is 41 bits or more (or exactly
    40 on AMD, 36 or 39 on Intel: QEMU's default 40 is no proof on Intel), caps it at 46 (40 without 1 GiB pages),
    and then gives its 64-bit aperture the top eighth of the address space; otherwise it keeps the classic 32 GiB
    aperture (``OVMF_DEFAULT_MMIO64_BYTES``). So windows that do not fit 32 GiB, or need more than QEMU's default
    width, need the largest of 41, three more than the bits that hold their ``mmio64_bytes``, and
    ``guest_phys_bits_needed(windows)``. Firmware older than that rule (edk2 before 2023) keeps 32 GiB whatever the
    width; only a QEMU option (``-fw_cfg opt/ovmf/X-PciMmio64Mb``), which Nova does not set, enlarges it there.

    :raises ResourceError: a size that is not a positive integer.
    """
    span = mmio64_bytes(windows)
    bits = guest_phys_bits_needed(windows)
    if span <= OVMF_DEFAULT_MMIO64_BYTES and bits <= QEMU_DEFAULT_PHYS_BITS:
        return None
    return max(41, (span - 1).bit_length() + 3, bits)


def window_facts(bars: list[dict] | None) -> dict:
    """What the plan records of a device's windows, in bytes: ``bars_total_bytes`` (every memory BAR),
    ``bar64_largest_bytes`` (the largest window above 4 GiB, 0 without one), ``mmio64_bytes`` (``mmio64_bytes`` of
    those windows), ``guest_phys_bits_needed`` and ``ovmf_phys_bits_needed`` (of one guest with the device; the
    latter None when OVMF's defaults map it); all None when the facts have no ``bars`` (a capture taken before
    discovery read the resource file)."""
    if bars is None:
        return dict.fromkeys(("bars_total_bytes", "bar64_largest_bytes", "mmio64_bytes", "guest_phys_bits_needed",
                              "ovmf_phys_bits_needed"))
    windows = high_windows(bars)
    return {"bars_total_bytes": sum(entry["size"] for entry in bars), "bar64_largest_bytes": max(windows, default=0),
            "mmio64_bytes": mmio64_bytes(windows), "guest_phys_bits_needed": guest_phys_bits_needed(windows),
            "ovmf_phys_bits_needed": ovmf_phys_bits_needed(windows)}


def size_text(size: int | None) -> str:
    """A size in bytes as ``lspci`` writes it (binary units: ``16G``, ``256M``, ``4K``; ``?`` for None)."""
    if size is None:
        return "?"
    for shift, unit in _UNITS:
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def address_space_properties(windows_by_host: dict) -> dict:
    """Nova's image properties for guests whose GPUs' 64-bit windows need a wider address space than the defaults
    give (``ovmf_phys_bits_needed``), or ``{}`` when no host's do.

    ``windows_by_host`` is ``{host: [window sizes of every GPU the host's plan gives Nova]}``: each host's need is
    that of one guest holding all of them (the largest flavor that host can serve), and the answer covers the
    neediest host: ``{"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": n}``. ``emulate`` with the bits, not
    ``passthrough``: the guest gets the width it needs and the scheduler keeps it off hosts whose CPUs have fewer
    (the ImagePropertiesFilter compares ``hw_maxphysaddr_bits`` with the host's); image properties, not flavor extra
    specs, because Nova's API refuses ``hw:maxphysaddr_*`` from microversion 2.86 on (see
    ``guest_phys_bits_needed``).

    :raises ResourceError: a window size that is not a positive integer.
    """
    needs = [ovmf_phys_bits_needed(list(windows)) for windows in windows_by_host.values() if windows]
    needs = [need for need in needs if need]
    if not needs:
        return {}
    return {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": max(needs)}


# ---- A guest's whole address space: its RAM and every passed-through GPU's windows (per flavor) ----
# Read in QEMU (hw/i386/pc_q35.c pc_q35_init, pc.c pc_memory_init and pc_pci_hole64_start), SeaBIOS
# (src/fw/pciinit.c pci_setup, pci_bios_map_devices; 1.16.3 and 1.17.0) and edk2's OVMF
# (OvmfPkg/Library/PlatformInitLib/MemDetect.c PlatformGetFirstNonAddress, PlatformAddressWidthFromCpuid,
# PlatformDynamicMmioWindow; edk2-stable202308 and later). A q35 guest (the machine type Nova defaults to on x86, and
# the project's images set), each passed-through PCIe device behind a pcie-root-port of its own (libvirt's q35 layout).
GIB = 1 << 30
TIB = 1 << 40
# q35 keeps RAM below 4 GiB up to 0xB0000000 when it all fits there, else 2 GiB; the rest starts at 4 GiB.
Q35_LOWMEM_ALL_BELOW = 0xB0000000
Q35_LOWMEM = 2 * GIB
# An AMD vCPU's RAM above 4 GiB that would reach 1012 GiB starts at 1 TiB instead (QEMU 7.1 and later).
AMD_HT_HOLE_START = 1012 * GIB
# The widest guest either firmware uses: OVMF caps a trusted width at 46 bits with 4-level paging; SeaBIOS caps its top
# at 2**46 (1.16.3), and from 1.17.0 at 2**44 while the RAM above 4 GiB stays below 1 TiB.
FIRMWARE_MAX_PHYS_BITS = 46
OVMF_MIN_TRUSTED_BITS = 41


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def device_window(windows: list[int]) -> int:
    """The 64-bit window one passed-through device takes in the guest: its root port forwards one prefetchable
    window holding all its 64-bit windows, aligned to the largest (SeaBIOS and OVMF size a bridge window so), so a
    16 GiB BAR1 beside a 32 MiB BAR3 takes 32 GiB. 0 for a device without 64-bit windows."""
    sizes = [_window(size) for size in windows]
    return _align(sum(sizes), max(sizes)) if sizes else 0


def guest_ram_end(ram_bytes: int, amd: bool = False) -> int:
    """Where a q35 guest's RAM ends (the firmware places its 64-bit PCI windows above it): 4 GiB plus the RAM above
    4 GiB (on an AMD vCPU from 1 TiB when it would reach 1012 GiB); 4 GiB when all RAM fits below."""
    if isinstance(ram_bytes, bool) or not isinstance(ram_bytes, int) or ram_bytes <= 0:
        raise ResourceError(f"the guest's RAM must be a positive number of bytes, got {ram_bytes!r}")
    lowmem = Q35_LOWMEM if ram_bytes >= Q35_LOWMEM_ALL_BELOW else Q35_LOWMEM_ALL_BELOW
    above = max(0, ram_bytes - lowmem)
    if amd and FOUR_GIB + above > AMD_HT_HOLE_START:
        return TIB + above
    return FOUR_GIB + above


def seabios_fits(ram_bytes: int, aperture: int, bits: int, amd: bool = False) -> bool:
    """Whether SeaBIOS maps APERTURE bytes of 64-bit windows in a guest of BITS address bits: it sizes the 64-bit
    region to the windows rounded to 1 GiB and then to an eighth of the address space, and places it at the top,
    above the RAM (it checks no fit itself: a region past the top is simply not addressable)."""
    top = 1 << bits
    size = _align(_align(aperture, GIB), top >> 3) if aperture else 0
    return _align(guest_ram_end(ram_bytes, amd), GIB) + size <= top


def ovmf_fits(ram_bytes: int, aperture: int, bits: int, amd: bool = False) -> bool:
    """Whether OVMF maps APERTURE bytes of 64-bit windows in a guest of BITS address bits. It trusts the width at 41
    bits or more (40 on AMD, not on Intel, where QEMU's default 40 is no proof), and then gives its aperture the top
    eighth of the address space when that lies above the RAM; otherwise it keeps the classic 32 GiB aperture above
    the RAM (aligned to 32 GiB), which must end within the address space."""
    classic_base = _align(_align(guest_ram_end(ram_bytes, amd), GIB), OVMF_DEFAULT_MMIO64_BYTES)
    trusted = bits >= OVMF_MIN_TRUSTED_BITS or (amd and bits == QEMU_DEFAULT_PHYS_BITS)
    dynamic = 1 << (bits - 3)
    if trusted and bits <= FIRMWARE_MAX_PHYS_BITS and classic_base + dynamic < 1 << bits:
        return aperture <= dynamic
    return aperture <= OVMF_DEFAULT_MMIO64_BYTES and classic_base + OVMF_DEFAULT_MMIO64_BYTES <= 1 << bits


def phys_bits_for(firmware: str, ram_bytes: int, aperture: int, amd: bool = False):
    """``(bits, fits)`` for a guest of RAM_BYTES whose GPUs take APERTURE bytes of 64-bit windows under FIRMWARE
    (``bios``: SeaBIOS, ``uefi``: OVMF): bits None when QEMU's default 40 maps them, else the fewest from 41 to 46
    that do; ``fits`` False when none does (the guest cannot map them under that firmware)."""
    check = {"bios": seabios_fits, "uefi": ovmf_fits}[firmware]
    if check(ram_bytes, aperture, QEMU_DEFAULT_PHYS_BITS, amd):
        return None, True
    for bits in range(QEMU_DEFAULT_PHYS_BITS + 1, FIRMWARE_MAX_PHYS_BITS + 1):
        if check(ram_bytes, aperture, bits, amd):
            return bits, True
    return None, False
