"""Returning one-time-use GPUs: os_pci_return's pure rule (judge) and its exact Placement calls (SDK mocked: check
mode, idempotence, refusals, generation conflicts, the diff), and the playbook's pure steps (plugins/module_utils/ops/pci_return.py
through plugins/filter/return_gpus.py). The same against the real Placement: tests/integration/ops/test_return_gpus.py.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import collection_module, load_source, collection_plugin

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_return  # noqa: E402

RC = "CUSTOM_PCI_10DE_1DB4"
OTU = "HW_PCI_ONE_TIME_USE"
filters = collection_plugin("filter", "return_gpus")


@pytest.fixture(scope="module")
def return_module():
    return collection_module("os_pci_return")


# ------------------------------------------------------------------ judge (pure)

def view(reserved=1, traits=("COMPUTE_MANAGED_PCI_DEVICE", OTU), consumers=(), used=0):
    return dict(uuid="d1", resource_class=RC, inventory=dict(total=1, reserved=reserved), traits=list(traits),
                consumers=list(consumers), used=used)


@pytest.mark.parametrize("kwargs, verdict, words", [
    ({}, "return", ""),
    ({"reserved": 0}, "unchanged", ""),
    ({"traits": ["COMPUTE_MANAGED_PCI_DEVICE"]}, "refuse", "gpu01_0000:27:00.0 is not a one-time-use device"),
    ({"traits": [], "reserved": 0}, "refuse", "not a one-time-use device"),
    ({"consumers": ["vm-1"]}, "refuse", "gpu01_0000:27:00.0 is allocated (vm-1): it is in use"),
    ({"used": 1}, "refuse", "is allocated (usage 1)"),
])
def test_judge(kwargs, verdict, words):
    got, reason = pci_return.judge("gpu01_0000:27:00.0", view(**kwargs))
    assert got == verdict and words in reason


def test_judge_names_the_command_for_an_operators_reservation():
    _verdict, reason = pci_return.judge("dev", view(traits=[]))
    assert f"`openstack resource provider inventory set d1 --amend --resource {RC}:reserved=0`" in reason


@given(reserved=st.integers(0, 3), otu=st.booleans(), consumers=st.lists(st.sampled_from(["a", "b"]), max_size=2),
       used=st.integers(0, 1))
@settings(max_examples=100, deadline=None)
def test_judge_property(reserved, otu, consumers, used):
    """Returned only when one-time-use, not allocated and reserved; refused exactly when it is not one-time-use or
    allocated."""
    verdict, reason = pci_return.judge("dev", view(reserved, [OTU] if otu else [], consumers, used))
    allocated = bool(consumers) or used > 0
    assert (verdict == "refuse") == (not otu or allocated) and (verdict == "refuse") == bool(reason)
    assert (verdict == "return") == (otu and not allocated and reserved > 0)


def test_returned_inventory_keeps_every_field_but_reserved():
    inventory = {"resource_provider_generation": 7, "total": 1, "reserved": 1, "min_unit": 1, "max_unit": 1,
                 "step_size": 1, "allocation_ratio": 1.0}
    assert pci_return.returned_inventory(inventory) == dict(inventory, reserved=0)


# ------------------------------------------------------------------ os_pci_return: the exact calls

class Response:
    """A keystoneauth response."""

    def __init__(self, body, status_code=200):
        self.status_code, self.body = status_code, body
        self.text = json.dumps(body)

    def json(self):
        return self.body


def conflict():
    return Response({"errors": [{"status": 409, "code": "placement.concurrent_update",
                                 "detail": "resource provider generation conflict"}]}, 409)


@pytest.fixture
def placement(conn):
    """Placement with one one-time-use device d1 waiting to be returned (reserved 1, generation 5)."""
    conn.state = {"generation": 5, "reserved": 1, "traits": ["COMPUTE_MANAGED_PCI_DEVICE", OTU], "allocations": {},
                  "puts": [], "put_answers": []}

    def get(path, microversion=None, raise_exc=True):
        assert microversion == "1.26" and raise_exc is False
        s = conn.state
        answers = {
            "/resource_providers/d1": {"uuid": "d1", "name": "gpu01_0000:27:00.0", "generation": s["generation"]},
            f"/resource_providers/d1/inventories/{RC}": {
                "resource_provider_generation": s["generation"], "total": 1, "reserved": s["reserved"],
                "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0},
            "/resource_providers/d1/traits": {"traits": s["traits"], "resource_provider_generation": s["generation"]},
            "/resource_providers/d1/allocations": {"allocations": s["allocations"],
                                                   "resource_provider_generation": s["generation"]},
            "/resource_providers/d1/usages": {
                "usages": {RC: sum(a["resources"][RC] for a in s["allocations"].values())},
                "resource_provider_generation": s["generation"]},
        }
        return Response(answers[path]) if path in answers else Response({"errors": [{"status": 404}]}, 404)

    def put(path, json=None, microversion=None, raise_exc=True):  # pylint: disable=redefined-outer-name
        assert microversion == "1.26" and raise_exc is False
        conn.state["puts"].append((path, copy.deepcopy(json)))
        if conn.state["put_answers"]:
            return conn.state["put_answers"].pop(0)
        conn.state.update(reserved=json["reserved"], generation=conn.state["generation"] + 1)
        return Response(dict(json, resource_provider_generation=conn.state["generation"]))

    conn.placement.get.side_effect = get
    conn.placement.put.side_effect = put
    return conn


DEVICE = {"name": "gpu01_0000:27:00.0", "uuid": "d1", "resource_class": RC}


def test_check_mode_reads_and_writes_nothing(return_module, run_module, placement):
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]}, check_mode=True, diff=True)
    assert result["changed"] is True and result["returned"] == ["gpu01_0000:27:00.0"] and result["unchanged"] == []
    assert result["diff"] == {"before": {"gpu01_0000:27:00.0": {"reserved": 1}},
                              "after": {"gpu01_0000:27:00.0": {"reserved": 0}}}
    assert placement.state["puts"] == [] and not placement.placement.put.called
    paths = [c.args[0] for c in placement.placement.get.call_args_list]
    assert paths == ["/resource_providers/d1", f"/resource_providers/d1/inventories/{RC}",
                     "/resource_providers/d1/allocations", "/resource_providers/d1/usages",
                     "/resource_providers/d1/traits"]


def test_a_real_run_puts_the_inventory_back_then_changes_nothing(return_module, run_module, placement):
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]}, diff=True)
    assert result["changed"] is True and result["returned"] == ["gpu01_0000:27:00.0"]
    assert placement.state["puts"] == [(f"/resource_providers/d1/inventories/{RC}", {
        "resource_provider_generation": 5, "total": 1, "reserved": 0, "min_unit": 1, "max_unit": 1, "step_size": 1,
        "allocation_ratio": 1.0})]
    assert result["devices"] == [dict(DEVICE, reserved_before=1, reserved_after=0)]
    assert result["diff"]["after"] == {"gpu01_0000:27:00.0": {"reserved": 0}}
    again = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]}, diff=True)
    assert again["changed"] is False and again["returned"] == [] and again["unchanged"] == ["gpu01_0000:27:00.0"]
    assert again["diff"] == {"before": {}, "after": {}} and len(placement.state["puts"]) == 1


@pytest.mark.parametrize("change, words", [
    ({"traits": ["COMPUTE_MANAGED_PCI_DEVICE"]}, "gpu01_0000:27:00.0 is not a one-time-use device (its provider "
                                                 "has no trait HW_PCI_ONE_TIME_USE)"),
    ({"allocations": {"vm-1": {"resources": {RC: 1}}}}, "gpu01_0000:27:00.0 is allocated (vm-1)"),
])
def test_refusals_write_nothing(return_module, run_module, placement, change, words):
    placement.state.update(change)
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]})
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("refusing to return: ") and words in result["msg"]
    assert result["msg"].endswith("nothing was returned")
    assert result["refused"][0]["name"] == "gpu01_0000:27:00.0" and placement.state["puts"] == []


def test_a_generation_conflict_reads_again_and_writes_again(return_module, run_module, placement, monkeypatch):
    monkeypatch.setattr(pci_return, "CONFLICT_PAUSE", 0)
    placement.state["put_answers"] = [conflict()]
    placement.state["generation"] = 5

    def nova_wrote_meanwhile(*_args, **_kwargs):
        placement.state["generation"] = 9

    monkeypatch.setattr(pci_return.time, "sleep", nova_wrote_meanwhile)
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]})
    assert result["changed"] is True and result["returned"] == ["gpu01_0000:27:00.0"]
    assert [body["resource_provider_generation"] for _path, body in placement.state["puts"]] == [5, 9]
    assert placement.state["reserved"] == 0


def test_a_device_returned_meanwhile_is_unchanged(return_module, run_module, placement, monkeypatch):
    placement.state["put_answers"] = [conflict()]
    monkeypatch.setattr(pci_return.time, "sleep", lambda _s: placement.state.update(reserved=0, generation=6))
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]}, diff=True)
    assert result["changed"] is False and result["unchanged"] == ["gpu01_0000:27:00.0"] and result["returned"] == []
    assert result["diff"] == {"before": {}, "after": {}} and len(placement.state["puts"]) == 1


def test_conflicts_without_end_are_bounded(return_module, run_module, placement, monkeypatch):
    monkeypatch.setattr(pci_return.time, "sleep", lambda _s: None)
    placement.state["put_answers"] = [conflict() for _ in range(5)]
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE], "conflict_retries": 2})
    assert result["failed"] is True and len(placement.state["puts"]) == 3
    assert result["msg"].startswith("returning gpu01_0000:27:00.0 failed: the provider's generation changed 3 times")


def test_another_error_fails_at_once(return_module, run_module, placement):
    placement.state["put_answers"] = [Response({"errors": [{"code": "placement.inventory.inuse"}]}, 409)]
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [DEVICE]})
    assert result["failed"] is True and len(placement.state["puts"]) == 1
    assert result["msg"].startswith("returning gpu01_0000:27:00.0 failed: HTTP 409")


def test_a_device_gone_from_placement(return_module, run_module, placement):
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [dict(DEVICE, uuid="gone")]})
    assert result["failed"] is True
    assert "gpu01_0000:27:00.0: Placement has no resource provider gone" in result["msg"]
    result = run_module(return_module, {"cloud": "ogc-test", "devices": [dict(DEVICE, resource_class="CUSTOM_X")]})
    assert "provider d1 has no inventory of CUSTOM_X" in result["msg"] and placement.state["puts"] == []


@pytest.mark.parametrize("module_args, words", [
    ({"devices": [DEVICE, DEVICE]}, "devices[1]: gpu01_0000:27:00.0 is named twice"),
    ({"devices": [dict(DEVICE, uuid=" ")]}, "devices[0] needs its provider's uuid and its resource_class"),
    ({"devices": [DEVICE], "conflict_retries": 11}, "conflict_retries=11 must be 0 to 10"),
])
def test_invalid_parameters_read_nothing(return_module, run_module, placement, module_args, words):
    result = run_module(return_module, dict(module_args, cloud="ogc-test"))
    assert result["failed"] is True and words in result["msg"]
    assert result["msg"].startswith("invalid parameters, nothing was read or returned")
    assert not placement.placement.get.called


# ------------------------------------------------------------------ the playbook's pure steps

def inventory_device(host, address, state="waiting_return", uuid=None):
    return {"name": f"{host}_{address.upper()}", "uuid": uuid or f"{host}-{address}", "host": host,
            "address": address, "resource_class": RC, "state": state}


NOVA = [inventory_device("hv-1", "0000:27:00.0"), inventory_device("hv-1", "0000:44:00.0", "free"),
        inventory_device("hv-2", "0000:27:00.0"), inventory_device("hv-3", "0000:a3:00.0"),
        inventory_device("hv-4", "0000:c3:00.0")]
NAMES = {"gpu-1": "hv-1", "gpu-2": "hv-2", "gpu-4a": "hv-4", "gpu-4b": "hv-4"}


def test_waiting_by_host():
    waiting = filters.return_gpus_waiting(NOVA, NAMES)
    assert {h: [d["address"] for d in ds] for h, ds in waiting["by_host"].items()} == {
        "gpu-1": ["0000:27:00.0"], "gpu-2": ["0000:27:00.0"]}
    assert waiting["requests"]["gpu-1"] == [{"address": "0000:27:00.0", "provider": "hv-1-0000:27:00.0",
                                             "resource_class": RC}]
    assert waiting["by_host"]["gpu-1"][0] == {"host": "gpu-1", "hypervisor": "hv-1", "address": "0000:27:00.0",
                                              "name": "hv-1_0000:27:00.0", "uuid": "hv-1-0000:27:00.0",
                                              "resource_class": RC}
    left = {d["hypervisor"]: d["reason"] for d in waiting["left"]}
    assert "no host of return_gpus_hosts has that hypervisor name" in left["hv-3"]
    assert "several hosts of return_gpus_hosts (gpu-4a, gpu-4b) have that hypervisor name" in left["hv-4"]
    assert waiting["count"] == 4 and waiting["not_waiting"] == []


def test_waiting_by_host_limited_to_addresses():
    waiting = filters.return_gpus_waiting(NOVA, NAMES, ["0000:27:00.0", "44:00.0", "0000:FF:00.0"])
    assert sorted(waiting["by_host"]) == ["gpu-1", "gpu-2"] and waiting["left"] == []
    assert waiting["not_waiting"] == [
        {"address": "0000:44:00.0", "reason": "0000:44:00.0 is not waiting to be returned (free on hv-1)"},
        {"address": "0000:ff:00.0", "reason": "0000:ff:00.0 is no device Nova reports to Placement"}]


@pytest.mark.parametrize("addresses, words", [
    ("0000:27:00.0", "return_gpus_addresses must be a list of PCI addresses"),
    (["0000:27:00.0", "gpu0"], "return_gpus_addresses[1] 'gpu0' is not a PCI address"),
    ([27], "return_gpus_addresses[0] 27 is not a PCI address"),
])
def test_address_errors(addresses, words):
    assert any(words in e for e in filters.return_gpus_address_errors(addresses))
    with pytest.raises(filters.AnsibleFilterError, match="return_gpus_waiting: "):
        filters.return_gpus_waiting(NOVA, NAMES, addresses)


def test_filter_input_errors():
    with pytest.raises(filters.AnsibleFilterError, match="devices must be os_pci_inventory's devices"):
        filters.return_gpus_waiting({"devices": []}, NAMES)
    with pytest.raises(filters.AnsibleFilterError, match="hypervisor_names must be"):
        filters.return_gpus_waiting(NOVA, ["gpu-1"])
    with pytest.raises(filters.AnsibleFilterError, match="waiting must be return_gpus_waiting's answer"):
        filters.return_gpus_to_return({}, {})
    with pytest.raises(filters.AnsibleFilterError, match="resets must be"):
        filters.return_gpus_to_return({"by_host": {}}, [])
    with pytest.raises(filters.AnsibleFilterError, match="without_reset must be true or false"):
        filters.return_gpus_to_return({"by_host": {}}, {}, "yes")
    with pytest.raises(filters.AnsibleFilterError, match="return_gpus_summary: expects"):
        filters.return_gpus_summary({}, {})
    assert set(filters.FilterModule().filters()) == {"return_gpus_address_errors", "return_gpus_waiting",
                                                     "return_gpus_to_return", "return_gpus_summary",
                                                     "return_gpus_fences"}
    with pytest.raises(filters.AnsibleFilterError, match="fences must be os_pci_fence's records"):
        filters.return_gpus_waiting(NOVA, NAMES, None, ["gpu-1"])
    with pytest.raises(filters.AnsibleFilterError, match="return_gpus_fences: expects"):
        filters.return_gpus_fences([])


@given(devices=st.lists(st.tuples(st.sampled_from(["hv-1", "hv-2", "hv-3", "hv-4"]),
                                  st.sampled_from(["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0"]),
                                  st.sampled_from(["waiting_return", "free", "in_use", "reserved"])), max_size=8,
                        unique_by=lambda d: (d[0], d[1])),
       addresses=st.lists(st.sampled_from(["0000:27:00.0", "0000:44:00.0"]), max_size=2, unique=True))
@settings(max_examples=100, deadline=None)
def test_waiting_by_host_property(devices, addresses):
    """Every waiting device asked for lands once, with its host or left with the reason; nothing else lands."""
    nova = [inventory_device(h, a, s) for h, a, s in devices]
    waiting = pci_return.waiting_by_host(nova, NAMES, addresses)
    landed = [(d["hypervisor"], d["address"]) for ds in waiting["by_host"].values() for d in ds]
    landed += [(d["hypervisor"], d["address"]) for d in waiting["left"]]
    expected = [(h, a) for h, a, s in devices if s == "waiting_return" and (not addresses or a in addresses)]
    assert sorted(landed) == sorted(expected) and waiting["count"] == len(expected)
    for host, ds in waiting["by_host"].items():
        assert all(NAMES[host] == d["hypervisor"] and d["host"] == host for d in ds)


def result_of(*items):
    """pci_device_reset's result for these (address, outcome, kind) items."""
    return {"changed": True, "devices": [{"address": a, "outcome": o, "kind": k, "reason": f"{a} {o} {k}"}
                                         for a, o, k in items]}


WAITING = {"by_host": {
    "gpu-1": [dict(host="gpu-1", hypervisor="hv-1", address=a, name=f"hv-1_{a}", uuid=f"u-{a}", resource_class=RC)
              for a in ("0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0")],
    "gpu-2": [dict(host="gpu-2", hypervisor="hv-2", address="0000:27:00.0", name="hv-2_0000:27:00.0", uuid="u-2",
                   resource_class=RC)]},
    "left": [dict(host=None, hypervisor="hv-3", address="0000:27:00.0", name="hv-3_x", uuid="u-3",
                  resource_class=RC, reason="hypervisor hv-3: ...")], "not_waiting": [], "count": 6}
RESETS = {"gpu-1": result_of(("0000:27:00.0", "reset", None), ("0000:44:00.0", "skipped", "no_reset"),
                             ("0000:a3:00.0", "skipped", "blocked"), ("0000:c3:00.0", "failed", "blocked"))}


@pytest.mark.parametrize("without_reset, returned", [
    (False, ["0000:27:00.0"]),
    (True, ["0000:27:00.0", "0000:44:00.0"]),   # the operator's choice: no_reset goes back, blocked never
])
def test_to_return(without_reset, returned):
    chosen = filters.return_gpus_to_return(WAITING, RESETS, without_reset)
    assert [d["address"] for d in chosen["devices"]] == returned
    assert [d["reset"] for d in chosen["devices"]] == [True, False][:len(returned)]
    assert chosen["requests"][0] == {"name": "hv-1_0000:27:00.0", "uuid": "u-0000:27:00.0", "resource_class": RC}
    skipped = {(d["host"], d["address"]): d["kind"] for d in chosen["skipped"]}
    assert skipped[("gpu-1", "0000:a3:00.0")] == "blocked" and skipped[("gpu-1", "0000:c3:00.0")] == "blocked"
    assert skipped[(None, "0000:27:00.0")] == "blocked" and skipped[("gpu-2", "0000:27:00.0")] == "blocked"
    assert (("gpu-1", "0000:44:00.0") in skipped) is not without_reset
    # gpu-2 did not answer; gpu-1's failed reset is an error too.
    assert chosen["errors"][0] == "0000:c3:00.0 failed blocked"  # the module's reason, as it is
    assert chosen["errors"][1].startswith("gpu-2: the host did not reset its GPUs (no answer: unreachable, or its "
                                          "play stopped): 0000:27:00.0 not reset, not returned")


def test_to_return_names_a_host_error():
    chosen = pci_return.to_return(WAITING, {"gpu-2": {"error": "passthrough_plan_load: no plan file"},
                                            "gpu-1": {"unreachable": True, "msg": "ssh: timed out"}})
    assert chosen["devices"] == [] and len(chosen["skipped"]) == 6
    assert "gpu-1: the host did not reset its GPUs (ssh: timed out)" in chosen["errors"][0]
    assert "gpu-2: the host did not reset its GPUs (passthrough_plan_load: no plan file)" in chosen["errors"][1]


def test_summary_lines():
    chosen = pci_return.to_return(WAITING, RESETS, True)
    returned = {"changed": True, "returned": ["hv-1_0000:27:00.0", "hv-1_0000:44:00.0"], "unchanged": [],
                "devices": [{"name": "hv-1_0000:27:00.0", "reserved_before": 1},
                            {"name": "hv-1_0000:44:00.0", "reserved_before": 1}]}
    out = filters.return_gpus_summary(WAITING, chosen, returned, False)
    assert out["lines"][0] == "6 one-time-use GPU(s) waiting to be returned: 2 returned, 4 skipped"
    assert out["lines"][1] == ("gpu-1: GPU 0000:27:00.0 (hypervisor hv-1, provider u-0000:27:00.0): returned to "
                               "Nova, reset first: reserved 1 -> 0")
    assert "WITHOUT a reset (return_gpus_without_reset)" in out["lines"][2]
    assert "skipped: 0000:a3:00.0 skipped blocked" in out["lines"]
    assert [d["address"] for d in out["returned"]] == ["0000:27:00.0", "0000:44:00.0"]
    assert out["waiting"] == {"gpu-1": ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"],
                              "gpu-2": ["0000:27:00.0"]}
    assert out["nothing_waiting"] is False and len(out["errors"]) == 2
    # An error is printed once, as an error, not also as a skip.
    assert "ERROR 0000:c3:00.0 failed blocked" in out["lines"]
    assert "skipped: 0000:c3:00.0 failed blocked" not in out["lines"]
    check = filters.return_gpus_summary(WAITING, chosen, returned, True)
    assert check["lines"][0].endswith("2 would return, 4 skipped (check mode: nothing was written)")


def test_summary_of_nothing_and_of_a_failed_return():
    nothing = {"by_host": {}, "left": [], "not_waiting": [], "count": 0}
    out = pci_return.summary(nothing, pci_return.to_return(nothing, {}), {"skipped": True})
    assert out["lines"] == ["Nothing waits to be returned: no one-time-use GPU is in state waiting_return"]
    assert out["nothing_waiting"] is True and out["errors"] == [] and out["returned"] == []
    chosen = pci_return.to_return(WAITING, {"gpu-1": result_of(("0000:27:00.0", "reset", None))})
    failed = {"failed": True, "msg": "refusing to return: hv-1_0000:27:00.0 is not a one-time-use device",
              "changed": False}
    out = pci_return.summary(WAITING, chosen, failed)
    assert out["returned"] == []
    assert "returning to Nova failed: refusing to return: hv-1_0000:27:00.0" in out["errors"][-1]
    assert out["lines"][-1].startswith("ERROR returning to Nova failed")
