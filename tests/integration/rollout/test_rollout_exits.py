"""Every way out of playbooks/host.yml's second play (the waves) gives back what the run took: a simulated GPU host
(a sandbox root) whose turn fails at each step - no reboot slot within the timeout, a cloud that accepts connections
and never answers the drain, a reboot command that fails or outlasts its timeout, a verification that fails after
the reboot - leaves no lock on the host, no slot and no lease on the coordination backend (the run's keeper revokes
it as the run ends), and a stop record where it held a slot. The refusals of the first play are the faults test's
(tests/integration/host/test_passthrough_host_faults.py, every host's lock given back); a coordination service that is
gone is tests/integration/coordination/test_control_hosts.py's."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
import yaml

from ogc_testlib import ROOT, load_source, output, run_playbook

pytestmark = pytest.mark.integration

fleet = load_source("fleet_inventory", os.path.join("tests", "helpers", "fleet", "fleet_inventory.py"))
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import identity as ident
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import slots
PLAYBOOK = os.path.join(ROOT, "tests", "helpers", "fleet", "plan_host.yml")
LOCK = "var/lib/open-gpu-cloud/passthrough_host.lock"


@pytest.fixture(scope="module")
def silent_endpoint():
    """A listener on 127.0.0.1 that accepts connections and never answers (a hung API endpoint)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def one_host(tmp_path, **host_vars):
    directory = str(tmp_path)
    inventory = fleet.build(1, directory, batch=1, hold=0)
    path = os.path.join(inventory, "host_vars", "gpu-001.yml")
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(host_vars, handle)
    return inventory


def run(inventory):
    proc = run_playbook(PLAYBOOK, "-i", inventory)
    return proc.returncode, output(proc)


def hung_cloud(tmp_path, endpoint):
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"hung": {"auth": {
        "auth_url": f"{endpoint}/v3", "username": "admin", "password": "x", "project_name": "admin",
        "user_domain_name": "Default", "project_domain_name": "Default"}}}}))
    return str(clouds)


REBOOT = ["{{ ansible_playbook_python }}", "{{ ogc_repo_dir }}/tests/standins/timed_command.py", "{{ fleet_reboot_log }}",
          "{{ inventory_hostname }}", "--"]

CASES = {
    "slot": ("no fleet-wide reboot slot free after 2 s", lambda t, e: {"passthrough_rollout_reboot_slot_timeout": 2}),
    "drain": ("cannot reach the identity endpoint of cloud 'hung'", lambda t, e: {
        "passthrough_rollout_drain_cloud": "hung", "passthrough_rollout_drain_clouds_yaml": hung_cloud(t, e),
        "passthrough_rollout_cloud_connect_timeout": 2, "passthrough_rollout_cloud_read_timeout": 2}),
    "reboot-fails": ("non-zero return code", lambda t, e: {"passthrough_host_reboot_command": REBOOT + ["false"]}),
    "reboot-hangs": ("Timed out after 3 second(s)", lambda t, e: {
        "passthrough_host_reboot_command": REBOOT + ["sleep", "60"], "passthrough_host_reboot_timeout": 3}),
    "verify": ("the IOMMU is still inactive after booting with", lambda t, e: {
        "demo_fixture": "intel-pre-iommu", "passthrough_host_reboot_command": REBOOT}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_failure_of_a_host_s_turn_gives_back_what_the_run_took(tmp_path, silent_endpoint, case):
    expected, host_vars = CASES[case]
    inventory = one_host(tmp_path, **host_vars(tmp_path, silent_endpoint))
    coordination = be.FileBackend(str(tmp_path / "state" / "coordination"))
    if case == "slot":  # the only slot is another live run's, for the whole test
        holder = ident.identity(os.getpid())
        lease = be.lease_id_of(holder["run"])
        coordination.grant(lease, 600, holder)
        slots.acquire(coordination, "gpu-elsewhere", [], 1, holder, 0.0, lease)
    started = time.time()
    rc, out = run(inventory)
    assert rc != 0 and expected in out, out[-5000:]
    assert "The rollout stops here" in out and time.time() - started < 300
    root = tmp_path / "state" / "hosts" / "gpu-001"
    assert not (root / LOCK).exists(), case
    view = coordination.read()
    mine = [r for r in view.slots.values() if r["host"] == "gpu-001"]
    assert mine == []
    if case == "slot":
        assert view.stop is None                        # it held no slot: it stops no other run
        # The advice: wait for the holders (here: its run ends), then run again.
        coordination.revoke(lease)
        rc, out = run(inventory)
        assert rc == 0 and "gpu-001: ready; " in out, out[-5000:]
    else:
        assert view.stop["host"] == "gpu-001" and expected[:30] in view.stop["reason"]
    # The run's lease: revoked by its keeper as the run ended (at once, not after its TTL).
    deadline = time.time() + 10
    while time.time() < deadline and [n for n in os.listdir(coordination.path) if n.startswith("lease-")]:
        time.sleep(0.2)
    assert [n for n in os.listdir(coordination.path) if n.startswith("lease-")] == []
