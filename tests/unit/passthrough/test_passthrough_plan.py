"""Every planning rule and error path of the passthrough_plan filter, on fixture hosts and small facts."""

from __future__ import annotations

import copy
import re

import pytest


def dev(address, ident, klass, group=None, driver=None, **extra):
    vendor, product = ident.split(":")
    out = {"address": address, "vendor_id": vendor, "product_id": product, "class_id": klass,
           "driver": driver, "iommu_group": None if group is None else str(group), "numa_node": 0,
           "boot_vga": False, "sriov_totalvfs": None, "driver_override": None}
    out.update(extra)
    return out


def facts_of(devices, cpu="amd", iommu=True, cmdline=("ro", "quiet")):
    return {"iommu_enabled": iommu, "cpu_vendor": cpu, "virtualization": "svm" if cpu == "amd" else "vmx",
            "hypervisor": False, "kernel_cmdline": list(cmdline), "efi": True, "devices": devices, "iommu_units": [],
            "iommu_groups": {}}


# ---------------------------------------------------------------------------------------------
# The seed server, as documented: 6x V100 in groups 19, 32, 75, 87 -> 4 selected.

def test_seed_server_one_gpu_per_group(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {}, "seed-v100")
    assert [s["address"] for s in plan["selected"]] == ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"]
    assert {s["iommu_group"] for s in plan["selected"]} == {"19", "32", "75", "87"}
    assert all(s["device_type"] == "type-PCI" and s["alias"] == "tesla-v100" for s in plan["selected"])
    assert plan["vfio_ids"] == ["10de:1db4"]
    assert plan["bind_by_address"] == []
    assert plan["aliases"] == [{"name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI"}]
    # The group peers are not offered but are bound so the group stays viable.
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert "shares IOMMU group 19 with 0000:27:00.0" in reasons["0000:28:00.0"]
    assert "shares IOMMU group 87 with 0000:c3:00.0" in reasons["0000:c4:00.0"]
    assert {"0000:28:00.0", "0000:c4:00.0"} <= set(plan["vfio_devices"])
    # Bridges and switch ports in the groups are never bound.
    assert not {"0000:25:00.0", "0000:26:08.0", "0000:20:03.1"} & set(plan["vfio_devices"])
    # The BMC console is no GPU and stays.
    assert "0000:03:00.0" in plan["host_devices"] and "not a GPU" in reasons["0000:03:00.0"]
    assert plan["kernel_args"] == ["iommu=pt", "vfio-pci.ids=10de:1db4", "rd.driver.pre=vfio-pci",
                                   "modprobe.blacklist=nouveau,nvidiafb"]
    assert "amd_iommu=off" in plan["kernel_args_absent"]
    assert plan["reboot_required"] is True


def test_seed_server_after_configuration_needs_no_reboot(planner, host_facts):
    bound = {a: "vfio-pci" for a in ["0000:27:00.0", "0000:28:00.0", "0000:44:00.0", "0000:a3:00.0",
                                     "0000:c3:00.0", "0000:c4:00.0"]}
    cmdline = "ro quiet iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nvidiafb,nouveau,snd"
    plan = planner.passthrough_plan(host_facts("seed-v100", drivers=bound, cmdline=cmdline), {}, "seed-v100")
    assert plan["reboot_required"] is False
    assert plan["pending"] == []


def test_selection_is_deterministic_whatever_the_device_order(planner, host_facts):
    facts = host_facts("seed-v100")
    shuffled = copy.deepcopy(facts)
    shuffled["devices"].reverse()
    assert planner.passthrough_plan(shuffled, {}, "h") == planner.passthrough_plan(facts, {}, "h")


# ---------------------------------------------------------------------------------------------
# Memory windows and resets of the GPUs offered (the collection's plugins/module_utils/pci/bars.py).

GIB, MIB = 1 << 30, 1 << 20


def bars(*windows):
    """Facts' bars: BAR 0 of 16M (32-bit), then each window a 64-bit prefetchable BAR."""
    return [{"index": 0, "size": 16 * MIB, "is_64bit": False, "prefetchable": False}] + [
        {"index": 1 + 2 * i, "size": size, "is_64bit": True, "prefetchable": True} for i, size in enumerate(windows)]


def test_selected_gpus_carry_their_windows_and_resets(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {}, "seed-v100")
    v100 = plan["selected"][0]
    assert {k: v100[k] for k in ("bars_total_bytes", "bar64_largest_bytes", "mmio64_bytes", "guest_phys_bits_needed",
                                 "ovmf_phys_bits_needed", "reset_methods", "resettable")} == {
        "bars_total_bytes": 16 * GIB + 48 * MIB, "bar64_largest_bytes": 16 * GIB, "mmio64_bytes": 16 * GIB + 32 * MIB,
        "guest_phys_bits_needed": 36, "ovmf_phys_bits_needed": None, "reset_methods": ["bus"], "resettable": True}
    assert (plan["guest_phys_bits_needed"], plan["ovmf_phys_bits_needed"]) == (36, None)
    # 16G windows fit QEMU's and OVMF's defaults, every V100 has a reset: nothing to say.
    assert not any("memory windows" in n or "reset" in n for n in plan["notes"])


def test_a_large_window_says_what_the_flavor_needs(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("a100-t4"), {}, "a100-t4")
    by_addr = {s["address"]: s for s in plan["selected"]}
    assert (by_addr["0000:41:00.0"]["guest_phys_bits_needed"], by_addr["0000:41:00.0"]["ovmf_phys_bits_needed"]) == (
        38, 41)
    assert by_addr["0000:41:00.0"]["reset_methods"] == ["flr", "bus"]
    assert (by_addr["0000:81:00.0"]["guest_phys_bits_needed"], by_addr["0000:81:00.0"]["ovmf_phys_bits_needed"]) == (
        33, None)
    assert (plan["guest_phys_bits_needed"], plan["ovmf_phys_bits_needed"]) == (38, 41)
    window_notes = [n for n in plan["notes"] if "64-bit memory windows" in n]
    assert [n.split(" ", 1)[0] for n in window_notes] == ["0000:41:00.0", "0000:61:00.0"]  # the A100s, not the T4s
    assert "more than the 32G 64-bit aperture OVMF gives by default" in window_notes[0]
    assert "address bits map" not in window_notes[0]  # 38 bits: within QEMU's default 40
    assert "hw:maxphysaddr_mode=emulate and hw:maxphysaddr_bits=41" in window_notes[0]
    report = planner.plan_report(plan, host_facts("a100-t4"))
    assert "guest physical address bits needed: 38 (41 under UEFI: hw:maxphysaddr_bits)" in report


def test_many_windows_beyond_40_bits_are_named(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:2331", "030200", 1, bars=bars(*[128 * GIB] * 8),
                          reset_methods=["flr"], resettable=True)])
    plan = planner.passthrough_plan(facts, {}, "h")
    (note,) = [n for n in plan["notes"] if "64-bit memory windows" in n]
    assert "more than the 32G 64-bit aperture OVMF gives by default and more than QEMU's default 40 address bits " \
           "map: its guests need at least 41 physical address bits, 43 under UEFI (OVMF)" in note


def test_a_gpu_without_a_usable_reset_is_offered_and_named(planner, host_facts):
    facts = host_facts("consumer-rtx")
    plan = planner.passthrough_plan(facts, {}, "consumer-rtx")
    assert [(s["address"], s["reset_methods"], s["resettable"]) for s in plan["selected"]] == [
        ("0000:01:00.0", [], False), ("0000:02:00.0", [], False)]
    (note,) = [n for n in plan["notes"] if "no usable reset" in n]
    assert note.startswith("The kernel has no usable reset for 0000:01:00.0 and 0000:02:00.0 alone")
    assert "passthrough_policy.exclude" in note
    table = {r["address"]: r for r in planner.plan_table(plan, facts)}
    assert (table["0000:01:00.0"]["window"], table["0000:01:00.0"]["reset"]) == ("256M", "none")
    assert (table["0000:01:00.1"]["window"], table["0000:01:00.1"]["reset"]) == ("-", "none")  # 32-bit BAR only
    assert (table["0000:31:00.0"]["window"], table["0000:31:00.0"]["reset"]) == ("?", "?")  # the BMC: not in the facts
    report = planner.plan_report(plan, facts)
    assert "offered without a usable reset: 0000:01:00.0 0000:02:00.0" in report
    row = next(line for line in report.splitlines() if line.startswith("0000:01:00.0"))
    assert re.search(r"  256M +none +nova +alias rtx-2080-ti", row)


def test_facts_without_windows_still_plan_and_say_so(planner):
    """Facts from before discovery read resource files (or whose capture lacks them): planned as before, unknown."""
    facts = facts_of([dev("0000:41:00.0", "10de:1db4", "030200", 1), dev("0000:42:00.0", "10de:1db4", "030200", 2,
                                                                         bars=bars(16 * GIB), reset_methods=["bus"],
                                                                         resettable=True)])
    plan = planner.passthrough_plan(facts, {}, "h")
    old = plan["selected"][0]
    assert (old["bars_total_bytes"], old["guest_phys_bits_needed"], old["reset_methods"], old["resettable"]) == (
        None, None, None, None)
    assert plan["guest_phys_bits_needed"] == 35  # from the GPU whose windows are known: 16G from 16G to 32G
    assert any(n.startswith("The facts lack the memory windows and resets of 0000:41:00.0 (no resource file")
               for n in plan["notes"])
    assert not any("no usable reset" in n for n in plan["notes"])  # unknown is not "none"
    nothing = planner.passthrough_plan(facts_of([dev("0000:41:00.0", "10de:1db4", "030200", 1)]), {}, "h")
    assert (nothing["guest_phys_bits_needed"], nothing["ovmf_phys_bits_needed"]) == (None, None)
    assert "guest physical address bits" not in planner.plan_report(nothing, facts)


# ---------------------------------------------------------------------------------------------
# IOMMU not active.

def test_iommu_off_selects_nothing_and_plans_the_args(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("intel-pre-iommu"), {}, "intel-t4")
    assert plan["selected"] == [] and plan["aliases"] == []
    assert plan["iommu_enabled"] is False
    assert plan["kernel_args"][:2] == ["intel_iommu=on", "iommu=pt"]
    assert "vfio-pci.ids=10de:1eb8" in plan["kernel_args"]
    assert plan["reboot_required"] is True and "IOMMU not active" in plan["pending"]
    assert any("IOMMU is not active" in note for note in plan["notes"])
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert reasons["0000:18:00.0"].startswith("IOMMU not active")
    assert "intel_iommu=off" in plan["kernel_args_absent"]


def test_iommu_on_after_reboot_selects_the_t4s(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("intel-pre-iommu", iommu=True), {}, "intel-t4")
    assert [s["address"] for s in plan["selected"]] == ["0000:18:00.0", "0000:3b:00.0"]
    assert plan["aliases"][0]["name"] == "t4"


# ---------------------------------------------------------------------------------------------
# Consumer card: four functions in one group, all bound.

def test_consumer_card_functions_all_go_to_vfio(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("consumer-rtx"), {}, "consumer-rtx")
    assert [s["address"] for s in plan["selected"]] == ["0000:01:00.0", "0000:02:00.0"]
    for slot in ("0000:01:00", "0000:02:00"):
        assert {f"{slot}.{fn}" for fn in range(4)} <= set(plan["vfio_devices"])
    assert plan["vfio_ids"] == ["10de:10f7", "10de:1ad6", "10de:1ad7", "10de:1e07"]
    assert {"snd_hda_intel", "xhci_pci", "i2c_nvidia_gpu", "nouveau"} <= set(plan["softdep_drivers"])
    # The chipset group (NIC, SATA, USB) is untouched.
    assert not {"0000:22:00.0", "0000:23:00.0", "0000:24:00.0"} & set(plan["vfio_devices"])


# ---------------------------------------------------------------------------------------------
# A GPU sharing its group with a NIC and a SATA controller.

def test_gpu_with_foreign_endpoints_is_ineligible_and_names_them(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("shared-group"), {}, "shared-group")
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    reason = reasons["0000:05:00.0"]
    assert "IOMMU group 12" in reason
    assert "0000:03:00.0 (Ethernet controller, 8086:1533)" in reason
    assert "0000:00:17.0 (SATA controller, 8086:a352)" in reason
    assert "no ACS override" in reason
    assert "0000:05:00.0" not in plan["vfio_devices"] and "0000:03:00.0" not in plan["vfio_devices"]
    # Its twin on a clean root port is passed, but by address: the IDs are shared with the one staying.
    assert [s["address"] for s in plan["selected"]] == ["0000:01:00.0"]
    assert plan["vfio_ids"] == []
    assert plan["bind_by_address"] == ["0000:01:00.0", "0000:01:00.1"]
    assert not any(a.startswith("vfio-pci.ids") for a in plan["kernel_args"])
    # An NVIDIA device stays on the host: nouveau is not blacklisted.
    assert plan["blacklist_modules"] == [] and not any("modprobe.blacklist" in a for a in plan["kernel_args"])


def test_console_gpu_of_the_same_model_forces_binding_by_address(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("console-twin"), {}, "console-twin")
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert "boot VGA" in reasons["0000:0a:00.0"]
    assert [s["address"] for s in plan["selected"]] == ["0000:0b:00.0"]
    assert plan["vfio_ids"] == []
    assert plan["bind_by_address"] == [f"0000:0b:00.{fn}" for fn in range(4)]
    assert "0000:0a:00.0" in plan["host_devices"]
    assert plan["blacklist_modules"] == []


def test_ids_of_devices_that_stay_never_appear_in_vfio_ids(planner, host_facts):
    for name in ("seed-v100", "consumer-rtx", "shared-group", "console-twin", "a100-t4"):
        facts = host_facts(name)
        plan = planner.passthrough_plan(facts, {}, name)
        staying = {f"{d['vendor_id']}:{d['product_id']}" for d in facts["devices"] if d["address"] not in plan["vfio_devices"]}
        assert not staying & set(plan["vfio_ids"]), name


# ---------------------------------------------------------------------------------------------
# Device types and aliases.

def test_sriov_capable_cards_are_type_pf_and_two_models_get_two_aliases(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("a100-t4"), {}, "a100-t4")
    assert {a["name"]: a["device_type"] for a in plan["aliases"]} == {"a100": "type-PF", "t4": "type-PCI"}
    types = {s["address"]: s["device_type"] for s in plan["selected"]}
    assert types["0000:41:00.0"] == "type-PF" and types["0000:81:00.0"] == "type-PCI"


def test_sriov_totalvfs_zero_is_type_pci(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:20f1", "030200", 1, sriov_totalvfs=0)])
    assert planner.passthrough_plan(facts)["selected"][0]["device_type"] == "type-PCI"


def test_alias_override_and_generated_name_for_unknown_model(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:1db4", "030200", 1), dev("0000:42:00.0", "10de:abcd", "030200", 2),
                      dev("0000:43:00.0", "1002:0fff", "038000", 3)])
    plan = planner.passthrough_plan(facts, {"alias_names": {"10DE:1DB4": "v100"}})
    assert [a["name"] for a in plan["aliases"]] == ["amd-0fff", "nvidia-abcd", "v100"]
    # Stable: the same input always gives the same generated names.
    assert planner.passthrough_plan(facts, {"alias_names": {"10de:1db4": "v100"}})["aliases"] == plan["aliases"]


def named(device, pci_ids_db, subsystem=None):
    """The device as discovery reports it with the host's pci.ids: names from Debian's database."""
    sub = subsystem.split(":") if subsystem else (None, None)
    device.update(pci_ids_db.names(device["vendor_id"], device["product_id"], *sub))
    return device


def test_unknown_model_gets_its_alias_and_name_from_the_database(planner, pci_ids_db):
    facts = facts_of([named(dev("0000:41:00.0", "10de:24b0", "030000", 1), pci_ids_db),
                      named(dev("0000:42:00.0", "10de:1db4", "030200", 2), pci_ids_db),
                      named(dev("0000:03:00.0", "1a03:2000", "030000", 3, boot_vga=True), pci_ids_db)])
    plan = planner.passthrough_plan(facts, {}, "a4000")
    assert [(s["alias"], s["model"]) for s in plan["selected"]] == [("rtx-a4000", "RTX A4000"),
                                                                   ("tesla-v100", "Tesla V100 PCIe 16GB")]
    table = {r["address"]: r for r in planner.plan_table(plan, facts)}
    assert table["0000:03:00.0"]["model"] == "ASPEED Graphics Family"
    assert "VGA controller from vendor ASPEED Technology, Inc. is not a GPU" in table["0000:03:00.0"]["reason"]
    assert table["0000:41:00.0"]["model"] == "RTX A4000"
    # The policy still wins over both the table and the database.
    assert planner.passthrough_plan(facts, {"alias_names": {"10de:24b0": "a4000"}})["selected"][0]["alias"] == "a4000"


def test_without_a_database_names_fall_back_to_ids(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:24b0", "030000", 1), dev("0000:42:00.0", "10de:1db4", "030200", 2),
                      dev("0000:03:00.0", "1a03:2000", "030000", 3, boot_vga=True)])
    plan = planner.passthrough_plan(facts, {}, "a4000")
    assert [(s["alias"], s["model"]) for s in plan["selected"]] == [("nvidia-24b0", "10de:24b0"),
                                                                   ("tesla-v100", "10de:1db4")]
    table = {r["address"]: r for r in planner.plan_table(plan, facts)}
    assert table["0000:03:00.0"]["model"] == "VGA controller 1a03:2000"
    assert "from vendor aspeed is not a GPU" in table["0000:03:00.0"]["reason"]


def test_two_database_models_with_one_derived_name_is_an_error(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:24b0", "030000", 1, device_name="GA104GL [RTX A4000]"),
                      dev("0000:42:00.0", "10de:24b1", "030000", 2, device_name="GA104 [RTX A4000]")])
    with pytest.raises(planner.AnsibleFilterError, match=r"alias name 'rtx-a4000' would cover two models .* give them "
                                                         r"different names in passthrough_policy.alias_names"):
        planner.passthrough_plan(facts, {}, "gpu9")


def test_two_models_given_one_alias_name_is_an_error(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:1db4", "030200", 1), dev("0000:42:00.0", "10de:1eb8", "030200", 2)])
    with pytest.raises(planner.AnsibleFilterError, match=r"host gpu9: alias name 'gpu' would cover two models"):
        planner.passthrough_plan(facts, {"alias_names": {"10de:1db4": "gpu", "10de:1eb8": "gpu"}}, "gpu9")


def test_same_model_with_two_device_types_on_one_host_is_an_error(planner):
    facts = facts_of([dev("0000:41:00.0", "10de:20f1", "030200", 1, sriov_totalvfs=16),
                      dev("0000:42:00.0", "10de:20f1", "030200", 2)])
    with pytest.raises(planner.AnsibleFilterError, match="both type-PF and type-PCI"):
        planner.passthrough_plan(facts, {}, "h")


# ---------------------------------------------------------------------------------------------
# Candidates: vendors, boot VGA, BMC consoles, bridges.

def test_bmc_consoles_are_not_gpus_and_vendor_allow_list_applies(planner):
    facts = facts_of([dev("0000:03:00.0", "1a03:2000", "030000", 5), dev("0000:04:00.0", "102b:0536", "030000", 6),
                      dev("0000:05:00.0", "1234:1111", "030000", 7)])
    assert planner.passthrough_plan(facts)["selected"] == []
    plan = planner.passthrough_plan(facts, {"vendors": ["1234"]})
    assert [s["address"] for s in plan["selected"]] == ["0000:05:00.0"]
    assert plan["aliases"][0]["name"] == "qemu-1111"


def test_boot_vga_gpu_is_never_selected_and_blocks_its_group(planner):
    facts = facts_of([dev("0000:01:00.0", "10de:1e07", "030000", 1, boot_vga=True),
                      dev("0000:02:00.0", "10de:1db4", "030200", 1)])
    plan = planner.passthrough_plan(facts)
    assert plan["selected"] == []
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert "0000:01:00.0 (VGA controller, 10de:1e07), which stays on the host" in reasons["0000:02:00.0"]


def test_gpu_without_group_while_iommu_on_is_excluded(planner):
    facts = facts_of([dev("0000:01:00.0", "10de:1db4", "030200", None)])
    plan = planner.passthrough_plan(facts)
    assert plan["selected"] == [] and "has no IOMMU group" in plan["excluded"][0]["reason"]


def test_no_gpus_at_all_plans_nothing_to_bind(planner):
    plan = planner.passthrough_plan(facts_of([dev("0000:00:00.0", "1022:1480", "060000", 0)], cpu="intel"))
    assert plan["selected"] == [] and plan["vfio_devices"] == [] and plan["early_modules"] == []
    assert plan["kernel_args"] == ["intel_iommu=on"]


def test_unknown_cpu_vendor_plans_no_vendor_arg(planner):
    plan = planner.passthrough_plan(facts_of([dev("0000:01:00.0", "10de:1db4", "030200", 1)], cpu=None))
    assert not any("iommu=on" in a for a in plan["kernel_args"])
    assert any("CPU vendor unknown" in n for n in plan["notes"])


# ---------------------------------------------------------------------------------------------
# Policy.

def test_policy_exclude_offers_the_group_peer_instead(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {"exclude": ["27:00.0"]}, "seed-v100")
    chosen = [s["address"] for s in plan["selected"]]
    assert "0000:28:00.0" in chosen and "0000:27:00.0" not in chosen
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert reasons["0000:27:00.0"] == "excluded by passthrough_policy.exclude"
    # Still bound: it shares the group with the passed one.
    assert "0000:27:00.0" in plan["vfio_devices"]


def test_policy_exclude_alone_in_group_stays_on_host_and_blocks_ids(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {"exclude": ["0000:44:00.0"]}, "seed-v100")
    assert "0000:44:00.0" not in plan["vfio_devices"]
    assert plan["vfio_ids"] == []  # a 10de:1db4 stays on the host
    assert "0000:27:00.0" in plan["bind_by_address"]


def test_policy_keep_on_host_of_a_card_function_makes_the_gpu_ineligible(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("consumer-rtx"), {"keep_on_host": ["0000:01:00.1"]}, "consumer-rtx")
    assert [s["address"] for s in plan["selected"]] == ["0000:02:00.0"]
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    assert "passthrough_policy.keep_on_host keeps on the host" in reasons["0000:01:00.0"]


def test_policy_keep_on_host_gpu_and_unsafe_interrupts_and_amd_iommu_on(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {"keep_on_host": ["0000:a3:00.0"],
                                                               "allow_unsafe_interrupts": True, "amd_iommu_on": True})
    assert "0000:a3:00.0" not in [s["address"] for s in plan["selected"]]
    assert plan["kernel_args"][0] == "amd_iommu=on"
    assert "vfio_iommu_type1.allow_unsafe_interrupts=1" in plan["kernel_args"]
    assert plan["blacklist_modules"] == []  # an NVIDIA GPU stays on the host


@pytest.mark.parametrize("policy, message", [
    ({"exclude": ["0000:99:00.0"]}, r"passthrough_policy.exclude names 0000:99:00.0, which does not exist on this host"),
    ({"keep_on_host": ["27:00"]}, r"passthrough_policy.keep_on_host entry '27:00' is not a PCI address"),
    ({"exclude": "0000:27:00.0"}, r"passthrough_policy.exclude must be a list"),
    ({"alias_names": {"10de-1db4": "v100"}}, r"alias_names key '10de-1db4' is not a 'vendor:product' id"),
    ({"alias_names": {"10de:1db4": "v100:2"}}, r"is not a valid alias name: an alias name cannot contain ':'"),
    ({"alias_names": {"10de:1db4": 100}}, r"is not a valid alias name: an alias name must be a string, got int"),
    ({"alias_names": {"10de:1db4": ""}}, r"is not a valid alias name: an alias name must not be empty"),
    ({"alias_names": ["v100"]}, r"alias_names must map"),
    ({"vendors": ["nvidia"]}, r"vendors has 'nvidia'"),
    ({"vendors": "10de"}, r"vendors must be a list"),
    # An empty list does not mean "the default vendors": it would select nothing.
    ({"vendors": []}, r"passthrough_policy.vendors is empty: no GPU vendor would be considered \(an empty list does "
                      r"not mean the default vendors\)\. Remove the key for the default"),
    ({"vendors": None}, r"passthrough_policy.vendors is empty"),
    ({"colour": "green"}, r"unknown passthrough_policy key\(s\) colour"),
    # YAML made numbers of unquoted IDs and addresses: vendors: [0x10de] is the int 4318.
    ({"vendors": [4318]}, r"passthrough_policy.vendors entry 4318 is a number, not a string .*: quote it, e.g. '10de'"),
    ({"alias_names": {4318: "v100"}}, r"alias_names key 4318 is a number, not a string .*quote it"),
    ({"exclude": [1620.0]}, r"passthrough_policy.exclude entry 1620.0 is a number, not a string .*quote it, "
                            r"e.g. '0000:27:00.0'"),
    ({"keep_on_host": [None]}, r"keep_on_host entry None is a NoneType, not a string"),
    ({"vendors": [True]}, r"vendors entry True is a bool, not a string"),
    ({"allow_unsafe_interrupts": "maybe"}, r"passthrough_policy.allow_unsafe_interrupts is 'maybe', which is not a "
                                           r"boolean: write true or false"),
    ({"amd_iommu_on": None}, r"passthrough_policy.amd_iommu_on is None, which is not a boolean"),
    ({"amd_iommu_on": 2}, r"passthrough_policy.amd_iommu_on is 2, which is not a boolean"),
    ("exclude everything", r"the policy must be a dict"),
])
def test_bad_policy_is_a_clear_error_naming_host_and_key(planner, host_facts, policy, message):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan: host seed-v100: .*" + message):
        planner.passthrough_plan(host_facts("seed-v100"), policy, "seed-v100")


@pytest.mark.parametrize("value, expected", [
    ("false", False), ("no", False), ("off", False), ("0", False), (0, False), (False, False),
    ("true", True), ("Yes", True), ("on", True), ("1", True), (1, True), (True, True),
])
def test_policy_booleans_follow_ansible_rules(planner, host_facts, value, expected):
    plan = planner.passthrough_plan(host_facts("seed-v100"), {"allow_unsafe_interrupts": value,
                                                               "amd_iommu_on": value}, "seed-v100")
    assert ("vfio_iommu_type1.allow_unsafe_interrupts=1" in plan["kernel_args"]) is expected
    assert ("vfio_iommu_type1.allow_unsafe_interrupts=1" in plan["kernel_args_absent"]) is not expected
    assert ("amd_iommu=on" in plan["kernel_args"]) is expected


def test_policy_errors_without_facts_for_the_preflight(planner):
    assert planner.policy_errors({"vendors": ["10de"], "exclude": ["27:00.0"], "allow_unsafe_interrupts": "no"},
                                 "h1") == []
    assert planner.policy_errors(None, "h1") == []
    assert planner.policy_errors({"vendors": [4318]}, "h1") == [
        "passthrough_plan: host h1: passthrough_policy.vendors entry 4318 is a number, not a string (YAML reads an "
        "unquoted 0x10de as the integer 4318 and 27:00.0 as a sexagesimal number): quote it, e.g. '10de'"]
    assert planner.policy_errors({"colour": 1}, "h1")[0].startswith(
        "passthrough_plan: host h1: unknown passthrough_policy key(s) colour")


@pytest.mark.parametrize("facts, message", [
    ("not facts", "expected the pci_passthrough facts"),
    ({"devices": []}, "the facts lack iommu_enabled"),
    ({"devices": {}, "iommu_enabled": True}, "facts.devices must be a list"),
    ({"devices": [{"address": "0000:01:00.0"}], "iommu_enabled": True}, "malformed device entry"),
])
def test_bad_facts_are_a_clear_error(planner, facts, message):
    with pytest.raises(planner.AnsibleFilterError, match=message):
        planner.passthrough_plan(facts, {}, "h1")


# ---------------------------------------------------------------------------------------------
# Command-line comparison and the report.

SEED_BOUND = {a: "vfio-pci" for a in ["0000:27:00.0", "0000:28:00.0", "0000:44:00.0", "0000:a3:00.0",
                                       "0000:c3:00.0", "0000:c4:00.0"]}


@pytest.mark.parametrize("cmdline, pending", [
    # The editor merges the planned driver into the operator's rd.driver.pre: that satisfies the plan.
    ("ro iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=nvme,vfio-pci modprobe.blacklist=nouveau,nvidiafb", []),
    ("ro iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=nvme rd.driver.pre=vfio-pci "
     "modprobe.blacklist=nouveau modprobe.blacklist=nvidiafb", []),
    # The kernel reads vfio_pci.ids as vfio-pci.ids.
    ("ro iommu=pt vfio_pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nvidiafb,nouveau", []),
    ("ro iommu=pt,nobypass vfio_pci.ids= rd.driver.pre=vfio-pci modprobe.blacklist=nvidiafb,nouveau",
     ["kernel command line lacks vfio-pci.ids=10de:1db4 (it has vfio_pci.ids=)"]),
    ("ro iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nvidiafb,nouveau iommu=off "
     "amd_iommu=off",
     ["kernel command line still has iommu=off", "kernel command line still has amd_iommu=off"]),
    ("ro iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nvidiafb,nouveau "
     "vfio_iommu_type1.allow_unsafe_interrupts=1",
     ["kernel command line still has vfio_iommu_type1.allow_unsafe_interrupts=1"]),
])
def test_pending_reads_the_running_line_with_the_kernel_model(planner, host_facts, cmdline, pending):
    plan = planner.passthrough_plan(host_facts("seed-v100", drivers=SEED_BOUND, cmdline=cmdline), {}, "seed-v100")
    assert plan["pending"] == pending
    assert plan["reboot_required"] is bool(pending)


def test_intel_iommu_with_comma_options_counts_as_on(planner):
    facts = facts_of([dev("0000:18:00.0", "10de:1eb8", "030200", group=30, driver="vfio-pci")], cpu="intel",
                     cmdline=["intel_iommu=on,sm_on", "iommu=pt", "vfio-pci.ids=10de:1eb8", "rd.driver.pre=vfio-pci",
                              "modprobe.blacklist=nouveau,nvidiafb"])
    plan = planner.passthrough_plan(facts, {}, "h1")
    assert plan["kernel_args"][0] == "intel_iommu=on"
    assert plan["pending"] == []


def test_every_iommu_off_argument_is_forbidden_whatever_the_cpu(planner, host_facts):
    for cpu in ("intel", "amd", None):
        facts = facts_of([dev("0000:18:00.0", "10de:1eb8", "030200", group=30)], cpu=cpu)
        absent = planner.passthrough_plan(facts, {}, "h1")["kernel_args_absent"]
        assert {"iommu=off", "intel_iommu=off", "amd_iommu=off", "vfio_iommu_type1.allow_unsafe_interrupts=1"} <= set(absent)
        assert "vfio-pci.ids" not in absent


def test_a_stale_vfio_ids_is_forbidden_when_the_plan_binds_by_address(planner, host_facts):
    # console-twin: the passed GPU shares its IDs with the console GPU, so no vfio-pci.ids is planned.
    plan = planner.passthrough_plan(host_facts("console-twin"), {}, "console-twin")
    assert plan["vfio_ids"] == [] and plan["bind_by_address"]
    assert "vfio-pci.ids" in plan["kernel_args_absent"]


def test_a_blacklist_of_the_nvidia_drivers_is_forbidden_when_an_nvidia_gpu_stays(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("console-twin"), {}, "console-twin")
    assert plan["blacklist_modules"] == []
    assert {"modprobe.blacklist=nouveau,nvidia,nvidiafb,nvidia_drm",
            "module_blacklist=nouveau,nvidia"} <= set(plan["kernel_args_absent"])
    facts = facts_of([dev("0000:18:00.0", "10de:1eb8", "030200", group=30)], cpu="intel")
    assert not any("blacklist" in a for a in planner.passthrough_plan(facts, {}, "h1")["kernel_args_absent"])


def test_an_unreadable_running_line_is_a_clear_error(planner):
    facts = facts_of([], cmdline=['a"b'])
    with pytest.raises(planner.AnsibleFilterError, match=r"host h1: the running kernel command line .* double quote"):
        planner.passthrough_plan(facts, {}, "h1")


def test_plan_report_lists_every_verdict(planner, host_facts):
    facts = host_facts("console-twin")
    report = planner.plan_report(planner.passthrough_plan(facts, {}, "console-twin"), facts)
    lines = report.splitlines()
    assert lines[0].split() == ["ADDRESS", "MODEL", "GROUP", "DRIVER", "WINDOW", "RESET", "VERDICT", "REASON"]
    assert any(line.startswith("0000:0a:00.0") and " host " in line for line in lines)
    assert any(line.startswith("0000:0b:00.0") and " nova " in line for line in lines)
    assert any(line.startswith("0000:0b:00.1") and " vfio " in line for line in lines)
    assert "bound by address: 0000:0b:00.0" in report and "reboot required: yes" in report


def test_filter_module_exposes_the_filters(planner):
    assert set(planner.FilterModule().filters()) == {"passthrough_plan", "passthrough_plan_report", "passthrough_plan_table",
                                                     "passthrough_policy_errors", "passthrough_plan_file",
                                                     "passthrough_verify", "passthrough_plan_load", "passthrough_fleet_plan_load",
                                                     "passthrough_fleet", "passthrough_plan_file_host",
                                                     "passthrough_plan_record", "passthrough_policy_fingerprint",
                                                     "passthrough_retired_vars_errors", "passthrough_plans_only",
                                                     "passthrough_retired_alias_hosts"}


def test_softdeps_use_the_module_name_from_sysfs_not_the_driver_name(planner, host_facts):
    plan = planner.passthrough_plan(host_facts("consumer-rtx"), {}, "consumer-rtx")
    # Driver xhci_hcd is module xhci_pci, nvidia-gpu is i2c_nvidia_gpu (their sysfs module links).
    assert "xhci_pci" in plan["softdep_drivers"] and "i2c_nvidia_gpu" in plan["softdep_drivers"]
    assert "xhci_hcd" not in plan["softdep_drivers"] and "nvidia-gpu" not in plan["softdep_drivers"]
    facts = facts_of([dev("0000:05:00.0", "1234:1111", "030000", 1, driver="bochs-drm", driver_module="bochs"),
                      dev("0000:06:00.0", "1234:1111", "030000", 2, driver="simplefb-ish", driver_module=None)])
    softdeps = planner.passthrough_plan(facts, {"vendors": ["1234"]})["softdep_drivers"]
    assert "bochs" in softdeps and "bochs_drm" not in softdeps
    assert not any("simplefb" in d for d in softdeps)  # built in: nothing to order


def test_a_device_already_on_vfio_pci_keeps_the_softdep_of_its_host_driver(planner):
    # Before the reboot bochs-drm holds the GPU; after it vfio-pci does, and only the modules its modalias resolves
    # to (the facts' host_modules) name the host driver: the plan, and so /etc/modprobe.d/vfio.conf, stays the same.
    before = facts_of([dev("0000:01:00.0", "1234:1111", "030000", 1, driver="bochs-drm", driver_module="bochs"),
                       dev("0000:02:00.0", "1234:1111", "030000", 2, driver="bochs-drm", driver_module="bochs")])
    after = facts_of([dict(dev("0000:01:00.0", "1234:1111", "030000", 1, driver="vfio-pci", driver_module="vfio_pci"),
                           host_modules=["bochs"]),
                      dev("0000:02:00.0", "1234:1111", "030000", 2, driver="bochs-drm", driver_module="bochs")])
    policy = {"vendors": ["1234"], "keep_on_host": ["0000:02:00.0"]}
    planned = [planner.passthrough_plan(facts, policy)["softdep_drivers"] for facts in (before, after)]
    assert planned[0] == planned[1] == ["bochs"]
    # Without host_modules (facts of a captured tree, or no kmod) the driver on vfio-pci names none.
    del after["devices"][0]["host_modules"]
    assert planner.passthrough_plan(after, policy)["softdep_drivers"] == []


def test_a_device_left_on_vfio_that_the_plan_keeps_on_the_host_is_pending(planner):
    facts = facts_of([dev("0000:01:00.0", "10de:1db4", "030200", 1, driver="vfio-pci"),
                      dev("0000:02:00.0", "10de:1db4", "030200", 2, driver="vfio-pci"),
                      dev("0000:03:00.0", "8086:1533", "020000", 2, driver="igb")],
                     cmdline=["iommu=pt", "rd.driver.pre=vfio-pci", "modprobe.blacklist=nouveau,nvidiafb"])
    plan = planner.passthrough_plan(facts, {}, "h")
    assert [s["address"] for s in plan["selected"]] == ["0000:01:00.0"]
    assert any(p.startswith("0000:02:00.0 is on vfio-pci but the plan leaves it to the host") for p in plan["pending"])
    assert plan["reboot_required"] is True


# ---------------------------------------------------------------------------------------------
# Plan files: one loader for every consumer; empty or corrupt files name the file and the command.

def _slurp(text, source="/plans/gpu1.json", item="gpu1"):
    import base64
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": source,
            "item": item}


def test_plan_file_returns_the_plan_from_text_or_slurp(planner):
    text = '{"facts": {}, "plan": {"host": "gpu1", "aliases": []}}'
    assert planner.plan_file(text, "/plans/gpu1.json", "gpu1") == {"host": "gpu1", "aliases": []}
    assert planner.plan_file(_slurp(text)) == {"host": "gpu1", "aliases": []}


@pytest.mark.parametrize("data, args, message", [
    ("", ("/plans/gpu1.json", "gpu1"), "plan file /plans/gpu1.json of host gpu1 is empty"),
    ("  \n", ("/plans/gpu1.json", "gpu1"), "is empty"),
    ('{"facts": {}, "plan": {', ("/plans/gpu1.json", "gpu1"), r"is not valid JSON \(line 1, column 24: "),
    ("[]", ("/p/x.json", "x"), r"plan file /p/x.json of host x is JSON but not a plan file \(no 'plan' object\)"),
    ('{"plan": []}', ("/p/x.json", "x"), "not a plan file"),
    (None, ("/p/x.json", "x"), "is not text"),
    (_slurp(""), (), "plan file /plans/gpu1.json of host gpu1 is empty"),
    (_slurp("{oops"), (), "plan file /plans/gpu1.json of host gpu1 is not valid JSON"),
    ({"content": "%%%", "source": "/p/y.json", "item": "y"}, (), "plan file /p/y.json of host y is not text"),
])
def test_plan_file_refuses_empty_and_corrupt_files(planner, data, args, message):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_file: .*" + message) as caught:
        planner.plan_file(data, *args)
    assert "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit " in str(caught.value)


# ---------------------------------------------------------------------------------------------
# excluded[].cause: the machine-readable decision beside the prose, one per situation.

def _exclusions(plan):
    return {e["address"]: (e["cause"], e.get("related")) for e in plan["excluded"]}


@pytest.mark.parametrize("name, policy, address, cause, related", [
    ("seed-v100", {}, "0000:03:00.0", "not_a_gpu_vendor", None),
    ("console-twin", {}, "0000:0a:00.0", "boot_vga", None),
    ("seed-v100", {"keep_on_host": ["0000:28:00.0"]}, "0000:28:00.0", "keep_on_host", None),
    ("seed-v100", {"keep_on_host": ["0000:28:00.0"]}, "0000:27:00.0", "keep_on_host_group", ["0000:28:00.0"]),
    ("intel-pre-iommu", {}, "0000:18:00.0", "iommu_inactive", None),
    ("shared-group", {}, "0000:05:00.0", "shared_group_with_host_device", ["0000:00:17.0", "0000:03:00.0"]),
    ("seed-v100", {}, "0000:28:00.0", "shares_group_with_selected", ["0000:27:00.0"]),
    ("seed-v100", {"exclude": ["0000:28:00.0"]}, "0000:28:00.0", "policy_exclude", None),
])
def test_each_exclusion_has_its_cause(planner, host_facts, name, policy, address, cause, related):
    plan = planner.passthrough_plan(host_facts(name), policy, name)
    assert _exclusions(plan)[address] == (cause, related)


def test_a_gpu_without_a_group_under_an_active_iommu(planner):
    plan = planner.passthrough_plan(facts_of([dev("0000:18:00.0", "10de:1eb8", "030200", group=None)]), {}, "h1")
    assert _exclusions(plan) == {"0000:18:00.0": ("no_iommu_group", None)}
    assert "has no IOMMU group although the IOMMU is active" in plan["excluded"][0]["reason"]


def test_a_kept_device_blocks_its_group_by_cause_not_by_wording(planner, host_facts):
    # A boot VGA GPU in the group is a blocker too, but only keep_on_host's ones say keep_on_host_group.
    facts = facts_of([dev("0000:18:00.0", "10de:1eb8", "030200", group=30),
                      dev("0000:1a:00.0", "8086:1533", "020000", group=30, driver="igb"),
                      dev("0000:19:00.0", "10de:1eb8", "030000", group=31, boot_vga=True),
                      dev("0000:19:00.1", "10de:1eb8", "030200", group=31)])
    assert _exclusions(planner.passthrough_plan(facts, {}, "h1"))["0000:18:00.0"] == (
        "shared_group_with_host_device", ["0000:1a:00.0"])
    plan = planner.passthrough_plan(facts, {"keep_on_host": ["0000:1a:00.0"]}, "h1")
    assert _exclusions(plan)["0000:18:00.0"] == ("keep_on_host_group", ["0000:1a:00.0"])
    assert _exclusions(plan)["0000:19:00.1"] == ("shared_group_with_host_device", ["0000:19:00.0"])


@pytest.mark.parametrize("name", ["a100-t4", "console-twin", "consumer-rtx", "intel-pre-iommu", "seed-v100",
                                  "shared-group"])
def test_every_cause_is_of_the_documented_vocabulary(planner, host_facts, name):
    facts = host_facts(name)
    plan = planner.passthrough_plan(facts, {}, name)
    addresses = {d["address"] for d in facts["devices"]}
    for entry in plan["excluded"]:
        assert entry["cause"] in planner.EXCLUDED_CAUSES and entry["reason"]
        assert set(entry.get("related", [])) <= addresses
