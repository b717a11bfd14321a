"""The example inventories load, pass a syntax check of site.yml, mark what must change, keep secrets
out of plain text, and ask only for GPU aliases the planner gives the hosts they describe."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ogc_testlib import ROOT, ansible_env, run_playbook, write_inventory

pytestmark = pytest.mark.integration

# Which fixture host each example GPU host stands for.
EXAMPLES = {
    "example-aio": {"gpu01": "seed-v100"},
    "example-multinode": {"gpu-v100-01": "seed-v100", "gpu-a100-01": "a100-t4", "gpu-rtx-01": "consumer-rtx"},
}


def ansible_inventory(*args):
    return subprocess.run(["ansible-inventory", *args], capture_output=True, text=True, env=ansible_env(), cwd=ROOT,
                          timeout=300, check=False)


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_inventory_loads_and_site_passes_syntax_check(name):
    inv = os.path.join(ROOT, "inventory", name)
    proc = ansible_inventory("-i", inv, "--list")
    assert proc.returncode == 0, proc.stderr
    groups = json.loads(proc.stdout)
    assert set(EXAMPLES[name]) == set(groups["gpu_hosts"]["hosts"])
    proc = run_playbook("-i", inv, "site.yml", "--syntax-check", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_settings_to_change_are_marked_and_secrets_are_vaulted(name):
    inv = os.path.join(ROOT, "inventory", name)
    kolla = open(os.path.join(inv, "group_vars", "all", "kolla.yml"), encoding="utf-8").read()
    for key in ("kolla_deploy_network_interface", "kolla_deploy_internal_vip_address",
                "kolla_deploy_neutron_external_interface"):
        line = next(line for line in kolla.splitlines() if line.startswith(key))
        assert "CHANGE ME" in line, line
    assert not os.path.exists(os.path.join(inv, "group_vars", "all", "vault.yml")), "never commit a plain vault"
    example = load(os.path.join(inv, "group_vars", "all", "vault.yml.example"))
    passthrough = open(os.path.join(inv, "group_vars", "gpu_hosts", "passthrough.yml"), encoding="utf-8").read()
    site = open(os.path.join(ROOT, "group_vars", "all", "main.yml"), encoding="utf-8").read()
    for secret, value in example.items():
        assert secret in site  # the site defaults reference the vault
        assert str(value) not in passthrough  # never written in clear in the inventory
    assert "passthrough_host_allow_reboot: false" in passthrough


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def planned_and_rendered(request, fixture_host, tmp_path_factory):
    """playbooks/plan.yml then playbooks/nova.yml on the example inventory itself, its GPU hosts simulated
    (one fixture tree per model, IOMMU on) through a second inventory that only says where each host's
    trees are and where to write: the example's own host_vars and group_vars (per-host passthrough_policy
    included) reach the roles through Ansible's variable precedence."""
    name = request.param
    work = tmp_path_factory.mktemp(name)
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
             "ansible_become": False}
    hosts = {}
    for host, fixture in EXAMPLES[name].items():
        root = fixture_host(fixture, iommu=True)
        hosts[host] = dict(local, passthrough_sysfs_root=os.path.join(root, "sys"),
                           passthrough_procfs_root=os.path.join(root, "proc"), passthrough_plan_dir=str(work / "plans"))
    hosts["localhost"] = dict(local, nova_pci_config_node_custom_config=str(work / "config"))
    # Host variables, over what the example's group_vars say (the connection included): no group, no variables of all.
    overlay = write_inventory(work / "simulated.yml", {}, hosts=hosts, local=False)
    inv = os.path.join(ROOT, "inventory", name)
    runs = {}
    for playbook in ("plan.yml", "nova.yml"):
        proc = run_playbook("-i", inv, "-i", overlay, os.path.join("playbooks", playbook), timeout=300)
        runs[playbook] = proc
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    plans = {host: load(work / "plans" / f"{host}.json")["plan"] for host in EXAMPLES[name]}
    return name, work, plans, runs


def _conf_values(path, key):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line.split("=", 1)[1]) for line in handle if line.startswith(key + " =")]


def test_example_hosts_planned_and_rendered_through_ansible(planned_and_rendered):
    name, work, plans, _runs = planned_and_rendered
    for host, plan in plans.items():
        assert plan["host"] == host and plan["selected"], (host, plan["notes"])
        # Each host's device_spec is exactly its plan's selection, by address.
        specs = _conf_values(work / "config" / "nova" / host / "nova.conf", "device_spec")
        assert sorted(s["address"] for s in specs) == sorted(d["address"] for d in plan["selected"]), host
    aliases = {a["name"] for a in _conf_values(work / "config" / "nova.conf", "alias")}
    assert aliases == {a["name"] for p in plans.values() for a in p["aliases"]}
    if name == "example-multinode":
        assert {h: sorted({d["alias"] for d in p["selected"]}) for h, p in plans.items()} == {
            "gpu-v100-01": ["tesla-v100"], "gpu-a100-01": ["a100", "t4"], "gpu-rtx-01": ["rtx-2080-ti"]}
        types = {d["alias"]: d["device_type"] for p in plans.values() for d in p["selected"]}
        assert types["a100"] == "type-PF" and types["t4"] == "type-PCI"


def test_flavors_ask_only_for_aliases_the_hosts_provide(planned_and_rendered):
    name, work, _plans, _runs = planned_and_rendered
    rendered = {a["name"] for a in _conf_values(work / "config" / "nova.conf", "alias")}
    flavors = load(os.path.join(ROOT, "inventory", name, "group_vars", "all", "cloud.yml"))["cloud_flavors"]
    asked = {spec.split(":")[0] for f in flavors for key, spec in f.get("extra_specs", {}).items()
             if key == "pci_passthrough:alias"}
    assert asked and asked <= rendered, (asked, rendered)
