"""plugins/filter/gpu_health.py on fixture hosts: vanished GPUs, vfio binding, expected counts, Nova's view."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible.errors import AnsibleFilterError

from ogc_testlib import load_source, collection_plugin

health = collection_plugin("filter", "gpu_health")


def without(facts, address):
    out = copy.deepcopy(facts)
    out["devices"] = [d for d in out["devices"] if d["address"] != address]
    return out


def test_healthy_host(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    assert report["ok"] is True and report["alerts"] == []
    assert report["expected"] == 4 and report["found"] == 4
    assert [g["address"] for g in report["gpus"] if g["for_nova"]] == [s["address"] for s in plan["selected"]]
    assert len(report["gpus"]) == 6  # 4 for Nova + 2 group-mates bound to vfio-pci


def test_gpu_fallen_off_the_bus(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(without(bound, "0000:c3:00.0"), plan, host="seed-v100")
    assert report["ok"] is False
    assert report["missing"] == ["0000:c3:00.0"] and report["found"] == 3
    assert report["alerts"][0].startswith(
        "seed-v100: GPU 0000:c3:00.0 (Tesla V100 PCIe 16GB) is gone from the PCI bus (fallen off the bus?); it is in "
        "the passthrough plan and Nova counts on it")
    assert report["alerts"][1] == "seed-v100: 3 of 4 expected GPUs for Nova are on the bus"


def test_group_mate_vanished(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(without(bound, "0000:c4:00.0"), plan, host="seed-v100")
    assert report["missing"] == ["0000:c4:00.0"] and report["found"] == 4
    assert report["alerts"] == [
        "seed-v100: device 0000:c4:00.0 is gone from the PCI bus (fallen off the bus?); it is in the passthrough plan. "
        "Check the kernel log (Xid/AER errors), then reseat the card or power-cycle the host"]


def test_not_bound_to_vfio(seed):
    facts, _bound, plan = seed
    report = health.gpu_health(facts, plan, host="seed-v100")
    assert {n["address"]: n["driver"] for n in report["not_vfio"]}["0000:27:00.0"] == "nouveau"
    assert any(a.startswith("seed-v100: GPU 0000:27:00.0 (Tesla V100 PCIe 16GB) is bound to nouveau, not vfio-pci")
               for a in report["alerts"])
    assert any("device 0000:28:00.0 is bound to nouveau, not vfio-pci: a VM cannot use it nor its IOMMU group" in a
               for a in report["alerts"])


def test_expected_count_from_inventory(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, expected=6, host="seed-v100")
    assert report["alerts"] == ["seed-v100: 4 of 6 expected GPUs for Nova are on the bus (health_expected_gpus)"]
    report = health.gpu_health(bound, plan, expected=2, host="seed-v100")
    assert report["ok"] is True
    assert report["notes"] == ["seed-v100: the plan gives Nova 4 GPUs, more than health_expected_gpus=2"]


def test_current_tree_reference_is_noted(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100", reference="current tree")
    assert "no plan file" in report["notes"][0]


@pytest.mark.parametrize("facts, plan, expected, message", [
    ({}, {"selected": []}, None, "facts must be the pci_passthrough facts"),
    ({"devices": []}, None, None, "plan must be a passthrough plan"),
    ({"devices": []}, {"selected": []}, -1, "health_expected_gpus must be a whole number >= 0, got -1"),
    ({"devices": []}, {"selected": []}, True, "health_expected_gpus must be a whole number >= 0, got True"),
])
def test_bad_input(facts, plan, expected, message):
    with pytest.raises(AnsibleFilterError) as info:
        health.gpu_health(facts, plan, expected=expected, host="h1")
    assert message in str(info.value) and "(h1)" in str(info.value)


def test_nova_view_matches_and_mismatches(seed):
    _facts, bound, plan = seed
    ok = health.gpu_health(bound, plan, host="seed-v100")
    broken = health.gpu_health(without(bound, "0000:c3:00.0"), plan, host="seed-v100")
    nova = {"available": True, "hosts": {"gpu01": {"CUSTOM_PCI_10DE_1DB4": {"total": 4, "used": 1}}}, "note": ""}
    out = health.gpu_health_nova([ok], nova, {"seed-v100": "gpu01"})
    assert out["alerts"] == []
    assert out["lines"] == ["seed-v100: 4/4 GPUs for Nova on the bus; Nova (placement, CUSTOM_PCI_10DE_1DB4): 4 total, "
                            "1 used, 3 free; OK"]
    assert out["reports"][0]["nova"]["free"] == 3
    out = health.gpu_health_nova([broken], nova, {"seed-v100": "gpu01"})
    assert "seed-v100: Nova counts 4 passthrough GPUs on gpu01 but 3 of the plan's are on the bus" in out["alerts"][0]
    assert out["lines"][-1].startswith("ALERT ")


def test_nova_view_absent(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    out = health.gpu_health_nova([report], {"available": False, "hosts": {}, "note": "no PCI in placement"})
    assert out["lines"] == ["seed-v100: 4/4 GPUs for Nova on the bus; OK", "Nova: no PCI in placement"]
    out = health.gpu_health_nova([report], {"available": True, "hosts": {"other": {}}, "note": ""})
    assert "Nova: no PCI devices reported for hypervisor seed-v100; 1 alert(s)" in out["lines"][0]
    with pytest.raises(AnsibleFilterError):
        health.gpu_health_nova("x", {})


def test_filter_names():
    assert set(health.FilterModule().filters()) == {"gpu_health", "gpu_health_nova", "gpu_fence_requests"}


def _devices(hypervisor, addresses):
    """os_pci_inventory's devices as placement names them: "<hypervisor>_<ADDRESS>", hex digits upper-cased."""
    return [{"name": f"{hypervisor}_{a.upper()}", "host": hypervisor, "resource_class": "CUSTOM_PCI_10DE_1DB4",
             "total": 1, "used": 0} for a in addresses]


def test_nova_view_compared_device_by_device(seed):
    _facts, bound, plan = seed
    planned = [s["address"] for s in plan["selected"]]
    assert planned == ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"]
    report = health.gpu_health(bound, plan, host="seed-v100")
    hosts = {"gpu01": {"CUSTOM_PCI_10DE_1DB4": {"total": 4, "used": 0}}}
    same = health.gpu_health_nova([report], {"available": True, "hosts": hosts, "devices": _devices("gpu01", planned)},
                                  {"seed-v100": "gpu01"})
    assert same["alerts"] == [] and same["reports"][0]["nova_missing"] == [] and same["reports"][0]["nova_extra"] == []
    # Same count, other devices: one planned GPU missing from placement, a held-back group-mate offered instead.
    swapped = planned[:3] + ["0000:28:00.0"]
    out = health.gpu_health_nova([report], {"available": True, "hosts": hosts, "devices": _devices("gpu01", swapped)},
                                 {"seed-v100": "gpu01"})
    assert out["reports"][0]["nova_missing"] == ["0000:c3:00.0"]
    assert out["reports"][0]["nova_extra"] == ["0000:28:00.0"]
    assert out["reports"][0]["ok"] is False
    assert out["alerts"][0].startswith("seed-v100: GPU 0000:c3:00.0 is on the bus and in the passthrough plan, but Nova "
                                       "does not offer it (no placement provider gpu01_0000:c3:00.0)")
    assert out["alerts"][1].startswith("seed-v100: Nova offers device 0000:28:00.0 on gpu01, which the passthrough plan "
                                       "does not give it")
    assert out["lines"][0].endswith("; 2 alert(s)") and out["lines"][-1].startswith("ALERT seed-v100: Nova offers")


def test_nova_view_gone_gpu_is_not_also_missing_from_nova(seed):
    _facts, bound, plan = seed
    broken = health.gpu_health(without(bound, "0000:c3:00.0"), plan, host="seed-v100")
    planned = [s["address"] for s in plan["selected"]]
    out = health.gpu_health_nova([broken], {"available": True, "hosts": {"seed-v100": {"X": {"total": 3, "used": 0}}},
                                            "devices": _devices("seed-v100", planned[:3])})
    assert out["reports"][0]["nova_missing"] == [] and out["reports"][0]["nova_extra"] == []
    assert len(out["alerts"]) == 2 and "is gone from the PCI bus" in out["alerts"][0]


def test_host_unknown_to_placement_is_an_alert(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    out = health.gpu_health_nova([report], {"available": True, "hosts": {"other": {}}, "devices": [], "note": ""})
    assert out["alerts"] == ["seed-v100: the plan gives Nova 4 GPU(s) but placement has no PCI device of hypervisor "
                             "seed-v100: check that nova-compute runs there with the rendered [pci] device_spec and "
                             "report_in_placement, or set health_nova_host if its hypervisor name differs"]
    assert out["reports"][0]["nova_missing"] == planned_of(plan)


def planned_of(plan):
    return [s["address"] for s in plan["selected"]]


ADDRESSES = [f"0000:{n:02x}:00.0" for n in range(1, 12)]


@given(planned=st.sets(st.sampled_from(ADDRESSES), min_size=1), offered=st.sets(st.sampled_from(ADDRESSES), min_size=1))
@settings(max_examples=60, deadline=None)
def test_both_sides_compared_property(planned, offered):
    """Whatever the plan and placement hold: missing = planned - offered, extra = offered - planned, ok iff equal."""
    gpus = [{"address": a, "for_nova": True, "present": True} for a in sorted(planned)]
    report = {"host": "h", "found": len(planned), "expected": len(planned), "gpus": gpus, "alerts": []}
    nova = {"available": True, "hosts": {"hv": {"CUSTOM_PCI_10DE_1DB4": {"total": len(offered), "used": 0}}},
            "devices": _devices("hv", sorted(offered))}
    out = health.gpu_health_nova([report], nova, {"h": "hv"})["reports"][0]
    assert set(out["nova_missing"]) == planned - offered
    assert set(out["nova_extra"]) == offered - planned
    assert out["ok"] == (planned == offered)
    assert len(out["alerts"]) == len(planned ^ offered)


def test_alerts_are_the_verifiers_problems(seed):
    """Health asks passthrough_verify (the host role's check) and adds only its own count: a group-mate on a
    host driver, which health did not look at before, is the verifier's problem and so an alert here."""
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify as passthrough_verify  # pylint: disable=import-outside-toplevel

    _facts, bound, plan = seed
    now = copy.deepcopy(bound)
    now["devices"].append({"address": "0000:29:00.0", "vendor_id": "8086", "product_id": "1533", "class_id": "020000",
                           "driver": "igb", "iommu_group": "19"})
    report = health.gpu_health(now, plan, host="seed-v100")
    assert report["problems"] == passthrough_verify.verify(now, plan, host="seed-v100")
    assert [p["cause"] for p in report["problems"]] == ["group_member_on_host_driver"]
    assert report["alerts"] == [report["problems"][0]["message"]] and report["ok"] is False
    assert report["missing"] == [] and report["not_vfio"] == []


# ------------------------------------------------------------------ device by device: reservations and allocations

RC = "CUSTOM_PCI_10DE_1DB4"


def placement(hypervisor, devices, servers=(), migrations=None):
    """os_pci_inventory's result (its pure part, plugins/module_utils/nova/pci_inventory.py) for a hypervisor whose device
    providers are ``{address: {reserved, one_time_use, consumers: [uuid]}}``, as Placement and Nova answer."""
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import pci_inventory  # pylint: disable=import-outside-toplevel

    providers = [{"uuid": "cn", "name": hypervisor, "root_provider_uuid": "cn"}]
    inventories, usages, traits, allocations = {"cn": {"VCPU": {"total": 64, "reserved": 0}}}, {}, {}, {}
    for n, (address, spec) in enumerate(sorted(devices.items())):
        uuid = f"rp-{n}"
        providers.append({"uuid": uuid, "name": f"{hypervisor}_{address.upper()}", "root_provider_uuid": "cn"})
        inventories[uuid] = {RC: {"total": 1, "reserved": spec.get("reserved", 0), "max_unit": 1}}
        usages[uuid] = {RC: len(spec.get("consumers", []))}
        traits[uuid] = ["COMPUTE_MANAGED_PCI_DEVICE"] + (["HW_PCI_ONE_TIME_USE"] if spec.get("one_time_use") else [])
        allocations[uuid] = {c: {RC: 1} for c in spec.get("consumers", [])}
    kinds = pci_inventory.consumer_kinds([c for a in allocations.values() for c in a], servers, migrations or {})
    hosts, found = pci_inventory.summarise(providers, inventories, usages, ["CUSTOM_PCI_*"], traits, allocations, kinds)
    return {"available": True, "hosts": hosts, "devices": found, "note": ""}


def test_reserved_waiting_and_orphaned_devices(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    nova = placement("gpu01", {
        "0000:27:00.0": {"consumers": ["vm-1"]},                                  # in use by a server
        "0000:44:00.0": {"reserved": 1},                                          # an operator's reservation
        "0000:a3:00.0": {"reserved": 1, "one_time_use": True},                    # used once, waiting to be returned
        "0000:c3:00.0": {"consumers": ["gone-1"], "reserved": 1, "one_time_use": True}},  # held by a deleted server
        servers=["vm-1"])
    out = health.gpu_health_nova([report], nova, {"seed-v100": "gpu01"})
    got = out["reports"][0]
    assert {e["address"]: e["state"] for e in got["nova_devices"]} == {
        "0000:27:00.0": "in_use", "0000:44:00.0": "reserved", "0000:a3:00.0": "waiting_return",
        "0000:c3:00.0": "orphaned"}
    assert got["nova_reserved"] == ["0000:44:00.0"] and got["nova_waiting_return"] == ["0000:a3:00.0"]
    assert got["nova_orphaned"] == [{"address": "0000:c3:00.0", "consumer": "gone-1"}]
    assert got["nova_missing"] == [] and got["nova_extra"] == []
    assert {k: got["nova"][k] for k in ("total", "used", "free", "reserved", "waiting_return", "orphan_allocations")} \
        == {"total": 1, "used": 2, "free": 0, "reserved": 1, "waiting_return": 1, "orphan_allocations": 1}
    assert out["alerts"] == [
        "seed-v100: Nova's device 0000:44:00.0 on gpu01 is reserved in placement (provider gpu01_0000:44:00.0, "
        f"{RC} reserved=1) and is not a one-time-use device, so Nova gives it to no server: an operator's "
        "reservation; when it is no longer wanted, return it with `openstack resource provider inventory set rp-1 "
        f"--amend --resource {RC}:reserved=0`",
        "seed-v100: Nova's device 0000:c3:00.0 on gpu01 is allocated in placement (provider gpu01_0000:C3:00.0) to "
        "consumer gone-1, which is neither a server nor a migration in progress (an allocation left behind by a "
        "failed delete or move), so Nova gives the device to no one: check with `openstack server show gone-1` and "
        "`openstack resource provider allocation show gone-1`, then remove its allocations with `openstack resource "
        "provider allocation delete gone-1`"]
    assert out["lines"][0] == (f"seed-v100: 4/4 GPUs for Nova on the bus; Nova (placement, {RC}): 1 total, 2 used, "
                               "0 free, 1 waiting to be returned; 2 alert(s)")
    assert out["lines"][1] == (
        "seed-v100: 1 one-time-use device(s) on gpu01 used and waiting to be returned: 0000:a3:00.0 (provider rp-2, "
        f"{RC}); reset and return them with `ansible-playbook playbooks/return_gpus.yml -i inventory/<env>` (or, once "
        "cleaned by hand, `openstack resource provider inventory set <provider> --amend --resource <class>:reserved=0`)")
    assert out["lines"][2:] == ["ALERT " + a for a in out["alerts"]]


def test_waiting_device_alone_is_no_alert(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    nova = placement("gpu01", {a: ({"reserved": 1, "one_time_use": True} if a == "0000:27:00.0" else {})
                               for a in planned_of(plan)})
    out = health.gpu_health_nova([report], nova, {"seed-v100": "gpu01"})
    assert out["alerts"] == [] and out["reports"][0]["ok"] is True
    assert out["reports"][0]["nova_waiting_return"] == ["0000:27:00.0"]
    assert out["lines"][0].endswith("3 total, 0 used, 3 free, 1 waiting to be returned; OK")
    assert "waiting to be returned: 0000:27:00.0" in out["lines"][1]


def test_a_migration_in_progress_holds_its_device(seed):
    """Nova holds the source host's resources under the migration's UUID during a move: alive while the move runs
    (a resize waiting to be confirmed is 'finished'), orphaned once the migration has ended."""
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    devices = {a: {} for a in planned_of(plan)}
    devices["0000:27:00.0"] = {"consumers": ["mig-1"]}
    for status, orphaned in (("running", False), ("finished", False), ("confirmed", True), ("error", True)):
        nova = placement("gpu01", devices, migrations={"mig-1": {"uuid": "mig-1", "status": status}})
        got = health.gpu_health_nova([report], nova, {"seed-v100": "gpu01"})["reports"][0]
        assert (got["nova_orphaned"] == [{"address": "0000:27:00.0", "consumer": "mig-1"}]) is orphaned, status
        assert got["ok"] is not orphaned


def test_devices_without_the_new_fields_are_read_as_before(seed):
    """An os_pci_inventory result of the previous shape (no state, consumers): used devices are in use, no finding."""
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    devices = _devices("gpu01", planned_of(plan))
    devices[0]["used"] = 1
    out = health.gpu_health_nova([report], {"available": True, "devices": devices,
                                            "hosts": {"gpu01": {RC: {"total": 4, "used": 1}}}}, {"seed-v100": "gpu01"})
    got = out["reports"][0]
    assert [e["state"] for e in got["nova_devices"]] == ["in_use", "free", "free", "free"]
    assert out["alerts"] == [] and got["nova"]["free"] == 3 and got["nova"]["orphan_allocations"] == 0


DEVICE_KINDS = st.sampled_from(["free", "server", "migration", "ended_migration", "gone", "reserved", "otu_waiting",
                                "otu_in_use", "otu_gone"])


@given(planned=st.sets(st.sampled_from(ADDRESSES), min_size=1),
       offered=st.dictionaries(st.sampled_from(ADDRESSES), DEVICE_KINDS, min_size=1))
@settings(max_examples=80, deadline=None)
def test_every_device_in_exactly_one_category_property(planned, offered):
    """Whatever the plan and placement hold: every planned and every offered device has exactly one state; the
    finding lists are those states; alerts are one per missing, extra, reserved device and orphaned allocation."""
    spec = {"free": {}, "server": {"consumers": ["vm"]}, "migration": {"consumers": ["mig-live"]},
            "ended_migration": {"consumers": ["mig-done"]}, "gone": {"consumers": ["gone"]},
            "reserved": {"reserved": 1},
            "otu_waiting": {"reserved": 1, "one_time_use": True},
            "otu_in_use": {"reserved": 1, "one_time_use": True, "consumers": ["vm"]},
            "otu_gone": {"reserved": 1, "one_time_use": True, "consumers": ["gone"]}}
    nova = placement("hv", {a: spec[k] for a, k in offered.items()}, servers=["vm"],
                     migrations={"mig-live": {"status": "running"}, "mig-done": {"status": "completed"}})
    gpus = [{"address": a, "for_nova": True, "present": True} for a in sorted(planned)]
    report = {"host": "h", "found": len(planned), "expected": len(planned), "gpus": gpus, "alerts": []}
    out = health.gpu_health_nova([report], nova, {"h": "hv"})["reports"][0]
    states = [(e["address"], e["state"]) for e in out["nova_devices"]]
    assert sorted(a for a, _ in states) == sorted(planned | set(offered))  # each device once
    expected = {"free": "free", "server": "in_use", "migration": "in_use", "ended_migration": "orphaned",
                "gone": "orphaned", "reserved": "reserved", "otu_waiting": "waiting_return", "otu_in_use": "in_use",
                "otu_gone": "orphaned"}
    assert dict(states) == dict({a: "missing" for a in planned - set(offered)},
                                **{a: expected[k] for a, k in offered.items()})
    assert out["nova_reserved"] == sorted(a for a, k in offered.items() if k == "reserved")
    assert out["nova_waiting_return"] == sorted(a for a, k in offered.items() if k == "otu_waiting")
    assert [o["address"] for o in out["nova_orphaned"]] == sorted(a for a, s in states if s == "orphaned")
    assert len(out["alerts"]) == (len(planned ^ set(offered)) + len(out["nova_reserved"]) + len(out["nova_orphaned"]))
    assert out["ok"] == (not out["alerts"])
