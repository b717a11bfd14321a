"""The OpenStack connection is declared once per play: module_defaults of the action group
group/ogc.cloud.openstack (collections/ansible_collections/ogc/cloud/meta/runtime.yml) reach every library/os_*
module, through ansible-core's own resolution with the project's ansible.cfg."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "collections" / "ansible_collections" / "ogc" / "cloud" / "meta" / "runtime.yml"
CLOUDS = """\
clouds:
  elsewhere:
    auth: {auth_url: "http://127.0.0.1:9/v3", username: admin, password: not-used, project_name: admin,
           user_domain_name: Default, project_domain_name: Default}
"""


def test_the_group_lists_every_openstack_module_of_the_library():
    group = yaml.safe_load(RUNTIME.read_text(encoding="utf-8"))["action_groups"]["openstack"]
    modules = sorted(f"ansible.legacy.{path.stem}" for path in (ROOT / "library").glob("os_*.py"))
    assert len(modules) >= 8
    assert group == modules


def test_the_play_declaration_reaches_the_modules(tmp_path):
    """One play declares cloud and clouds_yaml for the group; the modules' tasks name neither and still reach
    that cloud (its Keystone, which refuses: 127.0.0.1:9), read from that file."""
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(CLOUDS, encoding="utf-8")
    play = [{
        "name": "The connection declared once", "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/ogc.cloud.openstack": {"cloud": "elsewhere", "clouds_yaml": str(clouds),
                                                          "region_name": "{{ omit }}"}},
        "tasks": [
            {"name": "quotas", "os_quotas": {"projects": []}, "register": "quotas", "ignore_errors": True},
            {"name": "drain", "os_compute_drain": {"host": "gpu1"}, "register": "drain", "ignore_errors": True},
            {"name": "keep", "ansible.builtin.copy": {
                "content": "{{ [quotas.msg, drain.msg] | to_json }}", "dest": str(tmp_path / "msgs.json"),
                "mode": "0600"}},
        ]}]
    (tmp_path / "play.yml").write_text(json.dumps(play), encoding="utf-8")
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": sys.executable}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory), encoding="utf-8")
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", OS_CLIENT_CONFIG_FILE="",
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("OS_CLOUD", None)
    proc = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                           str(tmp_path / "play.yml")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msgs = json.loads((tmp_path / "msgs.json").read_text(encoding="utf-8"))
    assert len(msgs) == 2
    for msg in msgs:
        assert msg.startswith("cannot reach the identity endpoint of cloud 'elsewhere'"), msg
