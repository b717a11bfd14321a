"""playbooks/return_gpus.yml against the compute test cloud's real Placement and a sandbox GPU host.

The fake compute ogc-gpu-1 reports two Tesla V100, 0000:27:00.0 and 0000:44:00.0, in Placement, but not as
one-time-use devices (its device_spec has no one_time_use). Through the real Placement API this test makes both look
like one-time-use devices that a server used and left (the trait HW_PCI_ONE_TIME_USE added to their providers' own,
reserved = 1: what Nova writes), and restores both at the end. The GPU host is a sandbox built by scripts/mock_sysfs.py
from the seed V100 fixture, inventory name gpu-seed with nova_hypervisor_hostname ogc-gpu-1, its GPUs on vfio-pci;
there the kernel has a reset for 0000:27:00.0 and none for 0000:44:00.0 (no reset_method, no reset file), so its
plan says resettable false.

Nova's periodic update (every 60 s) rewrites a provider's traits with its own once it has read them again from
Placement (every resource_provider_association_refresh, 300 s): the added trait can vanish once during the test. A run
that saw fewer devices waiting (or was refused one) while the trait was gone is run again once, after the trait is put
back; any other outcome is the run's own.
"""

from __future__ import annotations

import os
import time

import pytest

from ogc_testlib import ROOT, configured_host, json_report, run_playbook, sandbox_host, write_inventory

pytestmark = pytest.mark.integration

PLACEMENT = "1.26"
RC = "CUSTOM_PCI_10DE_1DB4"
OTU = "HW_PCI_ONE_TIME_USE"
RESETTABLE, NO_RESET = "0000:27:00.0", "0000:44:00.0"


def placement_call(admin, method, path, body=None, ok=(200, 204)):
    """One request to the test cloud's Placement API; its JSON answer (None for 204), or an AssertionError."""
    kwargs = {"json": body} if body is not None else {}
    response = getattr(admin.placement, method)(path, microversion=PLACEMENT, raise_exc=False, **kwargs)
    assert response.status_code in ok, (method, path, response.status_code, response.text)
    return response.json() if response.status_code != 204 else None


def write_with_generation(admin, path, change):
    """Read path, write change(answer) with the generation read; Nova's periodic update may bump it meanwhile (409):
    read again, a few times."""
    for _attempt in range(5):
        current = placement_call(admin, "get", path)
        response = admin.placement.put(path, json=change(current), microversion=PLACEMENT, raise_exc=False)
        if response.status_code != 409:
            assert response.status_code == 200, response.text
            return
        time.sleep(1)
    raise AssertionError(f"{path}: the generation kept changing (409)")


def traits(admin, uuid):
    return sorted(placement_call(admin, "get", f"/resource_providers/{uuid}/traits")["traits"])


def set_traits(admin, uuid, wanted):
    write_with_generation(admin, f"/resource_providers/{uuid}/traits", lambda current: {
        "traits": sorted(wanted), "resource_provider_generation": current["resource_provider_generation"]})


def set_reserved(admin, uuid, reserved):
    """As an operator does (osc-placement's `inventory set --amend`)."""
    write_with_generation(admin, f"/resource_providers/{uuid}/inventories/{RC}",
                          lambda current: dict(current, reserved=reserved))


def reserved(admin, uuid):
    return placement_call(admin, "get", f"/resource_providers/{uuid}/inventories/{RC}")["reserved"]


def put_trait_back(admin, uuid, original):
    """Give the provider the one-time-use trait again when Nova's periodic update took it (True when it had)."""
    if OTU in traits(admin, uuid):
        return False
    set_traits(admin, uuid, set(original) | {OTU})
    return True


@pytest.fixture
def used_devices(compute_cloud):
    """Both V100 providers of ogc-gpu-1 as one-time-use devices used and left (trait added, reserved 1); their
    traits and reservation restored afterwards. Yields (admin connection, {address: provider uuid}, original traits)."""
    admin = compute_cloud.connect()
    providers = placement_call(admin, "get", "/resource_providers")["resource_providers"]
    devices = {p["name"].split("_", 1)[1].lower(): p["uuid"] for p in providers if p["name"].startswith("ogc-gpu-1_")}
    assert sorted(devices) == [RESETTABLE, NO_RESET]
    for address, uuid in devices.items():
        # A server another test deleted just before may still hold its device in Placement for a moment (Nova
        # removes the allocation after the server is gone from the API): a bounded wait.
        deadline = time.time() + 120
        while True:
            usages = placement_call(admin, "get", f"/resource_providers/{uuid}/usages")["usages"]
            if usages.get(RC, 0) == 0 or time.time() > deadline:
                break
            time.sleep(2)
        assert usages.get(RC, 0) == 0, f"{address} is in use: another test left a server on it"
        assert reserved(admin, uuid) == 0
    original = {uuid: traits(admin, uuid) for uuid in devices.values()}
    assert all(OTU not in t for t in original.values())
    try:
        for uuid in devices.values():
            set_traits(admin, uuid, set(original[uuid]) | {OTU})
            set_reserved(admin, uuid, 1)
        yield admin, devices, original
    finally:
        for uuid in devices.values():
            set_reserved(admin, uuid, 0)
            set_traits(admin, uuid, original[uuid])
        assert all(traits(admin, uuid) == original[uuid] and reserved(admin, uuid) == 0 for uuid in devices.values())


def gpu_host(tmp_path, compute_cloud):
    """The sandbox host gpu-seed (hypervisor ogc-gpu-1), its plan file and the inventory; returns (inventory, root)."""
    root, plans = tmp_path / "gpu-seed", tmp_path / "plans"

    def no_reset(fixture):
        for dev in fixture["devices"]:
            if dev["address"] == NO_RESET:
                dev.pop("reset_method")  # the kernel has no usable reset for it: no reset_method, no reset

    plan = configured_host(root, plans, "gpu-seed", edit=no_reset)
    assert {s["address"]: s["resettable"] for s in plan["selected"]}.items() >= {RESETTABLE: True,
                                                                                 NO_RESET: False}.items()
    # The sandbox is this machine's own directory: the play's become (root on a real host) is not needed.
    host = sandbox_host(root, plans, passthrough_policy={}, nova_hypervisor_hostname="ogc-gpu-1", ansible_become=False)
    path = write_inventory(tmp_path / "inventory.yml", {"gpu-seed": host},
                           {"cloud_name": "ogc-test", "cloud_clouds_yaml": compute_cloud.clouds_yaml})
    return path, root


def run(compute_cloud, inventory, *args):
    """ansible-playbook playbooks/return_gpus.yml: (rc, {task name: localhost result}, per-host stats, stdout)."""
    proc = run_playbook("-i", inventory, os.path.join(ROOT, "playbooks", "return_gpus.yml"), *args,
                        env=compute_cloud.env())
    out = json_report(proc.stdout)
    if out is None:
        pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    results = {task["task"]["name"]: task["hosts"]["localhost"] for play in out["plays"] for task in play["tasks"]
               if "localhost" in task["hosts"]}
    return proc.returncode, results, out["stats"], proc.stdout


def run_seen(compute_cloud, used, inventory, waiting, *args):
    """run(), once more when Nova's periodic update took a trait back before the run saw every device of `waiting`
    as waiting, or while it returned one (see the module docstring); returns run()'s answer and the summary."""
    admin, devices, original = used
    for attempt in (1, 2):
        for address in waiting:
            put_trait_back(admin, devices[address], original[devices[address]])
        rc, results, stats, out = run(compute_cloud, inventory, *args)
        summary = (results.get("Summarise the run") or {}).get("ansible_facts", {}).get("return_gpus_summary") or {}
        seen = sorted(summary.get("waiting", {}).get("gpu-seed", []))
        if attempt == 1 and (seen != sorted(waiting) or rc != 0) and any(
                OTU not in traits(admin, devices[a]) for a in waiting):
            continue
        return rc, results, stats, out, summary
    raise AssertionError("unreachable")


def reset_size(root, address):
    """Bytes written to the sandbox device's reset (mode 0200, as the kernel's)."""
    return os.stat(root / "sys" / "bus" / "pci" / "devices" / address / "reset").st_size


def test_return_gpus(compute_cloud, used_devices, tmp_path):
    admin, devices = used_devices[0], used_devices[1]
    inventory, root = gpu_host(tmp_path, compute_cloud)
    no_reset_words = (f"gpu-seed: GPU {NO_RESET} has no usable reset (the plan: no reset_method or reset in sysfs; "
                      "no FLR, not alone on its bus)")
    by_hand = f"`openstack resource provider inventory set {devices[NO_RESET]} --amend --resource {RC}:reserved=0`"

    # Check mode: both seen waiting, 0000:27:00.0 would be reset and returned, 0000:44:00.0 is skipped with what to
    # do; nothing is written, on the host or in Placement.
    rc, results, stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [RESETTABLE, NO_RESET],
                                                "--check", "--diff")
    assert rc == 0, out[-4000:]
    assert [d["address"] for d in summary["returned"]] == [RESETTABLE] and summary["returned"][0]["reset"] is True
    assert summary["returned"][0]["hypervisor"] == "ogc-gpu-1" and summary["returned"][0]["host"] == "gpu-seed"
    [skipped] = summary["skipped"]
    assert skipped["address"] == NO_RESET and skipped["kind"] == "no_reset"
    assert skipped["reason"].startswith(no_reset_words) and by_hand in skipped["reason"]
    assert summary["lines"][0] == ("2 one-time-use GPU(s) waiting to be returned: 1 would return, 1 skipped (check "
                                   "mode: nothing was written)")
    assert results["Set reserved back to 0 in Placement"]["diff"] == {
        "before": {f"ogc-gpu-1_{RESETTABLE.upper()}": {"reserved": 1}},
        "after": {f"ogc-gpu-1_{RESETTABLE.upper()}": {"reserved": 0}}}
    assert reset_size(root, RESETTABLE) == 0
    assert {a: reserved(admin, uuid) for a, uuid in devices.items()} == {RESETTABLE: 1, NO_RESET: 1}

    # The real run: 1 written to the device's reset, then reserved 0 in Placement; 0000:44:00.0 still waits.
    rc, results, stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [RESETTABLE, NO_RESET])
    assert rc == 0, out[-4000:]
    assert [d["address"] for d in summary["returned"]] == [RESETTABLE] and summary["errors"] == []
    assert [s["address"] for s in summary["skipped"]] == [NO_RESET]
    assert summary["lines"][1] == (f"gpu-seed: GPU {RESETTABLE} (hypervisor ogc-gpu-1, provider "
                                   f"{devices[RESETTABLE]}): returned to Nova, reset first: reserved 1 -> 0")
    assert stats["gpu-seed"]["changed"] == 1 and stats["localhost"]["changed"] == 1
    reset_file = os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / RESETTABLE / "reset")
    os.chmod(reset_file, 0o600)
    with open(reset_file, encoding="utf-8") as handle:
        assert handle.read() == "1"
    assert {a: reserved(admin, uuid) for a, uuid in devices.items()} == {RESETTABLE: 0, NO_RESET: 1}
    assert OTU in traits(admin, devices[RESETTABLE])  # returned, still a one-time-use device

    # Again: the returned device no longer waits, nothing is reset or written; the other is skipped as before.
    os.truncate(reset_file, 0)
    rc, results, stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [NO_RESET])
    assert rc == 0, out[-4000:]
    assert summary["returned"] == [] and [s["reason"] for s in summary["skipped"]] == [skipped["reason"]]
    assert all(s["changed"] == 0 for s in stats.values()), stats
    assert results["Set reserved back to 0 in Placement"].get("skipped") is True
    assert reset_size(root, RESETTABLE) == 0
    assert {a: reserved(admin, uuid) for a, uuid in devices.items()} == {RESETTABLE: 0, NO_RESET: 1}

    # The operator's explicit choice (after a reboot of the host): return it without a reset.
    rc, results, stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [NO_RESET],
                                                "-e", "return_gpus_without_reset=true")
    assert rc == 0, out[-4000:]
    assert [(d["address"], d["reset"]) for d in summary["returned"]] == [(NO_RESET, False)]
    assert "WITHOUT a reset (return_gpus_without_reset): reserved 1 -> 0" in summary["lines"][1]
    assert {a: reserved(admin, uuid) for a, uuid in devices.items()} == {RESETTABLE: 0, NO_RESET: 0}

    # Nothing waits any more.
    rc, results, stats, out, summary = run_seen(compute_cloud, used_devices, inventory, [])
    assert rc == 0, out[-4000:]
    assert summary["nothing_waiting"] is True and summary["lines"] == [
        "Nothing waits to be returned: no one-time-use GPU is in state waiting_return"]
    assert all(s["changed"] == 0 for s in stats.values()), stats
