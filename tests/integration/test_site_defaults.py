"""The top-level group_vars/: site-wide defaults every inventory inherits, the inventory's own values winning.

Layout under test (ansible.cfg): vars_plugins/ogc_site_defaults.py loads group_vars/ at the inventory stage
before host_group_vars, and host_group_vars is kept to the inventory stage so that the same directory,
which sits beside site.yml, is not loaded a second time as playbook group_vars (which outrank inventory
group_vars/all).
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from ogc_testlib import ROOT

pytestmark = pytest.mark.integration

SHOW = "- {name: Show, hosts: all, gather_facts: false, tasks: [{name: Values, ansible.builtin.debug: {msg: \"VALUES {{ cloud_name }}|{{ kolla_deploy_config_dir }}|{{ cloud_clouds_yaml }}\"}}]}\n"


def site_defaults():
    with open(os.path.join(ROOT, "group_vars", "all", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def run(tmp_path, playbook, override_in=None):
    """A site.yml-like layout in tmp_path: a top playbook with group_vars/ beside it (a link to the
    project's), importing a playbook from playbooks/. The inventory sets cloud_name where asked."""
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": {
        "h1": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}))
    if override_in:
        (inv / "group_vars" / f"{override_in}.yml").write_text("---\ncloud_name: env-cloud\n")
    (tmp_path / "group_vars").symlink_to(os.path.join(ROOT, "group_vars"))
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "show.yml").write_text("---\n" + SHOW)
    (tmp_path / "site.yml").write_text("---\n- name: Imported\n  ansible.builtin.import_playbook: playbooks/show.yml\n" + SHOW)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.yml"), str(tmp_path / playbook)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("VALUES ", 1)[1].strip().strip('"') for line in proc.stdout.splitlines() if "VALUES " in line]


def test_every_play_gets_the_site_defaults(tmp_path):
    defaults = site_defaults()
    want = f"{defaults['cloud_name']}|{defaults['kolla_deploy_config_dir']}|{defaults['kolla_deploy_config_dir']}/clouds.yaml"
    # The imported play (playbooks/) and the top play (beside group_vars/) see the same defaults.
    assert run(tmp_path, "site.yml") == [want, want]


@pytest.mark.parametrize("group", ["all", "gpu_hosts"])
def test_the_inventory_wins_over_the_site_defaults(tmp_path, group):
    defaults = site_defaults()
    assert defaults["cloud_name"] != "env-cloud"
    want = f"env-cloud|{defaults['kolla_deploy_config_dir']}|{defaults['kolla_deploy_config_dir']}/clouds.yaml"
    assert run(tmp_path, "site.yml", override_in=group) == [want, want]
