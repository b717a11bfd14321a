"""The top-level group_vars/: site-wide defaults every inventory inherits, the inventory's own values winning.

Layout under test (ansible.cfg): vars_plugins/ogc_site_defaults.py loads group_vars/ at the inventory stage
before host_group_vars, and host_group_vars is kept to the inventory stage so that the same directory,
which sits beside site.yml, is not loaded a second time as playbook group_vars (which outrank inventory
group_vars/all).
"""

from __future__ import annotations

import os

import pytest
import yaml

from ogc_testlib import ROOT, output, run_playbook, write_inventory

pytestmark = pytest.mark.integration

SHOW = "- {name: Show, hosts: all, gather_facts: false, tasks: [{name: Values, ansible.builtin.debug: {msg: \"VALUES {{ kolla_deploy_config_dir }}|{{ nova_pci_config_node_custom_config }}\"}}]}\n"


def site_defaults():
    with open(os.path.join(ROOT, "group_vars", "all", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def run(tmp_path, playbook, override_in=None):
    """A site.yml-like layout in tmp_path: a top playbook with group_vars/ beside it (a link to the
    project's), importing a playbook from playbooks/. The inventory sets kolla_deploy_config_dir where asked:
    in group_vars/<group>.yml, or in the inventory file's own vars of all ("inline")."""
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    if override_in and override_in != "inline":
        (inv / "group_vars" / f"{override_in}.yml").write_text("---\nkolla_deploy_config_dir: /srv/env-kolla\n")
    write_inventory(inv / "hosts.yml", {"h1": {}},
                    {"kolla_deploy_config_dir": "/srv/env-kolla"} if override_in == "inline" else {})
    (tmp_path / "group_vars").symlink_to(os.path.join(ROOT, "group_vars"))
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "show.yml").write_text("---\n" + SHOW)
    (tmp_path / "site.yml").write_text("---\n- name: Imported\n  ansible.builtin.import_playbook: playbooks/show.yml\n" + SHOW)
    proc = run_playbook("-i", inv / "hosts.yml", tmp_path / playbook, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, output(proc)
    return [line.split("VALUES ", 1)[1].strip().strip('"') for line in proc.stdout.splitlines() if "VALUES " in line]


def test_every_play_gets_the_site_defaults(tmp_path):
    defaults = site_defaults()
    want = f"{defaults['kolla_deploy_config_dir']}|{defaults['kolla_deploy_config_dir']}/config"
    # The imported play (playbooks/) and the top play (beside group_vars/) see the same defaults.
    assert run(tmp_path, "site.yml") == [want, want]


@pytest.mark.parametrize("group", ["all", "gpu_hosts", "inline"])
def test_the_inventory_wins_over_the_site_defaults(tmp_path, group):
    assert site_defaults()["kolla_deploy_config_dir"] != "/srv/env-kolla"
    # The site's nova_pci_config_node_custom_config follows the environment's kolla directory.
    want = "/srv/env-kolla|/srv/env-kolla/config"
    assert run(tmp_path, "site.yml", override_in=group) == [want, want]


@pytest.mark.parametrize("example", ["example-aio", "example-multinode"])
def test_the_example_inventories_take_the_site_plan_directory(tmp_path, example):
    """The plan directory is set once, in the site defaults (non-empty), and every GPU host of the examples gets it."""
    plan_dir = site_defaults()["passthrough_plan_dir"]
    assert plan_dir.startswith("/") and plan_dir.rstrip("/")
    show = tmp_path / "show.yml"
    show.write_text("- {name: Show, hosts: gpu_hosts, gather_facts: false, tasks: [{name: Plan directory, "
                    "ansible.builtin.debug: {msg: \"PLANDIR {{ inventory_hostname }}={{ passthrough_plan_dir }}\"}}]}\n")
    proc = run_playbook("-i", os.path.join(ROOT, "inventory", example), show, timeout=120)
    assert proc.returncode == 0, output(proc)
    shown = dict(line.split("PLANDIR ", 1)[1].strip().strip('"').split("=", 1)
                 for line in proc.stdout.splitlines() if "PLANDIR " in line)
    assert shown and set(shown.values()) == {plan_dir}, proc.stdout
