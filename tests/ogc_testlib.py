"""Helpers shared by the tests: the repo's paths, loading its modules and filters by file path, and the
handle on a running test cloud."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures", "hosts")
# The directory holding ansible_collections/ (the project's collection, open_gpu_cloud.toolkit): ansible.cfg's
# collections_path for ansible-playbook, pyproject.toml's pytest pythonpath for the tests.
COLLECTIONS = os.path.join(ROOT, "collections")
# The collection's own directory (galaxy.yml, plugins/, its ansible-test tests).
COLLECTION = os.path.join(COLLECTIONS, "ansible_collections", "open_gpu_cloud", "toolkit")
# The repository's scripts that import the collection (scripts/mock_sysfs.py, scripts/simulate_reboot.py) find it on
# PYTHONPATH, as the tests find it through pytest's pythonpath: the environment for running them, and the argv prefix
# for a command an inventory runs (a reboot's stand-in).
SCRIPT_ENV = dict(os.environ, PYTHONPATH=COLLECTIONS)
WITH_COLLECTION = ["env", f"PYTHONPATH={COLLECTIONS}"]
TESTCLOUD = os.path.join(ROOT, "scripts", "testcloud.sh")
# The PCI ID database from Debian's pci.ids package (hwdata links its /usr/share/hwdata/pci.ids here).
PCI_IDS = "/usr/share/misc/pci.ids"
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(out):
    """{host: {ok, changed, unreachable, failed}} from the PLAY RECAP of ansible-playbook's output."""
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)),
                         "failed": int(m.group(5))} for m in RECAP.finditer(out)}


def openstack_python() -> str:
    """The OpenStack services venv's Python (scripts/openstack-venv.sh builds the venv when it is missing or stale,
    or waits for the build under way)."""
    venv = subprocess.run([os.path.join(ROOT, "scripts", "openstack-venv.sh")], check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]
    return os.path.join(venv, "bin", "python")


def load_source(name: str, relpath: str):
    """Import a module from a file of the repo (scripts/, bench/). What it imports of the
    collection (``ansible_collections.open_gpu_cloud.toolkit``) loads plainly: pytest's pythonpath holds COLLECTIONS."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collection_plugin(kind: str, name: str):
    """The collection's plugin ``plugins/<kind>/<name>.py`` (kind: modules, action, filter), imported plainly."""
    return importlib.import_module(f"ansible_collections.open_gpu_cloud.toolkit.plugins.{kind}.{name}")


def collection_module(name: str):
    """The collection's module ``name`` (plugins/modules/<name>.py), for in-process tests."""
    return collection_plugin("modules", name)


class TestCloudHandle:
    """Handle on a running test cloud (scripts/testcloud.sh): its clouds.yaml, SDK connections, playbook runs.

    The integration conftests start one per session (tests/integration/cloud: Keystone, Nova API, Glance;
    tests/integration/ops: the same plus the compute services).
    """

    __test__ = False

    def __init__(self, state_dir):
        self.dir = str(state_dir)
        self.clouds_yaml = os.path.join(self.dir, "clouds.yaml")
        self.timings = {}

    def script(self, *args):
        """Run scripts/testcloud.sh ARGS --dir <state dir>; fails the test with its output on an error."""
        import pytest  # pylint: disable=import-outside-toplevel

        started = time.time()
        proc = subprocess.run([TESTCLOUD, *args, "--dir", self.dir], capture_output=True, text=True, check=False,
                              cwd=ROOT, timeout=900)
        self.timings.setdefault(args[0], []).append(round(time.time() - started, 1))
        if proc.returncode:
            pytest.fail(f"scripts/testcloud.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def connect(self, project=None):
        """An openstacksdk connection as admin (or scoped to `project`)."""
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

    def _run(self, path, *args):
        """Run ansible-playbook; returns (rc, [localhost task results in order], {name: result}, stdout)."""
        import pytest  # pylint: disable=import-outside-toplevel

        proc = subprocess.run([ANSIBLE_PLAYBOOK, path, *args], capture_output=True, text=True, check=False,
                              cwd=ROOT, env=self.env(), timeout=600)
        try:
            # The JSON document comes first; other callbacks (e.g. ogc_changes) may print after it.
            out, _end = json.JSONDecoder().raw_decode(proc.stdout.lstrip())
        except ValueError:
            pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        ordered, by_name = [], {}
        for play in out["plays"]:
            for task in play["tasks"]:
                res = task["hosts"].get("localhost")
                if res is not None:
                    ordered.append(res)
                    by_name[task["task"]["name"]] = res
        return proc.returncode, ordered, by_name, proc.stdout

    def playbook(self, path, *args):
        """Run ansible-playbook; returns (rc, {task name: localhost result}, raw stdout)."""
        rc, _ordered, by_name, stdout = self._run(path, *args)
        return rc, by_name, stdout

    def _write_play(self, tmp_path, tasks, name):
        play = [{"name": "integration", "hosts": "localhost", "gather_facts": False,
                 "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                 "tasks": tasks}]
        path = tmp_path / name
        path.write_text(json.dumps(play, indent=1))
        return str(path)

    def tasks(self, tmp_path, tasks, *args, name="play.yml"):
        """Run these tasks on localhost (local connection, this interpreter); results by task name."""
        rc, _ordered, by_name, stdout = self._run(self._write_play(tmp_path, tasks, name), "-i", "localhost,", *args)
        return rc, by_name, stdout

    def tasks_in_order(self, tmp_path, tasks, *args, name="play.yml"):
        """Like tasks(), with the results as a list in task order."""
        rc, ordered, _by_name, stdout = self._run(self._write_play(tmp_path, tasks, name), "-i", "localhost,", *args)
        return rc, ordered, stdout


def compute_service(conn, host):
    """The nova-compute service of HOST."""
    return next(s for s in conn.compute.services(host=host, binary="nova-compute"))


def enable_compute_service(conn, host):
    """HOST's nova-compute service enabled (a test that drains a host leaves it disabled)."""
    svc = compute_service(conn, host)
    if svc.status == "disabled":
        conn.compute.enable_service(svc, host, "nova-compute")


def wait_status(conn, server_id, wanted, timeout=180):
    """The server once its status is one of WANTED, or as it is after TIMEOUT seconds (one look a second)."""
    deadline = time.time() + timeout
    while True:
        server = conn.compute.get_server(server_id)
        if server.status in wanted or time.time() > deadline:
            return server
        time.sleep(1)


# ---- The processes of a test cloud, read from /proc (not from what the cloud recorded) ----

SUPERVISE = os.path.join(ROOT, "scripts", "testcloud", "supervise.py")


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def processes_of(directory, marker="OGC_TESTCLOUD_DIR"):
    """{pid: command line} of the live processes whose environment has MARKER=DIRECTORY or whose working
    directory is inside DIRECTORY (deleted or not)."""
    directory = os.path.realpath(directory)
    wanted = f"{marker}={directory}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat or stat.rsplit(b")", 1)[1].split()[0] == b"Z":
            continue  # gone, or a zombie: nothing runs
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            cwd = ""
        if wanted in _read(f"/proc/{entry}/environ").split(b"\0") or cwd == directory or \
                cwd.startswith(directory + os.sep):
            found[int(entry)] = _read(f"/proc/{entry}/cmdline").replace(b"\0", b" ").decode(errors="replace")
    return found


def supervisor_of(pid):
    """The supervise.py process PID runs under (itself when it is one), or None."""
    while pid > 1:
        if SUPERVISE.encode() in _read(f"/proc/{pid}/cmdline").split(b"\0"):
            return pid
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            return None
        pid = int(stat.rsplit(b")", 1)[1].split()[1])
    return None
