"""The collection as an operator installs it: ansible-galaxy builds a tarball of
collections/ansible_collections/open_gpu_cloud/toolkit, installs it into an empty directory, and playbooks outside the
repository (no project ansible.cfg, no roles/ or filter_plugins/ of the checkout) run its modules, filters and roles by
full name: the module's shared code travels with it (AnsiballZ packs the collection's module_utils), the filters import
theirs plainly, the passthrough role plans a sandbox host and os_flavors, through the collection's OpenStack action
group, declares a flavor on the real test cloud."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from ogc_testlib import COLLECTION, recap, run_playbook

pytestmark = pytest.mark.integration

BIN = os.path.dirname(sys.executable)
# A plan record's GPU with a 64 GiB window (an A100 40GB's BAR1): QEMU's and OVMF's defaults cannot map it.
PLANS = {"gpu01": {"plan": {"selected": [{"address": "0000:41:00.0"}]},
                   "facts": {"devices": [{"address": "0000:41:00.0", "bars": [
                       {"index": 0, "size": 16 << 20, "is_64bit": False, "prefetchable": False},
                       {"index": 1, "size": 64 << 30, "is_64bit": True, "prefetchable": True},
                       {"index": 3, "size": 32 << 20, "is_64bit": True, "prefetchable": True}]}]}}}
PLAYBOOK = [{
    "name": "The installed collection, by full name",
    "hosts": "localhost",
    "gather_facts": False,
    "tasks": [
        {"name": "A filter over the collection's module_utils",
         "ansible.builtin.debug": {"msg": "PROPERTIES {{ plans | open_gpu_cloud.toolkit.ogc_image_address_space "
                                          "| to_json }}"},
         "vars": {"plans": PLANS}},
        {"name": "A declared image's problems",
         "ansible.builtin.debug": {"msg": "PROBLEMS {{ [{'name': 'x', 'elements': []}] "
                                          "| open_gpu_cloud.toolkit.ogc_image_problems('535', '') | to_json }}"}},
        {"name": "The module, its module_utils packed with it",
         "open_gpu_cloud.toolkit.gpu_image_check": {"name": "debian-12", "elements": ["debian-minimal", "vm"],
                                                    "elements_path": "/nonexistent", "dib_venv": "/nonexistent/dib"},
         "register": "check", "ignore_errors": True},
        {"name": "What the module said",
         "ansible.builtin.debug": {"msg": "MODULE {{ check.msg | default('') }}"}},
    ],
}]


def run(argv, cwd, env, timeout=300):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def playbook(cwd, env, *args):
    """ansible-playbook ARGS in the installed project's environment (ENV, the whole of it: nothing of the checkout's)."""
    proc = run_playbook(*args, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, f"ansible-playbook {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def marked(out, mark):
    line = next(line for line in out.splitlines() if f"{mark} " in line)
    return line.split(f"{mark} ", 1)[1].strip().strip('"').replace('\\"', '"')


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The built collection installed into an empty directory, and the environment of a project that has nothing
    of the checkout's configuration: an empty ansible.cfg, the installed collection alone on the path."""
    tmp_path = tmp_path_factory.mktemp("installed")
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    installed = tmp_path / "installed"
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(installed),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", COLLECTION, "--output-path", str(tmp_path)],
        tmp_path, env)
    tarball, = glob.glob(str(tmp_path / "open_gpu_cloud-toolkit-*.tar.gz"))
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", tarball, "-p", str(installed)],
        tmp_path, env)
    return installed / "ansible_collections" / "open_gpu_cloud" / "toolkit", env


def test_the_built_collection_installs_and_runs_outside_the_repository(tmp_path, installed):
    root, env = installed
    assert (root / "plugins" / "modules" / "gpu_image_check.py").is_file()
    assert (root / "roles" / "passthrough" / "meta" / "argument_specs.yml").is_file()
    assert not (root / "tests" / "output").exists()

    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    out = playbook(tmp_path, env, "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                   "play.yml")
    assert json.loads(marked(out, "PROPERTIES")) == {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": 41}
    problems = json.loads(marked(out, "PROBLEMS"))
    assert problems and all("image x" in problem for problem in problems)
    assert "no diskimage-builder venv at /nonexistent/dib" in marked(out, "MODULE")

    doc = json.loads(run([os.path.join(BIN, "ansible-doc"), "--json", "open_gpu_cloud.toolkit.gpu_image_check"],
                         tmp_path, env))
    assert doc["open_gpu_cloud.toolkit.gpu_image_check"]["doc"]["attributes"]["check_mode"]["support"] == "full"


def test_the_installed_roles_and_modules_run_against_a_sandbox_host_and_the_test_cloud(tmp_path, installed,
                                                                                      fixture_host, testcloud):
    _root, env = installed
    env = dict(env, OS_CLIENT_CONFIG_FILE=testcloud.clouds_yaml)
    env.pop("OS_CLOUD", None)
    seed = fixture_host("seed-v100")
    inventory = {"gpu_hosts": {"hosts": {"seed": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "passthrough_sysfs_root": f"{seed}/sys", "passthrough_procfs_root": f"{seed}/proc",
        "passthrough_plan_dir": str(tmp_path / "plans")}}}}
    plays = [
        {"name": "The passthrough role plans a sandbox host", "hosts": "gpu_hosts", "gather_facts": False,
         "roles": [{"role": "open_gpu_cloud.toolkit.passthrough"}]},
        {"name": "os_flavors declares a GPU flavor on the test cloud", "hosts": "localhost", "gather_facts": False,
         "module_defaults": {"group/open_gpu_cloud.toolkit.openstack": {"cloud": "ogc-test"}},
         "tasks": [{"name": "A flavor asking for the planned alias",
                    "open_gpu_cloud.toolkit.os_flavors": {
                        "flavors": [{"name": "it_installed_gpu", "vcpus": 2, "ram": 2048, "disk": 10,
                                     "extra_specs": {"pci_passthrough:alias": "tesla-v100:1"}}],
                        "known_aliases": ["tesla-v100"]}}]},
    ]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    command = ["-i", "inventory.yml", "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
               "play.yml"]
    out = playbook(tmp_path, env, *command)
    plan = json.loads((tmp_path / "plans" / "seed.json").read_text())["plan"]
    assert [gpu["address"] for gpu in plan["selected"]] == ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0",
                                                           "0000:c3:00.0"], out
    flavor = testcloud.connect().compute.find_flavor("it_installed_gpu")
    assert flavor is not None and flavor.extra_specs == {"pci_passthrough:alias": "tesla-v100:1"}, out
    # A second run finds both as declared.
    again = recap(playbook(tmp_path, env, *command))
    assert {host: counts["changed"] for host, counts in again.items()} == {"seed": 0, "localhost": 0}, again
