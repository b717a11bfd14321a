"""The real test cloud (Keystone, Nova API, Glance API from scripts/testcloud.sh), once per session.

Start-up installs the services' venv on a fresh clone (scripts/openstack-venv.sh, ~2 min), then takes
~30-50 s (SQLite schemas). Every server stops by itself after 30 minutes even if the session dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TESTCLOUD = os.path.join(ROOT, "scripts", "testcloud.sh")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


class TestCloud:
    """Handle on the running test cloud: its clouds.yaml, an SDK connection, playbook runs."""

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

    def connect(self):
        import openstack  # pylint: disable=import-outside-toplevel

        config = openstack.config.OpenStackConfig(config_files=[self.clouds_yaml], load_envvars=False)
        return openstack.connection.Connection(config=config.get_one(cloud="ogc-test"))

    def env(self):
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), OS_CLIENT_CONFIG_FILE=self.clouds_yaml,
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
        env.pop("OS_CLOUD", None)
        return env

    def playbook(self, path, *args):
        """Run ansible-playbook; returns (rc, {task name: localhost result}, raw stdout)."""
        proc = subprocess.run([ANSIBLE_PLAYBOOK, path, *args], capture_output=True, text=True, check=False,
                              cwd=ROOT, env=self.env(), timeout=600)
        try:
            # The JSON document comes first; other callbacks (e.g. ogc_changes) may print after it.
            out, _end = json.JSONDecoder().raw_decode(proc.stdout.lstrip())
        except ValueError:
            pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        results = {}
        for play in out["plays"]:
            for task in play["tasks"]:
                res = task["hosts"].get("localhost")
                if res is not None:
                    results[task["task"]["name"]] = res
        return proc.returncode, results, proc.stdout

    def tasks(self, tmp_path, tasks, *args, name="play.yml"):
        """Run these tasks on localhost (local connection, this interpreter)."""
        play = [{"name": "integration", "hosts": "localhost", "gather_facts": False,
                 "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                 "tasks": tasks}]
        path = tmp_path / name
        path.write_text(json.dumps(play, indent=1))
        return self.playbook(str(path), "-i", "localhost,", *args)


@pytest.fixture(scope="session")
def testcloud(tmp_path_factory):
    cloud = TestCloud(tmp_path_factory.mktemp("testcloud"))
    cloud.script("start", "--lifetime", "1800")
    yield cloud
    cloud.script("stop")
    print(f"\ntest cloud timings (s): {cloud.timings}")
