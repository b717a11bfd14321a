"""The drain before a GPU host's reboot against the real Nova API (the test cloud with its fake nova-compute on
host ogc-gpu-1): os_compute_drain alone, and playbooks/host.yml on a simulated GPU host that Nova knows as
ogc-gpu-1 (passthrough_rollout_nova_host), drained through passthrough_rollout_drain_cloud."""

from __future__ import annotations

import json
import os
import time

import openstack
import pytest
import yaml

from ogc_testlib import (ROOT, ansible_env, compute_service, enable_compute_service, load_source, start_playbook,
                         wait_status)

pytestmark = pytest.mark.integration

HOST = "ogc-gpu-1"
fleet = load_source("fleet_inventory", os.path.join("tests", "helpers", "fleet", "fleet_inventory.py"))
PLAYBOOK = os.path.join(ROOT, "tests", "helpers", "fleet", "plan_host.yml")


def wait_for(what, predicate, timeout=180):
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value or time.time() > deadline:
            return value
        time.sleep(1)


def service(conn):
    return compute_service(conn, HOST)


@pytest.fixture(scope="module")
def nova(compute_cloud):
    """Admin connection, a tiny image and flavor, an empty and enabled ogc-gpu-1, and a clouds.yaml whose
    cloud ogc-nonova authenticates with the real Keystone but finds no Nova (a closed port)."""
    admin = compute_cloud.connect()
    image = admin.image.find_image("it-tiny") or admin.image.create_image(
        name="it-tiny", disk_format="raw", container_format="bare", data=b"\0" * 65536, visibility="public")
    flavor = admin.compute.find_flavor("it_plain") or admin.compute.create_flavor(name="it_plain", vcpus=1, ram=512,
                                                                                   disk=1)
    with open(compute_cloud.clouds_yaml, encoding="utf-8") as handle:
        clouds = yaml.safe_load(handle)
    clouds["clouds"]["ogc-nonova"] = dict(clouds["clouds"]["ogc-test"], compute_endpoint_override="http://127.0.0.1:9/v2.1")
    with open(compute_cloud.clouds_yaml, "w", encoding="utf-8") as handle:
        yaml.safe_dump(clouds, handle)
    return {"admin": admin, "image": image, "flavor": flavor}


@pytest.fixture
def empty_host(nova):
    """ogc-gpu-1 enabled and with no server (other tests' servers deleted), before each test."""
    admin = nova["admin"]
    enable_compute_service(admin, HOST)

    def emptied():
        # Delete whatever is on the host (again on each look: a server busy with a task refuses at first).
        left = list(admin.compute.servers(all_projects=True, compute_host=HOST))
        for server in left:
            try:
                admin.compute.delete_server(server.id)
            except openstack.exceptions.ConflictException:  # 409 while a task runs: the next look deletes it
                pass
        return not left

    assert wait_for("empty", emptied, timeout=300), "ogc-gpu-1 still has servers"
    return nova


def boot(nova, name, metadata=None):
    admin = nova["admin"]
    server = admin.compute.create_server(name=name, flavor_id=nova["flavor"].id, image_id=nova["image"].id,
                                         networks="none", metadata=metadata or {})
    server = wait_status(admin, server.id, ("ACTIVE", "ERROR"), timeout=120)
    assert server.status == "ACTIVE", (name, server.status, server.fault)
    return server


def test_unreachable_nova_fails_before_anything_is_disabled(compute_cloud, empty_host, tmp_path):
    rc, results, raw = compute_cloud.tasks_in_order(tmp_path, [
        {"name": "drain", "open_gpu_cloud.toolkit.os_compute_drain": {"cloud": "ogc-nonova", "host": HOST}, "ignore_errors": True}])
    assert rc == 0, raw
    assert results[0]["failed"] is True and results[0]["changed"] is False
    assert results[0]["msg"].startswith("cannot list the compute services of ogc-gpu-1: Nova's API cannot be "
                                        "reached ("), results[0]["msg"]
    assert "nothing was disabled" in results[0]["msg"]
    assert service(empty_host["admin"]).status == "enabled"


def test_shelve_mode_shelves_and_the_exempt_one_blocks(compute_cloud, empty_host, tmp_path):
    admin = empty_host["admin"]
    job = boot(empty_host, "drain-job")
    keep = boot(empty_host, "drain-keep", {"ogc:exempt": "true"})
    module = {"cloud": "ogc-test", "host": HOST, "mode": "shelve", "timeout": 20,
              "reason": "open-gpu-cloud: reboot for PCI passthrough (test)"}
    rc, results, raw = compute_cloud.tasks_in_order(tmp_path, [
        {"name": "check", "open_gpu_cloud.toolkit.os_compute_drain": module, "check_mode": True},
        {"name": "drain", "open_gpu_cloud.toolkit.os_compute_drain": module, "ignore_errors": True},
        {"name": "enable", "open_gpu_cloud.toolkit.os_compute_drain": {"cloud": "ogc-test", "host": HOST, "state": "enabled"}},
    ])
    assert rc == 0, raw
    check, drain, enable = results
    # Check mode: lists what runs and what it would shelve; changes nothing (verified by the real run's shelving).
    assert check["changed"] is True and check["outcome"] == "would_drain"
    assert sorted(s["name"] for s in check["blocking"]) == ["drain-job", "drain-keep"]
    assert [s["name"] for s in check["would_shelve"]] == ["drain-job"]
    assert [(s["name"], s["reason"]) for s in check["exempt"]] == [("drain-keep", "metadata ogc:exempt=true")]
    # The real run shelves the job, the exempt one keeps the host busy until the timeout.
    assert drain["failed"] is True
    assert f"ogc-gpu-1: still running on it after 20 s: drain-keep ({keep.id}, ACTIVE)" in drain["msg"]
    assert "is exempt from shelving by metadata" in drain["msg"]
    assert "Already done in this run: updated drain-job (shelved), disabled ogc-gpu-1" in drain["msg"]
    assert admin.compute.get_server(job.id).status in ("SHELVED", "SHELVED_OFFLOADED")
    assert admin.compute.get_server(keep.id).status == "ACTIVE"
    # The service was disabled with the reason; the enabling run (ours) enables it.
    assert enable["changed"] is True and enable["service"]["status"] == "enabled"
    assert service(admin).status == "enabled"


def inventory(tmp_path, compute_cloud, **host_vars):
    """One simulated GPU host, gpu-001 (intel-pre-iommu: needs a reboot), known to Nova as ogc-gpu-1."""
    inv = fleet.build(1, str(tmp_path), batch=1, hold=0, fixtures=["intel-pre-iommu"])
    os.makedirs(os.path.join(inv, "host_vars"))
    # host_vars: above the group_vars the inventory writer sets (the reboot command among them).
    with open(os.path.join(inv, "host_vars", "gpu-001.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(dict({"passthrough_rollout_drain_cloud": "ogc-test",
                             "passthrough_rollout_drain_clouds_yaml": compute_cloud.clouds_yaml,
                             "passthrough_rollout_nova_host": HOST, "passthrough_rollout_drain_timeout": 300},
                            **host_vars), handle)
    return inv


def start(inv):
    return start_playbook(PLAYBOOK, "-i", inv, env=ansible_env(OS_CLOUD=None))


def reboot_log(tmp_path):
    path = tmp_path / "state" / "reboots.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_running_server_blocks_the_reboot_until_it_is_gone(compute_cloud, empty_host, tmp_path):
    admin = empty_host["admin"]
    job = boot(empty_host, "gpu-job")
    proc = start(inventory(tmp_path, compute_cloud))
    try:
        disabled = wait_for("disabled", lambda: service(admin).status == "disabled", timeout=400)
        assert disabled, "the playbook never disabled ogc-gpu-1"
        assert service(admin).disabled_reason.startswith("open-gpu-cloud: reboot for PCI passthrough (")
        time.sleep(15)  # the drain is polling now: the server still runs, so nothing may reboot
        assert proc.poll() is None and reboot_log(tmp_path) == []
        assert admin.compute.get_server(job.id).status == "ACTIVE"
        gone_at = time.time()
        admin.compute.delete_server(job.id)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-5000:]
    (reboot,) = reboot_log(tmp_path)
    assert reboot["start"] > gone_at
    assert "gpu-001 (wave 1): disabled in Nova (ogc-gpu-1" in out and "running: gpu-job" in out
    # Verified: the service takes instances again.
    svc = service(admin)
    assert svc.status == "enabled" and not svc.disabled_reason


def test_failed_verification_leaves_the_service_disabled(compute_cloud, empty_host, tmp_path):
    admin = empty_host["admin"]
    # The "reboot" changes nothing, so the verification finds the old kernel command line and drivers.
    inv = inventory(tmp_path, compute_cloud, passthrough_host_reboot_command=[
        "{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/tests/standins/timed_command.py", "{{ fleet_reboot_log }}",
        "{{ inventory_hostname }}", "--"])
    proc = start(inv)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0
    assert [r["name"] for r in reboot_log(tmp_path)] == ["gpu-001"]
    assert "gpu-001 stays disabled in Nova (ogc-gpu-1, reason \"open-gpu-cloud: reboot for PCI passthrough (" in out
    svc = service(admin)
    assert svc.status == "disabled"
    assert svc.disabled_reason.startswith("open-gpu-cloud: reboot for PCI passthrough (")
