"""verify(facts, plan) -> problems (plugins/module_utils/passthrough/verify.py, filter passthrough_verify): one example
per cause on fixture hosts, the shared bridge rule, bad input, and properties over generated hosts."""

from __future__ import annotations

import copy

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ogc_testlib import load_source, collection_plugin

planner = collection_plugin("filter", "passthrough_plan")
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify as passthrough_verify  # noqa: E402  pylint: disable=wrong-import-position


def bound(facts, plan):
    """The facts of the host once configured: the plan's devices on vfio-pci, its kernel arguments running."""
    out = copy.deepcopy(facts)
    for dev in out["devices"]:
        if dev["address"] in plan["vfio_devices"]:
            dev["driver"] = "vfio-pci"
    out["kernel_cmdline"] = ["ro"] + list(plan["kernel_args"])
    return out


def without(facts, address):
    out = copy.deepcopy(facts)
    out["devices"] = [d for d in out["devices"] if d["address"] != address]
    return out


def causes(problems):
    return [p["cause"] for p in problems]


@pytest.fixture(scope="module")
def seed(host_facts):
    """(facts as found, facts once configured, plan) of the seed V100 host."""
    facts = host_facts("seed-v100")
    plan = planner.passthrough_plan(facts, {}, "seed")
    return facts, bound(facts, plan), plan


def fresh(facts, policy=None):
    return planner.passthrough_plan(facts, policy or {}, "seed")


def test_a_configured_host_has_no_problem(seed):
    _facts, configured, plan = seed
    assert passthrough_verify.verify(configured, plan, "seed") == []
    assert passthrough_verify.verify(configured, plan, "seed", fresh=fresh(configured)) == []
    assert planner.FilterModule().filters()["passthrough_verify"](configured, plan, host="seed") == []


def test_iommu_inactive_names_the_command_line_and_the_firmware(seed):
    _facts, configured, plan = seed
    now = dict(copy.deepcopy(configured), iommu_enabled=False)
    for dev in now["devices"]:
        dev["driver"] = None  # vfio-pci cannot bind without an IOMMU: not reported again
    problems = passthrough_verify.verify(now, plan, "seed", fresh=fresh(now))
    assert causes(problems) == ["iommu_inactive"]
    assert problems[0]["message"].startswith('seed: the IOMMU is still inactive after booting with "ro iommu=pt')
    assert "enable AMD-Vi/IOMMU or VT-d in the firmware setup" in problems[0]["message"]
    # A virtual machine has no firmware setup of its own to switch an IOMMU on: it is told of its hypervisor.
    guest = passthrough_verify.verify(dict(now, hypervisor=True), plan, "seed", fresh=fresh(now))
    assert guest[0]["message"].endswith(passthrough_verify.VM_IOMMU_FIX) and "firmware" not in guest[0]["message"]


def test_device_missing_selected_and_group_mate(seed):
    _facts, configured, plan = seed
    problems = passthrough_verify.verify(without(configured, "0000:c3:00.0"), plan, "seed",
                                         fresh=fresh(without(configured, "0000:c3:00.0")))
    assert problems == [{
        "cause": "device_missing", "host": "seed", "address": "0000:c3:00.0",
        "message": "seed: GPU 0000:c3:00.0 (Tesla V100 PCIe 16GB) is gone from the PCI bus (fallen off the bus?); it "
                   "is in the passthrough plan and Nova counts on it. Check the kernel log (Xid/AER errors), then "
                   "reseat the card or power-cycle the host"}]
    problems = passthrough_verify.verify(without(configured, "0000:c4:00.0"), plan, "seed")
    assert causes(problems) == ["device_missing"]
    assert problems[0]["message"].startswith("seed: device 0000:c4:00.0 is gone from the PCI bus")
    assert "Nova counts on it" not in problems[0]["message"]


def test_not_on_vfio_names_each_device_and_its_driver(seed):
    facts, _configured, plan = seed
    problems = passthrough_verify.verify(facts, plan, "seed")
    assert causes(problems) == ["not_on_vfio"] * len(plan["vfio_devices"])
    first = problems[0]
    assert (first["address"], first["driver"], first["group"]) == ("0000:27:00.0", "nouveau", "19")
    assert first["message"].startswith("seed: GPU 0000:27:00.0 (Tesla V100 PCIe 16GB) is bound to nouveau, not "
                                       "vfio-pci: a VM cannot use it; check the vfio-pci options")
    assert " ".join(plan["kernel_args"]) in first["message"]
    mate = [p for p in problems if p["address"] == "0000:28:00.0"][0]
    assert "a VM cannot use it nor its IOMMU group" in mate["message"]


def test_group_member_on_a_host_driver(seed):
    _facts, configured, plan = seed
    now = copy.deepcopy(configured)
    # A NIC shows up in group 19 after the reboot (the firmware's ACS changed): nothing binds it.
    now["devices"].append({"address": "0000:29:00.0", "vendor_id": "8086", "product_id": "1533", "class_id": "020000",
                           "driver": "igb", "iommu_group": "19"})
    problems = passthrough_verify.verify(now, plan, "seed", fresh=fresh(now))
    assert causes(problems) == ["group_member_on_host_driver"]
    assert problems[0]["message"] == (
        "seed: 0000:29:00.0 (group 19) is on igb: a VM cannot start while a device of its group uses a host driver. "
        "Bind it to vfio-pci (make the plan again: ansible-playbook playbooks/plan.yml --limit seed; it should list "
        "it in vfio_devices).")
    assert (problems[0]["group"], problems[0]["driver"]) == ("19", "igb")


@pytest.mark.parametrize("class_id", [c + "00" for c in planner.BRIDGE_CLASSES])
def test_bridges_in_a_group_need_nothing_by_the_planners_rule(seed, class_id):
    _facts, configured, plan = seed
    now = copy.deepcopy(configured)
    now["devices"].append({"address": "0000:26:18.0", "vendor_id": "1022", "product_id": "1483", "class_id": class_id,
                           "driver": "pcieport", "iommu_group": "19"})
    assert planner.passthrough_plan(now, {}, "seed")["selected"] == plan["selected"]
    assert passthrough_verify.verify(now, plan, "seed") == []


def test_nothing_selected_and_plan_changed(seed):
    _facts, configured, plan = seed
    gpus = [s["address"] for s in plan["selected"]] + ["0000:28:00.0", "0000:c4:00.0"]
    problems = passthrough_verify.verify(configured, plan, "seed", fresh=fresh(configured, {"exclude": gpus}))
    assert causes(problems) == ["nothing_selected", "plan_changed"]
    assert problems[0]["message"].startswith("seed: the plan from the fresh facts selects no device for Nova (")
    assert "excluded by passthrough_policy.exclude" in problems[0]["message"]
    assert problems[1]["message"].startswith("seed: the plan from the fresh facts differs from the one this run "
                                             "applied (still pending: ")
    assert "0000:27:00.0 is on vfio-pci but the plan leaves it to the host" in problems[1]["message"]
    assert problems[1]["changed"][0] == "pending"


def test_plan_changed_by_another_selection_or_pending_arguments(seed):
    _facts, configured, plan = seed
    applied = planner.passthrough_plan(configured, {"exclude": ["0000:27:00.0"]}, "seed")
    problems = passthrough_verify.verify(configured, applied, "seed", fresh=fresh(configured))
    assert causes(problems) == ["plan_changed"] and "selected" in problems[0]["changed"]
    assert "selected now: 0000:27:00.0, 0000:44:00.0" in problems[0]["message"]
    stale = dict(copy.deepcopy(configured), kernel_cmdline=["ro", "iommu=pt"])
    problems = passthrough_verify.verify(stale, plan, "seed", fresh=fresh(stale))
    assert causes(problems) == ["plan_changed"] and problems[0]["changed"] == ["pending"]
    assert "still pending: kernel command line lacks vfio-pci.ids=10de:1db4" in problems[0]["message"]
    assert problems[0]["message"].endswith("The IOMMU groups may have changed with the reboot: run this play again "
                                           "to apply the new plan.")


def test_plan_made_before_the_iommu_was_on_is_checked_with_the_fresh_selection(host_facts):
    """intel-pre-iommu: the applied plan selects nothing (no groups yet); after the reboot the fresh plan does."""
    before = host_facts("intel-pre-iommu")
    applied = planner.passthrough_plan(before, {}, "intel")
    assert applied["selected"] == [] and applied["vfio_devices"]
    after = host_facts("intel-pre-iommu", iommu=True)
    now = bound(after, applied)
    new = planner.passthrough_plan(now, {}, "intel")
    assert new["selected"]
    # The provisional binding was right: the fresh selection differs from the empty one, which is not a change.
    assert passthrough_verify.verify(now, applied, "intel", fresh=new) == []
    unbound = copy.deepcopy(now)
    for dev in unbound["devices"]:
        if dev["address"] == new["selected"][0]["address"]:
            dev["driver"] = "nouveau"
    problems = passthrough_verify.verify(unbound, applied, "intel", fresh=planner.passthrough_plan(unbound, {}, "intel"))
    assert causes(problems) == ["not_on_vfio"] and problems[0]["message"].startswith(
        f"intel: GPU {new['selected'][0]['address']} is bound to nouveau, not vfio-pci")


@pytest.mark.parametrize("facts, plan, fresh_plan, message", [
    ([], {"selected": [], "vfio_devices": []}, None, "facts must be the pci_passthrough facts"),
    ({"devices": []}, {"selected": [], "vfio_devices": []}, None, "facts must be the pci_passthrough facts"),
    ({"devices": ["0000:27:00.0"], "iommu_enabled": True}, {"selected": [], "vfio_devices": []}, None,
     "malformed device entry '0000:27:00.0'"),
    ({"devices": [], "iommu_enabled": True}, "plan", None, "plan must be a passthrough plan"),
    ({"devices": [], "iommu_enabled": True}, {"selected": []}, None, "plan has no list 'vfio_devices'"),
    ({"devices": [], "iommu_enabled": True}, {"selected": ["0000:27:00.0"], "vfio_devices": []}, None,
     "plan.selected has '0000:27:00.0', which is not a selected device"),
    ({"devices": [], "iommu_enabled": True}, {"selected": [], "vfio_devices": [27]}, None,
     "plan.vfio_devices has 27, which is not a PCI address string"),
    ({"devices": [], "iommu_enabled": True}, {"selected": [], "vfio_devices": []}, {"selected": None},
     "fresh has no list 'selected'"),
])
def test_bad_input_names_the_host_and_what_to_pass(facts, plan, fresh_plan, message):
    with pytest.raises(passthrough_verify.VerifyError) as info:
        passthrough_verify.verify(facts, plan, "h1", fresh=fresh_plan)
    assert str(info.value).startswith("passthrough_verify: host h1: ") and message in str(info.value)
    with pytest.raises(planner.AnsibleFilterError, match="passthrough_verify: host h1: "):
        planner.verify(facts, plan, host="h1", fresh=fresh_plan)


# ---------------------------------------------------------------------------------------------
# Properties over generated hosts: GPUs in groups with their audio functions, group-mates, bridges and
# host endpoints (a NIC), some groups without an IOMMU group number.

@st.composite
def hosts(draw):
    devices = []
    for bus in range(1, draw(st.integers(1, 5)) + 1):
        group = str(bus * 10)
        gpu = draw(st.sampled_from(["1db4", "1eb8", "2236"]))
        devices.append({"address": f"0000:{bus:02x}:00.0", "vendor_id": "10de", "product_id": gpu,
                        "class_id": "030200", "driver": draw(st.sampled_from(["nouveau", "nvidia", None])),
                        "iommu_group": group})
        if draw(st.booleans()):
            devices.append({"address": f"0000:{bus:02x}:00.1", "vendor_id": "10de", "product_id": "10f0",
                            "class_id": "040300", "driver": "snd_hda_intel", "iommu_group": group})
        if draw(st.booleans()):
            devices.append({"address": f"0000:{bus:02x}:01.0", "vendor_id": "10de", "product_id": gpu,
                            "class_id": "030200", "driver": None, "iommu_group": group})
        if draw(st.booleans()):
            devices.append({"address": f"0000:{bus:02x}:1f.0", "vendor_id": "1022", "product_id": "1483",
                            "class_id": draw(st.sampled_from(planner.BRIDGE_CLASSES)) + "00",
                            "driver": "pcieport", "iommu_group": group})
        if draw(st.integers(0, 4)) == 0:
            devices.append({"address": f"0000:{bus:02x}:02.0", "vendor_id": "8086", "product_id": "1533",
                            "class_id": "020000", "driver": "igb", "iommu_group": group})
    return {"iommu_enabled": True, "cpu_vendor": draw(st.sampled_from(["amd", "intel"])), "virtualization": "svm",
            "hypervisor": False, "kernel_cmdline": ["ro"], "devices": devices, "iommu_units": [], "iommu_groups": {}}


@settings(max_examples=60, deadline=None)
@given(hosts())
def test_a_plan_applied_to_the_facts_it_describes_has_no_problem(facts):
    plan = planner.passthrough_plan(facts, {}, "h")
    configured = bound(facts, plan)
    assert passthrough_verify.verify(configured, plan, "h") == []
    again = planner.passthrough_plan(configured, {}, "h")
    problems = passthrough_verify.verify(configured, plan, "h", fresh=again)
    assert causes(problems) == ([] if plan["selected"] else ["nothing_selected"])


@settings(max_examples=60, deadline=None)
@given(hosts(), st.data())
def test_removing_a_selected_device_yields_exactly_its_device_missing(facts, data):
    plan = planner.passthrough_plan(facts, {}, "h")
    assume(plan["selected"])  # a host with nothing selected has nothing to remove: not a case of this property
    address = data.draw(st.sampled_from([s["address"] for s in plan["selected"]]))
    problems = passthrough_verify.verify(without(bound(facts, plan), address), plan, "h")
    assert [(p["cause"], p["address"]) for p in problems] == [("device_missing", address)]


@settings(max_examples=60, deadline=None)
@given(hosts(), st.data())
def test_every_problem_has_a_known_cause_and_names_the_host(facts, data):
    plan = planner.passthrough_plan(facts, {}, "h")
    now = copy.deepcopy(facts)
    for dev in now["devices"]:
        dev["driver"] = data.draw(st.sampled_from(["vfio-pci", "nouveau", None]))
    now["iommu_enabled"] = data.draw(st.booleans())
    problems = passthrough_verify.verify(now, plan, "h", fresh=planner.passthrough_plan(now, {}, "h"))
    for problem in problems:
        assert problem["cause"] in passthrough_verify.CAUSES and problem["message"].startswith("h: ")
    if not now["iommu_enabled"]:
        assert causes(problems)[:1] == ["iommu_inactive"]
        assert not {"not_on_vfio", "group_member_on_host_driver"} & set(causes(problems))


@settings(max_examples=60, deadline=None)
@given(hosts(), st.data())
def test_every_gpu_not_selected_is_excluded_with_a_known_cause(facts, data):
    """The planner's side of the contract verify and the host role rely on: causes from the vocabulary,
    related addresses that exist, keep_on_host_group exactly where a kept device blocks the group."""
    addresses = [d["address"] for d in facts["devices"]]
    policy = {"exclude": data.draw(st.lists(st.sampled_from(addresses), max_size=2, unique=True)),
              "keep_on_host": data.draw(st.lists(st.sampled_from(addresses), max_size=2, unique=True))}
    plan = planner.passthrough_plan(facts, policy, "h")
    excluded = {e["address"]: e for e in plan["excluded"]}
    selected = {s["address"] for s in plan["selected"]}
    for dev in facts["devices"]:
        if dev["class_id"].startswith("03"):
            assert (dev["address"] in selected) != (dev["address"] in excluded)
    for entry in plan["excluded"]:
        assert entry["cause"] in planner.EXCLUDED_CAUSES
        assert set(entry.get("related", [])) <= set(addresses) and entry["address"] not in entry.get("related", [])
        if entry["cause"] == "keep_on_host_group":
            assert set(entry["related"]) & set(policy["keep_on_host"])
        if entry["cause"] == "shared_group_with_host_device":
            assert not set(entry["related"]) & set(policy["keep_on_host"])
