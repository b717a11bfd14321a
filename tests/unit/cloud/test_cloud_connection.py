"""The OpenStack connection is declared once per play: module_defaults of the action group
group/open_gpu_cloud.toolkit.openstack (the collection's meta/runtime.yml) reach every os_* module of the collection,
through ansible-core's own resolution with the project's ansible.cfg."""

from __future__ import annotations

import json
import pathlib

import yaml

from ogc_testlib import ansible_env, run_playbook, write_inventory

ROOT = pathlib.Path(__file__).resolve().parents[3]
COLLECTION = ROOT / "collections" / "ansible_collections" / "open_gpu_cloud" / "toolkit"
RUNTIME = COLLECTION / "meta" / "runtime.yml"
CLOUDS = """\
clouds:
  elsewhere:
    auth: {auth_url: "http://127.0.0.1:9/v3", username: admin, password: not-used, project_name: admin,
           user_domain_name: Default, project_domain_name: Default}
"""


def test_the_group_lists_every_openstack_module_of_the_collection():
    group = yaml.safe_load(RUNTIME.read_text(encoding="utf-8"))["action_groups"]["openstack"]
    modules = sorted(path.stem for path in (COLLECTION / "plugins" / "modules").glob("os_*.py"))
    assert len(modules) >= 8
    assert group == modules


def test_the_play_declaration_reaches_the_modules(tmp_path):
    """One play declares cloud and clouds_yaml for the group; the modules' tasks name neither and still reach
    that cloud (its Keystone, which refuses: 127.0.0.1:9), read from that file."""
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(CLOUDS, encoding="utf-8")
    play = [{
        "name": "The connection declared once", "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/open_gpu_cloud.toolkit.openstack": {
            "cloud": "elsewhere", "clouds_yaml": str(clouds), "region_name": "{{ omit }}"}},
        "tasks": [
            {"name": "quotas", "open_gpu_cloud.toolkit.os_quotas": {"projects": []}, "register": "quotas",
             "ignore_errors": True},
            {"name": "drain", "open_gpu_cloud.toolkit.os_compute_drain": {"host": "gpu1"}, "register": "drain",
             "ignore_errors": True},
            {"name": "keep", "ansible.builtin.copy": {
                "content": "{{ [quotas.msg, drain.msg] | to_json }}", "dest": str(tmp_path / "msgs.json"),
                "mode": "0600"}},
        ]}]
    (tmp_path / "play.yml").write_text(json.dumps(play), encoding="utf-8")
    write_inventory(tmp_path / "inventory.json", {}, hosts={"localhost": {}})
    proc = run_playbook("-i", tmp_path / "inventory.json", tmp_path / "play.yml", cwd=tmp_path, timeout=300,
                        env=ansible_env(OS_CLIENT_CONFIG_FILE="", OS_CLOUD=None))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msgs = json.loads((tmp_path / "msgs.json").read_text(encoding="utf-8"))
    assert len(msgs) == 2
    for msg in msgs:
        assert msg.startswith("cannot reach the identity endpoint of cloud 'elsewhere'"), msg


CONNECTION_OPTIONS = {"cloud", "clouds_yaml", "auth", "auth_type", "region_name", "interface", "validate_certs",
                      "ca_cert", "connect_timeout", "read_timeout"}
# The rollout's drain names its own cloud: passthrough_rollout_drain_cloud empty is also what turns it off.
OWN_CLOUD = {"roles/passthrough_rollout/tasks/drain.yml", "roles/passthrough_rollout/tasks/enable.yml"}


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(item.get(key))


def _openstack_tasks():
    """(file, task) for every task of the roles and playbooks that runs an os_* module of the collection."""
    modules = {f"open_gpu_cloud.toolkit.{path.stem}" for path in (COLLECTION / "plugins" / "modules").glob("os_*.py")}
    for path in sorted(list(ROOT.glob("roles/*/tasks/*.yml")) + list(ROOT.glob("playbooks/*.yml"))):
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            names = modules & set(task)
            if names:
                yield str(path.relative_to(ROOT)), task, names.pop()


def test_no_task_declares_the_connection():
    found = list(_openstack_tasks())
    assert len(found) >= 6
    declaring = [(path, task["name"]) for path, task, module in found if path not in OWN_CLOUD and (
        CONNECTION_OPTIONS & set(task[module] or {}) or "OS_CLIENT_CONFIG_FILE" in str(task.get("environment", "")))]
    assert declaring == [], "the play declares the connection (module_defaults group/open_gpu_cloud.toolkit.openstack)"


def test_the_plays_that_reach_the_cloud_declare_it_once():
    """Each play of these playbooks that runs an OpenStack module (itself or through its roles) declares the
    connection for the group, from the environment's cloud_connection."""
    for name in ("cloud.yml", "lifetimes.yml", "images.yml", "health.yml", "return_gpus.yml"):
        plays = yaml.safe_load((ROOT / "playbooks" / name).read_text(encoding="utf-8"))
        reaching = [play for play in plays
                    if any(role.get("role") in ("open_gpu_cloud.toolkit.cloud_resources",
                                                "open_gpu_cloud.toolkit.server_lifetimes")
                           for role in play.get("roles", []))
                    or "os_" in json.dumps(play.get("tasks", [])) or "upload" in json.dumps(play.get("tasks", []))]
        assert reaching, name
        for play in reaching:
            assert play.get("module_defaults") == {"group/open_gpu_cloud.toolkit.openstack": "{{ cloud_connection }}"}, (name, play["name"])


def test_no_role_has_connection_variables_of_its_own():
    for role in ("cloud_resources", "server_lifetimes", "gpu_images"):
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
        declared = set(defaults) | set(specs["argument_specs"]["main"]["options"])
        own = sorted(f"{role}_{option}" for option in CONNECTION_OPTIONS if f"{role}_{option}" in declared)
        assert own == [], role
