"""Real servers on the test cloud's fake compute: os_server_lifetimes end to end, and GPU aliases
through the real scheduler (PciPassthroughFilter)."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest

from ogc_testlib import enable_compute_service, load_source, wait_status, collection_plugin

pytestmark = pytest.mark.integration


def wait_gone(conn, server_id, timeout=120):
    """The server once Nova no longer lists it (None), or as it still is when the time is up."""
    deadline = time.time() + timeout
    while True:
        server = conn.compute.find_server(server_id, all_projects=True)
        if server is None or time.time() > deadline:
            return server
        time.sleep(1)


@pytest.fixture
def cloud(compute_cloud):
    """Admin connection, a tiny image, a plain flavor (made when missing: no test relies on another's), and the
    compute host ogc-gpu-1 enabled (the drain tests leave it disabled)."""
    admin = compute_cloud.connect()
    enable_compute_service(admin, "ogc-gpu-1")
    image = admin.image.find_image("it-tiny") or admin.image.create_image(
        name="it-tiny", disk_format="raw", container_format="bare", data=b"\0" * 65536, visibility="public")
    flavor = admin.compute.find_flavor("it_plain") or admin.compute.create_flavor(name="it_plain", vcpus=1, ram=512,
                                                                                   disk=1)
    return {"admin": admin, "image": image, "flavor": flavor}


@pytest.fixture
def world(compute_cloud, cloud):
    """Projects ci and scratch and five ACTIVE servers of this test's own, deleted afterwards."""
    admin, image, flavor = cloud["admin"], cloud["image"], cloud["flavor"]
    role = admin.identity.find_role("admin", ignore_missing=False)
    me = admin.identity.find_user("admin", domain_id="default", ignore_missing=False)
    conns = {"admin": admin}
    for name in ("ci", "scratch"):
        project = admin.identity.find_project(name, domain_id="default") or \
            admin.identity.create_project(name=name, domain_id="default")
        admin.identity.assign_project_role_to_user(project, me, role)
        conns[name] = compute_cloud.connect(project=name)
    wanted = [("ci", "ci-old", {}), ("ci", "ci-exempt", {"ogc:exempt": "true"}),
              ("ci", "ci-kept", {"ogc:expires": "2099-01-01"}), ("scratch", "scratch-old", {}),
              ("admin", "admin-vm", {})]
    # All five built at once: a build that fails is a failure of the test.
    created = {name: conns[project].compute.create_server(name=name, flavor_id=flavor.id, image_id=image.id,
                                                         networks="none", metadata=metadata).id
               for project, name, metadata in wanted}
    try:
        for name, server_id in created.items():
            server = wait_status(admin, server_id, ("ACTIVE", "ERROR"), timeout=120)
            assert server.status == "ACTIVE", (name, server.status, server.fault)
        yield {"admin": admin, "servers": created}
    finally:
        delete_servers(admin, created.values())


def delete_servers(admin, server_ids):
    """Delete these servers (those still there) and wait until Nova no longer lists them."""
    for server_id in server_ids:
        admin.compute.delete_server(server_id, ignore_missing=True)
    for server_id in server_ids:
        assert wait_gone(admin, server_id) is None, server_id


def test_lifetimes_check_shelve_delete_idempotent(compute_cloud, world, tmp_path):
    admin, servers = world["admin"], world["servers"]
    # Servers cannot be made old through the API: measure their age two hours from now instead.
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    module = {"cloud": "ogc-test", "now": later, "timeout": 180,
              "policies": [{"project": "ci", "max_age_hours": 1},
                           {"project": "scratch", "max_age_hours": 1, "action": "delete"}]}
    tasks = [
        {"name": "check", "open_gpu_cloud.toolkit.os_server_lifetimes": module, "check_mode": True},
        {"name": "after check", "openstack.cloud.server_info": {"cloud": "ogc-test", "all_projects": True}},
        {"name": "real", "open_gpu_cloud.toolkit.os_server_lifetimes": module},
        {"name": "again", "open_gpu_cloud.toolkit.os_server_lifetimes": module},
        {"name": "unknown project", "open_gpu_cloud.toolkit.os_server_lifetimes": dict(module, policies=[{"project": "no-such-project",
                                                                                   "max_age_hours": 1}]),
         "ignore_errors": True},
    ]
    rc, results, raw = compute_cloud.tasks_in_order(tmp_path, tasks)
    assert rc == 0, raw
    check, after_check, real, again, unknown = results

    # Check mode: says what it would do, changes nothing.
    assert check["changed"] is True and check["acted"] == []
    assert {e["name"]: e["action"] for e in check["would_act"]} == {"ci-old": "shelve", "scratch-old": "delete"}
    assert {e["name"]: e["project"] for e in check["would_act"]} == {"ci-old": "ci", "scratch-old": "scratch"}
    assert all(e["age_hours"] > 1.9 for e in check["would_act"])
    states = {s["name"]: s["status"] for s in after_check["servers"]}
    assert all(states[name] == "ACTIVE" for name in servers), states

    # Real run: shelved and deleted, the exempt ones and other projects untouched.
    assert real["changed"] is True
    acted = {e["name"]: e for e in real["acted"]}
    assert set(acted) == {"ci-old", "scratch-old"}
    assert acted["ci-old"]["status"] in ("SHELVED", "SHELVED_OFFLOADED")
    assert acted["scratch-old"]["status"] == "DELETED"
    exempt = {e["name"]: e["reason"] for e in real["exempt"]}
    assert exempt == {"ci-exempt": "metadata ogc:exempt=true",
                      "ci-kept": "metadata ogc:expires: kept until 2099-01-01T00:00:00Z"}
    assert wait_status(admin, servers["ci-old"], ("SHELVED_OFFLOADED",), 120).status == "SHELVED_OFFLOADED"
    # Nova finishes a delete on the compute host after the API call returns: wait for it (bounded).
    assert wait_gone(admin, servers["scratch-old"]) is None
    for name in ("ci-exempt", "ci-kept", "admin-vm"):
        assert admin.compute.get_server(servers[name]).status == "ACTIVE", name

    # Again: nothing to do; the shelved server is reported as such. The re-run comes right after the shelve, in
    # the same play, so Nova may not have offloaded it yet: either shelved state is "already shelved".
    assert again["changed"] is False and again["acted"] == [] and again["would_act"] == []
    assert [(e["name"], e["reason"]) for e in again["not_acted"]] in (
        [("ci-old", "already shelved (SHELVED_OFFLOADED)")], [("ci-old", "already shelved (SHELVED)")])

    # An unknown project fails before any server is read.
    assert unknown["failed"] is True
    assert "lifetime policy names project(s) no-such-project that do not exist" in unknown["msg"]
    assert "nothing was changed" in unknown["msg"]


def gpu_flavor(admin, name, alias):
    found = admin.compute.find_flavor(name)
    if found is None:
        found = admin.compute.create_flavor(name=name, vcpus=1, ram=512, disk=1)
        admin.compute.create_flavor_extra_specs(found, {"pci_passthrough:alias": alias})
    return found


@pytest.fixture
def v100_server(cloud):
    """A server of a flavor asking for one Tesla V100 (the fake host has two), ACTIVE; deleted afterwards."""
    admin = cloud["admin"]
    server = admin.compute.create_server(name="gpu-v100", flavor_id=gpu_flavor(admin, "it_v100", "tesla-v100:1").id,
                                         image_id=cloud["image"].id, networks="none")
    try:
        yield wait_status(admin, server.id, ("ACTIVE", "ERROR"))
    finally:
        delete_servers(admin, [server.id])


def test_gpu_alias_through_the_scheduler(cloud, v100_server):
    """A flavor asking for a GPU the compute host has lands on it; one asking for a GPU nobody has fails."""
    admin = cloud["admin"]
    assert v100_server.status == "ACTIVE", v100_server.fault
    assert v100_server.compute_host == "ogc-gpu-1"
    rtx = admin.compute.create_server(name="gpu-rtx", flavor_id=gpu_flavor(admin, "it_rtx", "rtx-2080ti:1").id,
                                      image_id=cloud["image"].id, networks="none")
    try:
        failed = wait_status(admin, rtx.id, ("ACTIVE", "ERROR"))
        assert failed.status == "ERROR"
        assert "No valid host was found" in failed.fault["message"]
    finally:
        delete_servers(admin, [rtx.id])


def test_nova_pci_view_from_placement(compute_cloud, v100_server, tmp_path):
    """os_pci_inventory: the fake host's two V100 are counted in placement, one used by this test's server."""
    assert v100_server.status == "ACTIVE", v100_server.fault
    rc, results, raw = compute_cloud.tasks_in_order(tmp_path, [
        {"name": "view", "open_gpu_cloud.toolkit.os_pci_inventory": {"cloud": "ogc-test"}, "check_mode": True}])
    assert rc == 0, raw
    view = results[0]
    assert view["changed"] is False and view["available"] is True and view["note"] == ""
    assert view["hosts"] == {"ogc-gpu-1": {"CUSTOM_PCI_10DE_1DB4": {"total": 2, "used": 1, "reserved": 0, "free": 1}}}
    assert sorted(d["name"] for d in view["devices"]) == ["ogc-gpu-1_0000:27:00.0", "ogc-gpu-1_0000:44:00.0"]
    assert [h["name"] for h in view["hypervisors"]] == ["ogc-gpu-1"]
    # Device by device: the server's device is in use by it (its allocation's consumer), the other is free; both
    # carry the trait Nova gives every device it manages.
    states = {d["address"]: (d["state"], [c["uuid"] for c in d["consumers"]]) for d in view["devices"]}
    assert sorted(states.values()) == [("free", []), ("in_use", [v100_server.id])]
    assert all("COMPUTE_MANAGED_PCI_DEVICE" in d["traits"] and not d["one_time_use"] for d in view["devices"])


PLACEMENT = "1.28"  # consumer generations (PUT /allocations/{consumer})


def placement_call(admin, method, path, body=None, ok=(200, 204)):
    """One request to the test cloud's Placement API; its JSON answer (None for 204), or an AssertionError."""
    kwargs = {"json": body} if body is not None else {}
    response = getattr(admin.placement, method)(path, microversion=PLACEMENT, raise_exc=False, **kwargs)
    assert response.status_code in ok, (method, path, response.status_code, response.text)
    return response.json() if response.status_code != 204 else None


def set_reserved(admin, provider, resource_class, reserved):
    """Set a device provider's inventory's reserved, as an operator does (osc-placement's `inventory set --amend`:
    read, then write with the generation read; Nova's periodic update may bump it meanwhile: read again)."""
    path = f"/resource_providers/{provider}/inventories/{resource_class}"
    for _attempt in range(5):
        current = placement_call(admin, "get", path)
        body = dict(current, reserved=reserved)
        response = admin.placement.put(path, json=body, microversion=PLACEMENT, raise_exc=False)
        if response.status_code != 409:
            assert response.status_code == 200, response.text
            return
        time.sleep(1)
    raise AssertionError(f"{path}: the generation kept changing (409)")


def test_reserved_device_and_orphaned_allocation(compute_cloud, v100_server, tmp_path):
    """Through the real Placement API: reserve the server's device as an operator would (no one-time-use trait) and
    give the free device an allocation whose consumer is no server; os_pci_inventory tells each apart, the health
    filter alerts on both with the fix; then both are undone and nothing is left."""
    assert v100_server.status == "ACTIVE", v100_server.fault
    admin = compute_cloud.connect()
    rc = "CUSTOM_PCI_10DE_1DB4"
    providers = placement_call(admin, "get", "/resource_providers")["resource_providers"]
    devices = {p["name"]: p["uuid"] for p in providers if p["name"].startswith("ogc-gpu-1_")}
    assert sorted(devices) == ["ogc-gpu-1_0000:27:00.0", "ogc-gpu-1_0000:44:00.0"]
    used = {name: placement_call(admin, "get", f"/resource_providers/{rp}/usages")["usages"][rc]
            for name, rp in devices.items()}
    busy = next(name for name, n in used.items() if n == 1)
    free = next(name for name, n in used.items() if n == 0)
    ghost = str(uuid.uuid4())
    view_task = [{"name": "view", "open_gpu_cloud.toolkit.os_pci_inventory": {"cloud": "ogc-test"}}]
    try:
        set_reserved(admin, devices[busy], rc, 1)
        placement_call(admin, "put", f"/allocations/{ghost}", {
            "allocations": {devices[free]: {"resources": {rc: 1}}}, "consumer_generation": None,
            "project_id": admin.current_project_id, "user_id": admin.current_user_id})
        rc_run, results, raw = compute_cloud.tasks_in_order(tmp_path, view_task)
        assert rc_run == 0, raw
        view = results[0]
    finally:
        placement_call(admin, "delete", f"/allocations/{ghost}", ok=(204, 404))
        set_reserved(admin, devices[busy], rc, 0)

    by_name = {d["name"]: d for d in view["devices"]}
    assert by_name[busy]["state"] == "reserved" and by_name[busy]["reserved"] == 1
    assert by_name[busy]["consumers"] == [{"uuid": v100_server.id, "kind": "server", "status": None}]
    assert by_name[free]["state"] == "orphaned"
    assert by_name[free]["consumers"] == [{"uuid": ghost, "kind": "none", "status": None}]
    assert view["hosts"]["ogc-gpu-1"][rc] == {"total": 1, "used": 2, "reserved": 1, "free": 0}

    # What health makes of it, for a host whose plan gives Nova both devices.
    health = collection_plugin("filter", "gpu_health")
    busy_address, free_address = busy.split("_", 1)[1].lower(), free.split("_", 1)[1].lower()
    gpus = [{"address": a, "for_nova": True, "present": True} for a in sorted((busy_address, free_address))]
    report = {"host": "gpu-1", "found": 2, "expected": 2, "gpus": gpus, "alerts": []}
    out = health.gpu_health_nova([report], view, {"gpu-1": "ogc-gpu-1"})
    got = out["reports"][0]
    assert got["nova_reserved"] == [busy_address]
    assert got["nova_orphaned"] == [{"address": free_address, "consumer": ghost}]
    assert got["nova"]["reserved"] == 1 and got["nova"]["orphan_allocations"] == 1
    assert len(out["alerts"]) == 2
    assert (f"openstack resource provider inventory set {devices[busy]} --amend --resource {rc}:reserved=0"
            in out["alerts"][0])
    assert f"openstack resource provider allocation delete {ghost}" in out["alerts"][1]

    # Undone: the view is the one of test_nova_pci_view_from_placement again.
    rc_run, results, raw = compute_cloud.tasks_in_order(tmp_path, view_task, name="again.yml")
    assert rc_run == 0, raw
    assert {d["name"]: d["state"] for d in results[0]["devices"]} == {busy: "in_use", free: "free"}
