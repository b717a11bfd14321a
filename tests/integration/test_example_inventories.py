"""The example inventories load, pass a syntax check of site.yml, mark what must change, keep secrets
out of plain text, and ask only for GPU aliases the planner gives the hosts they describe."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ogc_testlib import ROOT

pytestmark = pytest.mark.integration

# Which fixture host each example GPU host stands for.
EXAMPLES = {
    "example-aio": {"gpu01": "seed-v100"},
    "example-multinode": {"gpu-v100-01": "seed-v100", "gpu-a100-01": "a100-t4", "gpu-rtx-01": "consumer-rtx"},
}


def ansible(*argv):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_inventory_loads_and_site_passes_syntax_check(name):
    inv = os.path.join(ROOT, "inventory", name)
    proc = ansible("ansible-inventory", "-i", inv, "--list")
    assert proc.returncode == 0, proc.stderr
    groups = json.loads(proc.stdout)
    assert set(EXAMPLES[name]) == set(groups["gpu_hosts"]["hosts"])
    proc = ansible("ansible-playbook", "-i", inv, "site.yml", "--syntax-check")
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


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_flavors_ask_only_for_aliases_the_hosts_provide(name, host_facts, planner):
    inv = os.path.join(ROOT, "inventory", name)
    aliases = set()
    for host, fixture in EXAMPLES[name].items():
        policy = {}
        host_vars = os.path.join(inv, "host_vars", f"{host}.yml")
        if os.path.exists(host_vars):
            policy = (load(host_vars) or {}).get("passthrough_policy", {})
        plan = planner.passthrough_plan(host_facts(fixture, iommu=True), policy, host)
        aliases |= {a["name"] for a in plan["aliases"]}
    flavors = load(os.path.join(inv, "group_vars", "all", "cloud.yml"))["cloud_flavors"]
    asked = {spec.split(":")[0] for f in flavors for key, spec in f.get("extra_specs", {}).items()
             if key == "pci_passthrough:alias"}
    assert asked and asked <= aliases, (asked, aliases)
