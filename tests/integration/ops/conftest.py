"""The test cloud WITH compute services (scripts/testcloud.sh start --with-compute), once per session.

RabbitMQ, Placement, nova-conductor, nova-scheduler and a fake nova-compute (two Tesla V100 on host
ogc-gpu-1) beside Keystone, Nova API and Glance. A fresh start takes ~1.5-3 min on 2 busy cores (SQLite
schemas, then ~50 s of services); every server stops by itself after 30 minutes even if the session dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ogc_testlib import ROOT

TESTCLOUD = os.path.join(ROOT, "scripts", "testcloud.sh")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


class ComputeCloud:
    """Handle on the running test cloud: clouds.yaml, SDK connections, playbook runs."""

    __test__ = False

    def __init__(self, state_dir):
        self.dir = str(state_dir)
        self.clouds_yaml = os.path.join(self.dir, "clouds.yaml")
        self.timings = {}

    def script(self, *args):
        started = time.time()
        proc = subprocess.run([TESTCLOUD, *args, "--dir", self.dir], capture_output=True, text=True, check=False,
                              cwd=ROOT, timeout=900)
        self.timings.setdefault(args[0], []).append(round(time.time() - started, 1))
        if proc.returncode:
            pytest.fail(f"scripts/testcloud.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def connect(self, project=None):
        import openstack  # pylint: disable=import-outside-toplevel

        config = openstack.config.OpenStackConfig(config_files=[self.clouds_yaml], load_envvars=False)
        kwargs = {"auth": {"project_name": project}} if project else {}
        return openstack.connection.Connection(config=config.get_one(cloud="ogc-test", **kwargs))

    def env(self):
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), OS_CLIENT_CONFIG_FILE=self.clouds_yaml,
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
        env.pop("OS_CLOUD", None)
        return env

    def tasks(self, tmp_path, tasks, *args, name="play.yml"):
        """Run these tasks on localhost; returns (rc, [task results in order], raw stdout)."""
        play = [{"name": "integration", "hosts": "localhost", "gather_facts": False,
                 "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                 "tasks": tasks}]
        path = tmp_path / name
        path.write_text(json.dumps(play, indent=1))
        proc = subprocess.run([ANSIBLE_PLAYBOOK, str(path), "-i", "localhost,", *args], capture_output=True, text=True,
                              check=False, cwd=ROOT, env=self.env(), timeout=600)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        results = [task["hosts"]["localhost"] for play_ in out["plays"] for task in play_["tasks"]
                   if "localhost" in task["hosts"]]
        return proc.returncode, results, proc.stdout


@pytest.fixture(scope="session")
def compute_cloud(tmp_path_factory):
    cloud = ComputeCloud(tmp_path_factory.mktemp("computecloud"))
    out = cloud.script("start", "--lifetime", "1800", "--with-compute")
    print(out)
    yield cloud
    cloud.script("stop")
    print(f"\ncompute test cloud timings (s): {cloud.timings}")
