"""Each GPU flavor's address-space budget: pci/bars.py's firmware arithmetic and module_utils/nova/address_space.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import address_space as space
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars

G = 1 << 30
M = 1 << 20
# An H100 NVL's 64-bit prefetchable windows (BAR1 128 GiB, BAR3 32 MiB), a V100's (16 GiB, 32 MiB).
H100 = [128 * G, 32 * M]
V100 = [16 * G, 32 * M]


def bars_of(windows):
    return [{"index": 1 + 2 * i, "size": size, "is_64bit": True, "prefetchable": True} for i, size in enumerate(windows)]


def host(n, windows, alias, vendor="GenuineIntel", cpu_bits=None):
    devices = [{"address": f"0000:{i + 1:02x}:00.0", "bars": bars_of(windows)} for i in range(n)]
    return {"facts": {"cpu_vendor": vendor, "cpu_phys_bits": cpu_bits, "devices": devices},
            "plan": {"selected": [{"address": d["address"], "alias": alias, "numa_node": 0} for d in devices]}}


def flavor(name, ram_gib, alias, count, **specs):
    return {"name": name, "vcpus": 8, "ram": ram_gib * 1024,
            "extra_specs": {"pci_passthrough:alias": f"{alias}:{count}", **specs}}


def test_a_root_port_takes_its_devices_windows_aligned_to_the_largest():
    assert bars.device_window(H100) == 256 * G and bars.device_window(V100) == 32 * G
    assert bars.device_window([64 * G]) == 64 * G and bars.device_window([]) == 0


@pytest.mark.parametrize("ram, amd, end", [
    (2 * G, False, 4 * G),                     # all below 4 GiB
    (0xB0000000, False, 4 * G + 0xB0000000 - 2 * G),
    (16 * G, False, 18 * G),                   # 2 GiB below, 14 above
    (1024 * G, False, 1026 * G),
    (1024 * G, True, 1024 * G + 1022 * G),     # AMD: above-4G RAM that would reach 1012 GiB starts at 1 TiB
])
def test_where_a_q35_guest_s_ram_ends(ram, amd, end):
    assert bars.guest_ram_end(ram, amd) == end


def test_more_ram_leaves_fewer_gpus_mapped_at_the_default_width():
    # H100 NVL in one guest at QEMU's default 40 bits (1 TiB): the more RAM, the fewer GPUs the guest maps (the public
    # write-up of four per VM saw the same trend; its exact counts depend on its machine's settings).
    fits = {ram: max(n for n in range(5) if bars.seabios_fits(ram * G, n * 256 * G, 40)) for ram in (16, 256, 512, 768)}
    assert fits == {16: 3, 256: 2, 512: 1, 768: 0}
    assert bars.phys_bits_for("bios", 768 * G, 4 * 256 * G) == (41, True)
    # OVMF keeps its classic 32 GiB aperture at Intel's default 40 bits: not one H100 window fits.
    assert not bars.ovmf_fits(16 * G, 256 * G, 40) and bars.phys_bits_for("uefi", 16 * G, 4 * 256 * G) == (43, True)
    # A V100 fits the defaults under both; four of them in one UEFI guest (4 x 32 GiB) do not.
    assert bars.phys_bits_for("bios", 16 * G, 4 * 32 * G) == (None, True)
    assert bars.phys_bits_for("uefi", 16 * G, 32 * G) == (None, True)
    assert bars.phys_bits_for("uefi", 16 * G, 4 * 32 * G) == (41, True)


def test_no_width_the_firmware_uses_maps_a_guest_beyond_46_bits():
    assert bars.phys_bits_for("uefi", 64 * G, 16 * 1024 * G) == (None, False)  # 16 TiB of windows: 8 TiB at 46 bits
    assert bars.phys_bits_for("bios", 60 * 1024 * G, 16 * 1024 * G) == (None, False)


@given(ram=st.integers(min_value=1, max_value=4096), gpus=st.integers(min_value=0, max_value=8),
       firmware=st.sampled_from(space.FIRMWARES), amd=st.booleans())
@settings(max_examples=300, deadline=None)
def test_the_bits_found_are_the_fewest_that_fit_and_more_never_hurts(ram, gpus, firmware, amd):
    aperture = gpus * 256 * G
    fits = bars.seabios_fits if firmware == "bios" else bars.ovmf_fits
    bits, possible = bars.phys_bits_for(firmware, ram * G, aperture, amd)
    if not possible:
        assert not any(fits(ram * G, aperture, b, amd) for b in range(40, 47))
        return
    found = bits or 40
    assert fits(ram * G, aperture, found, amd) and not any(fits(ram * G, aperture, b, amd) for b in range(40, found))
    # A wider guest maps what a narrower one did (the image's bits serve every smaller flavor).
    assert all(fits(ram * G, aperture, b, amd) for b in range(max(found, 41), 47))


PLANS = {"gpu-h100": host(4, H100, "h100-nvl", cpu_bits=46), "gpu-v100": host(4, V100, "tesla-v100")}


def test_each_gpu_flavor_s_budget_takes_its_ram_and_its_gpus_on_the_neediest_host():
    flavors = [flavor("h100.x4.768", 768, "h100-nvl", 4), flavor("v100.x1", 16, "tesla-v100", 1),
               flavor("cpu.only", 4, "tesla-v100", 1, **{"pci_passthrough:alias": ""}),
               flavor("too.many", 16, "tesla-v100", 5), "not a flavor"]
    (h100, v100) = space.budgets(flavors, PLANS)
    assert (h100["name"], h100["index"], h100["hosts"][0]["host"], h100["hosts"][0]["aperture"]) == \
        ("h100.x4.768", 0, "gpu-h100", 1024 * G)
    assert h100["need"] == {"bios": (41, True), "uefi": (43, True)}
    assert v100["need"] == {"bios": (None, True), "uefi": (None, True)}
    assert space.image_properties([h100, v100], "uefi") == {"hw_maxphysaddr_mode": "emulate",
                                                          "hw_maxphysaddr_bits": 43}
    assert space.image_properties([h100, v100], "bios")["hw_maxphysaddr_bits"] == 41
    assert space.image_properties([v100], "bios") == {}
    assert space.image_firmware({"hw_firmware_type": "uefi"}) == "uefi" and space.image_firmware(None) == "bios"


def test_a_flavor_no_setting_serves_is_refused_with_the_arithmetic():
    budgets = space.budgets([flavor("h100.x4.768", 768, "h100-nvl", 4)], PLANS)
    assert space.flavor_problems(budgets, "2026.1") == []
    (old,) = space.flavor_problems(budgets, "2023.2", ["bios"])
    assert old == (
        "flavors[0] (h100.x4.768): 786432 MiB of RAM and 4 x h100-nvl, whose 64-bit windows take 1T on gpu-h100 (each "
        "GPU behind a root port of its own, its windows aligned to the largest), need 41 guest physical address bits "
        "under SeaBIOS (hw_firmware_type bios, Nova's default), more than QEMU's default 40, and Nova 2023.2 cannot "
        "be told so: hw_maxphysaddr_mode and hw_maxphysaddr_bits arrive in 2024.1. Give the flavor less RAM or fewer "
        "GPUs, or move to 2024.1 or later (nova_pci_config_openstack_release)")
    assert len(space.flavor_problems(budgets, "zed")) == 2  # both firmwares, a named release before 2023.1
    narrow = dict(PLANS, **{"gpu-h100": host(4, H100, "h100-nvl", cpu_bits=42)})
    (short,) = space.flavor_problems(space.budgets([flavor("h100.x4.768", 768, "h100-nvl", 4)], narrow), "2026.1",
                                     ["uefi"])
    assert "need 43 guest physical address bits under OVMF" in short and "(gpu-h100 42)" in short
    huge = space.budgets([flavor("h100.x64", 64, "h100-nvl", 4)], {"big": host(4, [4096 * G], "h100-nvl")})
    (beyond,) = space.flavor_problems(huge, "2026.1", ["uefi"])
    assert "need more than the 46 guest physical address bits the firmware uses at most under OVMF" in beyond
