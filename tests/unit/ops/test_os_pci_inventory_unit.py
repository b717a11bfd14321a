"""os_pci_inventory: the pure decisions (what each consumer and each device is; examples and properties) and the
exact API calls of read() (SDK mocked). The same module against the real Nova and Placement:
tests/integration/ops/test_compute_cloud.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import collection_module

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import pci_inventory  # noqa: E402

RC = "CUSTOM_PCI_10DE_1DB4"
OTU = "HW_PCI_ONE_TIME_USE"


@pytest.fixture(scope="module")
def inventory_module():
    return collection_module("os_pci_inventory")


# ------------------------------------------------------------------ pure parts

def test_consumer_kinds():
    migrations = {"m-run": {"status": "running"}, "m-resize": {"status": "finished"},
                  "m-done": {"status": "confirmed"}, "m-err": {"status": "error"}, "m-pre": {"status": "pre-migrating"}}
    kinds = pci_inventory.consumer_kinds(["vm", "m-run", "m-resize", "m-done", "m-err", "m-pre", "ghost", "vm"],
                                         ["vm", "other-vm"], migrations)
    assert kinds == {"vm": {"kind": "server", "status": None},
                     "m-run": {"kind": "migration", "status": "running"},
                     "m-resize": {"kind": "migration", "status": "finished"},  # a resize waiting to be confirmed
                     "m-pre": {"kind": "migration", "status": "pre-migrating"},
                     "m-done": {"kind": "none", "status": "confirmed"},
                     "m-err": {"kind": "none", "status": "error"},
                     "ghost": {"kind": "none", "status": None}}


@pytest.mark.parametrize("reserved, one_time_use, kinds, state", [
    (0, False, [], "free"),
    (0, True, [], "free"),
    (0, False, ["server"], "in_use"),
    (0, False, ["migration"], "in_use"),
    (1, True, ["server"], "in_use"),           # a one-time-use device in use: Nova reserved it, as it should
    (1, True, [], "waiting_return"),           # used once, the server gone: an operator returns it
    (1, False, [], "reserved"),                # no one-time-use trait: an operator's reservation
    (1, False, ["server"], "reserved"),
    (0, False, ["none"], "orphaned"),
    (1, True, ["none"], "orphaned"),           # remove the allocation first; then it waits to be returned
    (1, False, ["server", "none"], "orphaned"),
])
def test_device_state(reserved, one_time_use, kinds, state):
    consumers = [{"uuid": f"c{n}", "kind": k} for n, k in enumerate(kinds)]
    assert pci_inventory.device_state(reserved, one_time_use, consumers) == state


def test_a_used_device_whose_allocations_were_not_read_is_in_use():
    assert pci_inventory.device_state(0, False, [], used=1) == "in_use"
    assert pci_inventory.device_state(1, True, [], used=1) == "in_use"


@given(reserved=st.integers(0, 2), one_time_use=st.booleans(), used=st.integers(0, 1),
       kinds=st.lists(st.sampled_from(["server", "migration", "none"]), max_size=3))
@settings(max_examples=100, deadline=None)
def test_device_state_property(reserved, one_time_use, used, kinds):
    """One state per device, and each exactly when its rule holds."""
    state = pci_inventory.device_state(reserved, one_time_use, [{"uuid": str(n), "kind": k} for n, k in
                                                                enumerate(kinds)], used)
    assert state in pci_inventory.STATES
    busy = bool(kinds) or used > 0
    assert (state == "orphaned") == ("none" in kinds)
    assert (state == "reserved") == ("none" not in kinds and reserved > 0 and not one_time_use)
    assert (state == "waiting_return") == (reserved > 0 and one_time_use and not busy)
    assert (state == "in_use") == ("none" not in kinds and busy and (reserved == 0 or one_time_use))
    assert (state == "free") == (not busy and reserved == 0)


def provider_tree():
    """Placement's answers for one compute node gpu01 with three V100 providers (as Nova names them)."""
    providers = [{"uuid": "root", "name": "gpu01", "root_provider_uuid": "root"},
                 {"uuid": "d1", "name": "gpu01_0000:27:00.0", "root_provider_uuid": "root"},
                 {"uuid": "d2", "name": "gpu01_0000:A3:00.0", "root_provider_uuid": "root"},
                 {"uuid": "d3", "name": "gpu01_0000:C3:00.0", "root_provider_uuid": "root"}]
    inventories = {"root": {"VCPU": {"total": 64, "reserved": 0}},
                   "d1": {RC: {"total": 1, "reserved": 0}}, "d2": {RC: {"total": 1, "reserved": 1}},
                   "d3": {RC: {"total": 1, "reserved": 1}}}
    usages = {"root": {"VCPU": 2}, "d1": {RC: 1}, "d2": {RC: 0}, "d3": {RC: 1}}
    traits = {"d1": ["COMPUTE_MANAGED_PCI_DEVICE"], "d2": ["COMPUTE_MANAGED_PCI_DEVICE", OTU],
              "d3": ["COMPUTE_MANAGED_PCI_DEVICE", OTU]}
    allocations = {"d1": {"vm-1": {RC: 1}}, "d2": {}, "d3": {"gone": {RC: 1}}}
    return providers, inventories, usages, traits, allocations


def test_summarise_device_by_device():
    providers, inventories, usages, traits, allocations = provider_tree()
    kinds = pci_inventory.consumer_kinds(["vm-1", "gone"], ["vm-1"], {})
    hosts, devices = pci_inventory.summarise(providers, inventories, usages, ["CUSTOM_PCI_*"], traits, allocations,
                                             kinds)
    assert hosts == {"gpu01": {RC: {"total": 1, "used": 2, "reserved": 2, "free": 0}}}
    assert [(d["address"], d["state"], d["total"], d["inventory_total"], d["reserved"], d["used"], d["free"])
            for d in devices] == [("0000:27:00.0", "in_use", 1, 1, 0, 1, 0),
                                  ("0000:a3:00.0", "waiting_return", 0, 1, 1, 0, 0),
                                  ("0000:c3:00.0", "orphaned", 0, 1, 1, 1, 0)]
    assert devices[2]["consumers"] == [{"uuid": "gone", "kind": "none", "status": None}]
    assert devices[1]["one_time_use"] is True and devices[1]["traits"] == ["COMPUTE_MANAGED_PCI_DEVICE", OTU]
    assert devices[0]["uuid"] == "d1" and devices[0]["host"] == "gpu01" and devices[0]["name"] == "gpu01_0000:27:00.0"


def test_summarise_without_traits_and_allocations():
    """A provider named otherwise (a vGPU class on the compute node) has no address; no allocation read: no
    consumer known, in use by its usage."""
    providers = [{"uuid": "root", "name": "gpu01", "root_provider_uuid": "root"}]
    hosts, devices = pci_inventory.summarise(providers, {"root": {"VGPU": {"total": 4}}}, {"root": {"VGPU": 1}},
                                             ["VGPU"])
    assert hosts == {"gpu01": {"VGPU": {"total": 4, "used": 1, "reserved": 0, "free": 3}}}
    assert devices[0]["address"] is None and devices[0]["consumers"] == [] and devices[0]["state"] == "in_use"


# ------------------------------------------------------------------ read(): the exact calls (SDK mocked)

class Response:
    """What conn.placement.get answers (a keystoneauth response)."""

    def __init__(self, body, status_code=200):
        self.status_code, self.body = status_code, body
        self.text = json.dumps(body)

    def json(self):
        return self.body


@pytest.fixture
def cloud(conn):
    providers, inventories, usages, traits, allocations = provider_tree()
    answers = {"/resource_providers": {"resource_providers": providers, "resource_provider_generation": 1}}
    for uuid in inventories:
        answers[f"/resource_providers/{uuid}/inventories"] = {"inventories": inventories[uuid]}
        answers[f"/resource_providers/{uuid}/usages"] = {"usages": usages[uuid]}
        answers[f"/resource_providers/{uuid}/traits"] = {"traits": traits.get(uuid, [])}
        answers[f"/resource_providers/{uuid}/allocations"] = {"allocations": {
            c: {"resources": r} for c, r in allocations.get(uuid, {}).items()}}
    conn.answers = answers
    conn.placement.get.side_effect = lambda path, microversion=None: Response(conn.answers[path])
    conn.compute.hypervisors.return_value = [SimpleNamespace(name="gpu01", state="up", status="enabled")]
    conn.compute.servers.side_effect = lambda **kw: iter([SimpleNamespace(id="vm-1"), SimpleNamespace(id="vm-2")])
    conn.compute.migrations.side_effect = lambda **kw: iter([
        SimpleNamespace(uuid="gone", status="completed", server_id="vm-9", migration_type="migration"),
        SimpleNamespace(uuid="other", status="running", server_id="vm-2", migration_type="live-migration")])
    return conn


def test_read_asks_placement_then_nova(inventory_module, run_module, cloud):
    result = run_module(inventory_module, {"cloud": "ogc-test"}, check_mode=True)
    assert result["changed"] is False and result["available"] is True
    paths = [c.args[0] for c in cloud.placement.get.call_args_list]
    assert paths[0] == "/resource_providers"
    # Traits and allocations of the device providers only, not of the compute node.
    assert "/resource_providers/root/traits" not in paths and "/resource_providers/root/allocations" not in paths
    for uuid in ("d1", "d2", "d3"):
        assert [p for p in paths if p.startswith(f"/resource_providers/{uuid}/")] == [
            f"/resource_providers/{uuid}/{what}" for what in ("inventories", "usages", "traits", "allocations")]
    assert {c.kwargs["microversion"] for c in cloud.placement.get.call_args_list} == {"1.14"}
    cloud.compute.servers.assert_called_once_with(details=False, all_projects=True)
    cloud.compute.migrations.assert_called_once_with()  # "gone" is no server: the migrations are asked
    assert [(d["address"], d["state"]) for d in result["devices"]] == [
        ("0000:27:00.0", "in_use"), ("0000:a3:00.0", "waiting_return"), ("0000:c3:00.0", "orphaned")]
    assert result["devices"][2]["consumers"] == [{"uuid": "gone", "kind": "none", "status": "completed"}]


def test_read_skips_the_migrations_when_every_consumer_is_a_server(inventory_module, run_module, cloud):
    cloud.answers["/resource_providers/d3/allocations"] = {"allocations": {}}
    cloud.answers["/resource_providers/d3/usages"] = {"usages": {RC: 0}}
    result = run_module(inventory_module, {"cloud": "ogc-test"})
    assert not cloud.compute.migrations.called
    assert [d["state"] for d in result["devices"]] == ["in_use", "waiting_return", "waiting_return"]


def test_read_skips_the_servers_when_nothing_is_allocated(inventory_module, run_module, cloud):
    for uuid in ("d1", "d3"):
        cloud.answers[f"/resource_providers/{uuid}/allocations"] = {"allocations": {}}
        cloud.answers[f"/resource_providers/{uuid}/usages"] = {"usages": {RC: 0}}
    result = run_module(inventory_module, {"cloud": "ogc-test"})
    assert not cloud.compute.servers.called and not cloud.compute.migrations.called
    assert [d["state"] for d in result["devices"]] == ["free", "waiting_return", "waiting_return"]


def test_a_placement_error_names_the_path(inventory_module, run_module, cloud):
    cloud.answers["/resource_providers/d2/traits"] = {"errors": [{"detail": "boom"}]}
    cloud.placement.get.side_effect = lambda path, microversion=None: Response(
        cloud.answers[path], 500 if path.endswith("d2/traits") else 200)
    result = run_module(inventory_module, {"cloud": "ogc-test"})
    assert result["failed"] is True
    assert result["msg"].startswith("reading placement /resource_providers/d2/traits failed: HTTP 500")
