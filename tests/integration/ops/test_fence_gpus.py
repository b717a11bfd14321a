"""playbooks/health.yml fences a failed GPU in the compute test cloud's real Placement, and lifts the fence once the
GPU is repaired.

The fake compute ogc-gpu-1 reports two Tesla V100, 0000:27:00.0 and 0000:44:00.0, to Placement. The GPU host is a
sandbox built by scripts/mock_sysfs.py from the seed V100 fixture (inventory name gpu-seed, nova_hypervisor_hostname
ogc-gpu-1), its plan giving Nova exactly those two. A GPU falls off the bus by the kernel's rule (its directory and
every link to it disappear) and comes back as it was. Everything this test changes in Placement is put back at the
end (reserved 0 on both providers), and its servers are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from ogc_testlib import (ROOT, configured_host, enable_compute_service, json_report, run_playbook, sandbox_host,
                         wait_status, write_inventory)
from test_return_gpus import NO_RESET, RESETTABLE, gpu_host, run_seen, used_devices  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.integration

PLACEMENT = "1.26"
RC = "CUSTOM_PCI_10DE_1DB4"
KEPT, FAILING = "0000:27:00.0", "0000:44:00.0"
POLICY = {"exclude": ["0000:a3:00.0", "0000:c3:00.0", "0000:c4:00.0"]}
FENCE_TASK = "Fence failed GPUs in Placement, lift the fences of repaired ones"


def placement_call(admin, method, path, body=None, ok=(200, 204)):
    kwargs = {"json": body} if body is not None else {}
    response = getattr(admin.placement, method)(path, microversion=PLACEMENT, raise_exc=False, **kwargs)
    assert response.status_code in ok, (method, path, response.status_code, response.text)
    return response.json() if response.status_code != 204 else None


def reserved(admin, uuid):
    return placement_call(admin, "get", f"/resource_providers/{uuid}/inventories/{RC}")["reserved"]


def used(admin, uuid):
    return placement_call(admin, "get", f"/resource_providers/{uuid}/usages")["usages"].get(RC, 0)


def set_reserved(admin, uuid, value):
    path = f"/resource_providers/{uuid}/inventories/{RC}"
    for _attempt in range(5):
        current = placement_call(admin, "get", path)
        response = admin.placement.put(path, json=dict(current, reserved=value), microversion=PLACEMENT,
                                       raise_exc=False)
        if response.status_code != 409:
            assert response.status_code == 200, response.text
            return
        time.sleep(1)
    raise AssertionError(f"{path}: the generation kept changing (409)")


def wait_unused(admin, uuid, timeout=120):
    """Nova removes a deleted server's allocation a moment after the server is gone from the API."""
    deadline = time.time() + timeout
    while used(admin, uuid) and time.time() < deadline:
        time.sleep(2)
    assert used(admin, uuid) == 0, f"provider {uuid} is still in use"


def candidates(admin):
    """The device providers Placement would give a request for one GPU now."""
    answer = placement_call(admin, "get", f"/allocation_candidates?resources={RC}:1")
    return sorted(rp for request in answer["allocation_requests"] for rp in request["allocations"])


@pytest.fixture
def devices(compute_cloud):
    """(admin, {address: provider uuid}) of ogc-gpu-1's two V100, both free and unreserved; both unreserved after."""
    admin = compute_cloud.connect()
    enable_compute_service(admin, "ogc-gpu-1")
    providers = placement_call(admin, "get", "/resource_providers")["resource_providers"]
    found = {p["name"].split("_", 1)[1].lower(): p["uuid"] for p in providers if p["name"].startswith("ogc-gpu-1_")}
    assert sorted(found) == [KEPT, FAILING]
    for uuid in found.values():
        wait_unused(admin, uuid)
        assert reserved(admin, uuid) == 0
    try:
        yield admin, found
    finally:
        for uuid in found.values():
            set_reserved(admin, uuid, 0)


@pytest.fixture
def servers(compute_cloud, devices):
    """Boot servers of a flavor asking for one Tesla V100; every one deleted afterwards."""
    admin = devices[0]
    image = admin.image.find_image("it-tiny") or admin.image.create_image(
        name="it-tiny", disk_format="raw", container_format="bare", data=b"\0" * 65536, visibility="public")
    flavor = admin.compute.find_flavor("it_v100")
    if flavor is None:
        flavor = admin.compute.create_flavor(name="it_v100", vcpus=1, ram=512, disk=1)
        admin.compute.create_flavor_extra_specs(flavor, {"pci_passthrough:alias": "tesla-v100:1"})
    made = []

    def boot(name):
        server = admin.compute.create_server(name=name, flavor_id=flavor.id, image_id=image.id, networks="none")
        made.append(server.id)
        return wait_status(admin, server.id, ("ACTIVE", "ERROR"))

    try:
        yield boot
    finally:
        for server_id in made:
            admin.compute.delete_server(server_id, ignore_missing=True)
        for server_id in made:
            deadline = time.time() + 120
            while admin.compute.find_server(server_id, all_projects=True) and time.time() < deadline:
                time.sleep(1)
        for uuid in devices[1].values():
            wait_unused(admin, uuid)


class Host:
    """The sandbox GPU host gpu-seed: its inventory, and its GPUs falling off the bus and coming back."""

    def __init__(self, tmp_path, compute_cloud):
        self.root, plans = tmp_path / "gpu-seed", tmp_path / "plans"
        plan = configured_host(self.root, plans, "gpu-seed", policy=POLICY)
        assert sorted(s["address"] for s in plan["selected"]) == [KEPT, FAILING]
        self.saved = tmp_path / "saved-sys"
        shutil.copytree(self.root / "sys", self.saved, symlinks=True)
        self.fences = tmp_path / "fences"
        self.metrics = tmp_path / "textfile" / "ogc_gpu.prom"
        host = sandbox_host(self.root, plans, passthrough_policy=POLICY, nova_hypervisor_hostname="ogc-gpu-1",
                            health_nova_host="ogc-gpu-1", ansible_become=False,
                            gpu_health_metrics_dir=str(tmp_path / "textfile"))
        self.inventory = write_inventory(tmp_path / "inventory.yml", {"gpu-seed": host}, {
            "cloud_name": "ogc-test", "cloud_clouds_yaml": compute_cloud.clouds_yaml,
            "health_fence_dir": str(self.fences), "health_fail_on_alert": False})
        self.env = compute_cloud.env()

    def fall_off_the_bus(self, address):
        link = self.root / "sys" / "bus" / "pci" / "devices" / address
        target = os.path.realpath(link)
        link.unlink()
        shutil.rmtree(target)
        for group in (self.root / "sys" / "kernel" / "iommu_groups").iterdir():
            stale = group / "devices" / address
            if os.path.lexists(stale):
                stale.unlink()

    def repair(self):
        """Every GPU back on the bus, on vfio-pci, as before."""
        shutil.rmtree(self.root / "sys")
        shutil.copytree(self.saved, self.root / "sys", symlinks=True)

    def record(self):
        path = self.fences / "gpu-seed.json"
        return json.loads(path.read_text()) if path.exists() else None

    def health(self, *args):
        """ansible-playbook playbooks/health.yml, which must succeed: ({task: localhost result}, stats,
        health_summary)."""
        proc = run_playbook("-i", self.inventory, os.path.join(ROOT, "playbooks", "health.yml"), *args, env=self.env)
        out = json_report(proc.stdout)
        if out is None:
            pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        results = {task["task"]["name"]: task["hosts"]["localhost"] for play in out["plays"] for task in play["tasks"]
                   if "localhost" in task["hosts"]}
        summary = [r for name, r in results.items() if name in ("Add the fences to the summary",
                                                                "Combine the hosts' reports with Nova's view")
                   and not r.get("skipped")][-1]["ansible_facts"]["health_summary"]
        assert proc.returncode == 0, proc.stdout[-4000:]
        return results, out["stats"], summary


def test_a_failed_gpu_is_fenced_then_lifted(compute_cloud, devices, servers, tmp_path):
    admin, uuids = devices
    host = Host(tmp_path, compute_cloud)
    host.fall_off_the_bus(FAILING)

    # health_fence false: nothing is fenced; a value that is no boolean is refused before anything is written.
    results, _stats, _summary = host.health("-e", "health_fence=false")
    assert results[FENCE_TASK]["changed"] is False and results[FENCE_TASK]["fenced"] == []
    assert host.record() is None and reserved(admin, uuids[FAILING]) == 0
    proc = run_playbook("-i", host.inventory, os.path.join(ROOT, "playbooks", "health.yml"), "-e", "health_fence=maybe",
                        env=host.env)
    assert proc.returncode != 0 and "health_fence must be true or false (got maybe)" in " ".join(proc.stdout.split())
    assert host.record() is None and reserved(admin, uuids[FAILING]) == 0

    # Check mode: it says what it would fence, and writes nothing.
    results, _stats, summary = host.health("--check")
    assert results[FENCE_TASK]["fenced"] == [f"ogc-gpu-1_{FAILING.upper()}"]
    assert any(a.startswith(f"gpu-seed: GPU {FAILING} would be fenced in Placement (provider {uuids[FAILING]}")
               for a in summary["alerts"]), summary["alerts"]
    assert host.record() is None and reserved(admin, uuids[FAILING]) == 0

    # The real run: reserved = total on its provider, the reason in the record, an alert and a metric naming it.
    results, _stats, summary = host.health()
    assert results[FENCE_TASK]["changed"] is True
    assert reserved(admin, uuids[FAILING]) == 1 and reserved(admin, uuids[KEPT]) == 0
    [entry] = host.record()["fences"]
    assert (entry["address"], entry["provider"], entry["resource_class"], entry["cause"], entry["reserved_by_fence"]) \
        == (FAILING, uuids[FAILING], RC, "gone_from_bus", True)
    assert entry["reason"].startswith(f"gpu-seed: GPU {FAILING} (") and "is gone from the PCI bus" in entry["reason"]
    assert oct(os.stat(host.fences / "gpu-seed.json").st_mode & 0o777) == "0o644"
    [alert] = [a for a in summary["alerts"] if "fenced in Placement" in a]
    assert alert.startswith(f"gpu-seed: GPU {FAILING} is fenced in Placement (provider {uuids[FAILING]} on ogc-gpu-1")
    assert entry["reason"] in alert and not any("an operator's reservation" in a for a in summary["alerts"])
    assert f'ogc_gpu_fenced{{address="{FAILING}",cause="gone_from_bus"}} 1' in host.metrics.read_text().splitlines()

    # Again: nothing changes.
    results, _stats, _summary = host.health()
    assert results[FENCE_TASK]["changed"] is False and results[FENCE_TASK]["unchanged"] == [
        f"ogc-gpu-1_{KEPT.upper()}", f"ogc-gpu-1_{FAILING.upper()}"]
    assert host.record()["fences"] == [entry]

    # The scheduler: Placement offers only the other GPU; a server lands on it, the next one finds no host.
    assert candidates(admin) == [uuids[KEPT]]
    first = servers("fenced-1")
    assert first.status == "ACTIVE", first.fault
    assert used(admin, uuids[KEPT]) == 1 and used(admin, uuids[FAILING]) == 0
    second = servers("fenced-2")
    assert second.status == "ERROR" and "No valid host was found" in second.fault["message"]

    # Repaired: the fence is lifted (reserved 0, record gone), the running server untouched; again: nothing.
    host.repair()
    results, _stats, summary = host.health()
    assert results[FENCE_TASK]["unfenced"] == [f"ogc-gpu-1_{FAILING.upper()}"]
    assert reserved(admin, uuids[FAILING]) == 0 and host.record() is None
    assert any(f"gpu-seed: GPU {FAILING} repaired (on the bus, on vfio-pci): its fence lifted" in line
               for line in summary["lines"])
    assert used(admin, uuids[KEPT]) == 1 and admin.compute.get_server(first.id).status == "ACTIVE"
    results, _stats, _summary = host.health()
    assert results[FENCE_TASK]["changed"] is False and reserved(admin, uuids[FAILING]) == 0

    # A GPU a server holds fails: not fenced now (the server keeps it untouched), an alert and a metric say so.
    host.fall_off_the_bus(KEPT)
    results, _stats, summary = host.health()
    assert results[FENCE_TASK]["changed"] is False
    assert [d["address"] for d in results[FENCE_TASK]["deferred"]] == [KEPT]
    assert any(a.startswith(f"gpu-seed: GPU {KEPT} failed but is not fenced: ogc-gpu-1_{KEPT.upper()} is allocated "
                            f"({first.id})") for a in summary["alerts"]), summary["alerts"]
    assert f'ogc_gpu_fence_deferred{{address="{KEPT}"}} 1' in host.metrics.read_text().splitlines()
    assert reserved(admin, uuids[KEPT]) == 0 and used(admin, uuids[KEPT]) == 1 and host.record() is None
    assert admin.compute.get_server(first.id).status == "ACTIVE"

    # Its server gone, the next run fences it.
    admin.compute.delete_server(first.id)
    wait_unused(admin, uuids[KEPT])
    results, _stats, _summary = host.health()
    assert results[FENCE_TASK]["fenced"] == [f"ogc-gpu-1_{KEPT.upper()}"] and reserved(admin, uuids[KEPT]) == 1
    host.repair()
    results, _stats, _summary = host.health()
    assert results[FENCE_TASK]["unfenced"] == [f"ogc-gpu-1_{KEPT.upper()}"] and reserved(admin, uuids[KEPT]) == 0
    assert host.record() is None


def test_an_operators_reservation_is_never_lifted(compute_cloud, devices, tmp_path):
    """A device an operator reserved, healthy: health reports the reservation and leaves it as it is."""
    admin, uuids = devices
    host = Host(tmp_path, compute_cloud)
    set_reserved(admin, uuids[FAILING], 1)
    results, _stats, summary = host.health()
    assert results[FENCE_TASK]["changed"] is False and reserved(admin, uuids[FAILING]) == 1
    assert any("an operator's reservation" in a and FAILING in a for a in summary["alerts"])
    assert host.record() is None


def test_return_gpus_never_returns_a_fenced_gpu(compute_cloud, used_devices, tmp_path):  # noqa: F811
    """Both V100 one-time-use devices waiting to be returned (test_return_gpus.py's used_devices); 0000:44:00.0 is
    fenced (a record of ours, written as os_pci_fence writes one for a failed reset): return_gpus.yml resets and returns
    the other, skips the fenced one with the reason, and leaves it reserved and fenced."""
    admin, uuids = used_devices[0], used_devices[1]
    inventory, root = gpu_host(tmp_path, compute_cloud)
    fences = tmp_path / "fences"
    fences.mkdir()
    entry = dict(address=NO_RESET, provider=uuids[NO_RESET], name=f"ogc-gpu-1_{NO_RESET.upper()}", resource_class=RC,
                 cause="reset_failed", reason=f"gpu-seed: GPU {NO_RESET}: the reset failed", since="2026-11-28T06:40:00Z",
                 reserved_by_fence=False, reserved_before=1)
    (fences / "gpu-seed.json").write_text(json.dumps({"format": 1, "host": "gpu-seed", "fences": [entry]}))
    rc, _results, _stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [RESETTABLE, NO_RESET],
                                                  "-e", f"health_fence_dir={fences}")
    assert rc == 0, out[-4000:]
    assert [d["address"] for d in summary["returned"]] == [RESETTABLE]
    [skipped] = summary["skipped"]
    assert skipped["address"] == NO_RESET and skipped["reason"].startswith(
        f"gpu-seed: GPU {NO_RESET} (provider {uuids[NO_RESET]}) is fenced since 2026-11-28T06:40:00Z (reset_failed: "
        f"gpu-seed: GPU {NO_RESET}: the reset failed): a fenced GPU is never returned")
    assert reserved(admin, uuids[NO_RESET]) == 1 and reserved(admin, uuids[RESETTABLE]) == 0
    assert json.loads((fences / "gpu-seed.json").read_text())["fences"] == [entry]
    assert not os.path.exists(root / "sys" / "bus" / "pci" / "devices" / NO_RESET / "reset") or \
        os.stat(root / "sys" / "bus" / "pci" / "devices" / NO_RESET / "reset").st_size == 0
