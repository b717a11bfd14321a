"""Helpers shared by the tests: the repo's paths, loading its modules and filters, the one way every test runs
ansible-playbook (``run_playbook``, ``start_playbook``) and reads what it printed, the sandbox host's reboot stand-in,
and the handle on a running test cloud."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures", "hosts")
# The directory holding ansible_collections/ (the project's collection, open_gpu_cloud.toolkit): ansible.cfg's
# collections_path for ansible-playbook, pyproject.toml's pytest pythonpath for the tests.
COLLECTIONS = os.path.join(ROOT, "collections")
# The collection's own directory (galaxy.yml, plugins/, its ansible-test tests).
COLLECTION = os.path.join(COLLECTIONS, "ansible_collections", "open_gpu_cloud", "toolkit")
# The repository's scripts that import the collection (scripts/mock_sysfs.py, tests/standins/simulate_reboot.py) find it on
# PYTHONPATH, as the tests find it through pytest's pythonpath: the environment for running them, and the argv prefix
# for a command an inventory runs (a reboot's stand-in).
SCRIPT_ENV = dict(os.environ, PYTHONPATH=COLLECTIONS)
WITH_COLLECTION = ["env", f"PYTHONPATH={COLLECTIONS}"]
TESTCLOUD = os.path.join(ROOT, "scripts", "testcloud.sh")
# The PCI ID database from Debian's pci.ids package (hwdata links its /usr/share/hwdata/pci.ids here).
PCI_IDS = "/usr/share/misc/pci.ids"
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def ansible_env(base=None, **overrides):
    """The environment every test runs an Ansible command in: BASE (this process's environment by default) with the
    project's ansible.cfg, no colour, and the toolkit venv's programs first on PATH; then OVERRIDES (a value of None
    removes the variable)."""
    env = dict(os.environ if base is None else base)
    venv_bin, path = os.path.dirname(sys.executable), env.get("PATH", "")
    env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=path if path.split(os.pathsep)[0] == venv_bin else venv_bin + os.pathsep + path)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_playbook(*args, env=None, cwd=ROOT, timeout=600, prefix=(), merge=False, stdout=subprocess.PIPE):
    """``ansible-playbook ARGS`` (the toolkit venv's), run to its end: a subprocess.CompletedProcess with text output.

    env: the whole environment (``ansible_env()`` by default); cwd: where it runs (the checkout by default);
    prefix: argv run in front of it (``unshare ...``, a read-only mount); merge: stderr into stdout, in the order
    written (where a test reads a failure's message beside the task output); stdout: an open log file instead of
    the captured text (stderr goes there too). Past TIMEOUT seconds it is killed and subprocess.TimeoutExpired
    raised."""
    merge = merge or stdout is not subprocess.PIPE
    return subprocess.run([*prefix, ANSIBLE_PLAYBOOK, *map(str, args)], cwd=str(cwd),
                          env=ansible_env() if env is None else env, timeout=timeout, check=False, text=True,
                          stdout=stdout, stderr=subprocess.STDOUT if merge else subprocess.PIPE)


def start_playbook(*args, env=None, cwd=ROOT, prefix=(), stdout=subprocess.PIPE, own_group=False):
    """``ansible-playbook ARGS`` started in the background: the subprocess.Popen, stderr into STDOUT (a pipe, or an
    open log file); own_group: in a process group of its own (what a kill takes down whole)."""
    return subprocess.Popen([*prefix, ANSIBLE_PLAYBOOK, *map(str, args)],  # pylint: disable=consider-using-with
                            cwd=str(cwd), env=ansible_env() if env is None else env, stdout=stdout,
                            stderr=subprocess.STDOUT, text=True, start_new_session=own_group)


def output(proc):
    """What a run printed: stdout, then stderr (empty when it was merged into stdout)."""
    return proc.stdout + (proc.stderr or "")


def words(text):
    """TEXT with runs of whitespace folded to one space: the YAML callback wraps long messages."""
    return " ".join(text.split())


def json_report(stdout):
    """The document of the ansible.posix.json stdout callback in STDOUT: the first line that opens with ``{`` and
    what follows (ansible.cfg's aggregate callbacks may print around it); None when there is none."""
    start = re.search(r"^\{", stdout, re.M)
    if start is None:
        return None
    try:
        return json.JSONDecoder().raw_decode(stdout[start.start():])[0]
    except ValueError:
        return None


def reboot_standin(fixture, root):
    """The argv of a sandbox host's reboot (passthrough_host_reboot_command) in a test: tests/standins/simulate_reboot.py
    boots FIXTURE's hardware with the configuration under ROOT. It imports the checkout's collection, so it runs with
    that on PYTHONPATH. (Inventories say the same in their own terms: the demo's ``demo_reboot_standin``.)"""
    return [*WITH_COLLECTION, sys.executable, os.path.join(ROOT, "tests", "standins", "simulate_reboot.py"), str(fixture), str(root)]


# A host the tests run on this machine: the local connection, the interpreter that runs ansible-playbook.
LOCAL_HOST = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}


def write_inventory(path, gpu_hosts, all_vars=None, groups=None, hosts=None, local=True):
    """The one way a test writes an inventory: PATH (YAML; JSON when it ends in .json) with the GPU hosts
    ``{name: variables}`` in ``gpu_hosts``, other groups ``{group: {host: variables}}``, hosts in no group
    ``{name: variables}`` and ALL_VARS for every host (an empty group is left out). local: every host runs on this machine (LOCAL_HOST in ALL_VARS);
    without it only the hosts that say so do (a deploy host beside GPU hosts that are only names). Returns PATH."""
    path = pathlib.Path(path)
    children = {"gpu_hosts": {"hosts": dict(gpu_hosts)}} if gpu_hosts else {}
    children.update({group: {"hosts": dict(members)} for group, members in (groups or {}).items()})
    inventory = {"all": {"children": children} if children else {}}
    if hosts:
        inventory["all"]["hosts"] = dict(hosts)
    variables = dict(LOCAL_HOST if local else {}, **(all_vars or {}))
    if variables:
        inventory["all"]["vars"] = variables
    path.write_text(json.dumps(inventory, indent=1) if path.suffix == ".json" else yaml.safe_dump(inventory),
                    encoding="utf-8")
    return path


# The fixture hosts the plan and report playbooks' tests plan (fixtures/hosts): an AMD V100 server, an Intel host
# before its IOMMU is on, and two GPUs of one model beside the console's.
FIXTURE_HOSTS = {"seed": "seed-v100", "intel": "intel-pre-iommu", "twin": "console-twin"}


def fixture_inventory(tmp_path, fixture_host, extra_host_vars=None, fixtures=None):
    """FIXTURES (FIXTURE_HOSTS by default: {host: fixture}) as local hosts, their trees built by the session's
    ``fixture_host``; EXTRA_HOST_VARS ({host: variables}) on top. Their plan directory is tmp_path/plans (never the
    site default under /var/lib, group_vars/all/main.yml); tests name it again with -e where they read it."""
    hosts = {}
    for host, fixture in (fixtures or FIXTURE_HOSTS).items():
        root = fixture_host(fixture)
        hosts[host] = {"passthrough_sysfs_root": f"{root}/sys", "passthrough_procfs_root": f"{root}/proc",
                       **(extra_host_vars or {}).get(host, {})}
    return write_inventory(pathlib.Path(tmp_path) / "inventory.yml", hosts,
                           {"passthrough_plan_dir": str(pathlib.Path(tmp_path) / "plans")})


def project_playbook(inventory, *args, playbook="plan.yml", timeout=300):
    """The project's playbooks/PLAYBOOK on INVENTORY: (rc, stdout then stderr)."""
    proc = run_playbook("-i", inventory, os.path.join(ROOT, "playbooks", playbook), *args, timeout=timeout)
    return proc.returncode, output(proc)


def sandbox_host(root, plan_dir, **variables):
    """The variables of a GPU host simulated in the sandbox ROOT (its sys/ and proc/ as scripts/mock_sysfs.py builds
    them): the plan role reads the hardware there and keeps the plan in PLAN_DIR; VARIABLES on top."""
    return {"passthrough_sysfs_root": f"{root}/sys", "passthrough_procfs_root": f"{root}/proc",
            "passthrough_plan_dir": str(plan_dir), **variables}


def sandbox_host_tools(root, calls, fixture, wrap=None):
    """The host role's tools on a sandbox host, as the tests run them: update-grub by the boot-config stand-in
    (tests/standins/simulate_boot_config.py: grub.cfg under ROOT from its GRUB files), update-initramfs recorded
    (tests/standins/record_command.py), both logged in CALLS, and the reboot by its stand-in (FIXTURE booted:
    reboot_standin). WRAP(tool name): an argv put in front of each (a fault injector), none by default."""
    wrap = wrap or (lambda _name: [])
    standins = os.path.join(ROOT, "tests", "standins")
    return {
        "passthrough_host_root": str(root),
        "passthrough_host_os_family": "Debian",
        "passthrough_host_allow_reboot": True,
        "passthrough_host_boot_config_command": wrap("update-grub") + [
            sys.executable, os.path.join(standins, "simulate_boot_config.py"), str(calls), str(root), "update-grub"],
        "passthrough_host_initramfs_command": wrap("update-initramfs") + [
            sys.executable, os.path.join(standins, "record_command.py"), str(calls), "update-initramfs", "-u", "-k", "all"],
        "passthrough_host_reboot_command": wrap("reboot") + reboot_standin(fixture, root),
    }


def configured_host(root, plan_dir, name, fixture="seed-v100", policy=None, database=None, edit=None):
    """A GPU host as the host phase leaves it, simulated in the sandbox ROOT: FIXTURE's hardware (fixtures/hosts,
    changed by EDIT(fixture) first), planned under POLICY, its planned devices on vfio-pci, and its plan file
    PLAN_DIR/NAME.json as the plan role writes it. DATABASE: the PCI ID database discovery names devices from
    (none by default). Returns the plan."""
    mock_sysfs = load_source("mock_sysfs", os.path.join("scripts", "mock_sysfs.py"))
    facts_module = collection_module("pci_passthrough_facts")
    planner = collection_plugin("filter", "passthrough_plan")
    spec = mock_sysfs.load_fixture(os.path.join(FIXTURES, f"{fixture}.yml"))
    if edit:
        edit(spec)
    root, plan_dir = str(root), pathlib.Path(plan_dir)
    mock_sysfs.build_tree(spec, root)
    plan = planner.passthrough_plan(facts_module.discover(f"{root}/sys", f"{root}/proc", database), policy or {}, name)
    mock_sysfs.build_tree(spec, root, drivers={address: "vfio-pci" for address in plan["vfio_devices"]})
    plan_dir.mkdir(exist_ok=True)
    facts = facts_module.discover(f"{root}/sys", f"{root}/proc", database)
    (plan_dir / f"{name}.json").write_text(json.dumps(planner.plan_record(plan, facts, policy or {})))
    return plan


def recap(out):
    """{host: {ok, changed, unreachable, failed}} from the PLAY RECAP of ansible-playbook's output."""
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)),
                         "failed": int(m.group(5))} for m in RECAP.finditer(out)}


def openstack_python() -> str:
    """The OpenStack services venv's Python (scripts/openstack-venv.sh builds the venv when it is missing or stale,
    or waits for the build under way)."""
    venv = subprocess.run([os.path.join(ROOT, "scripts", "openstack-venv.sh")], check=True, capture_output=True,
                          text=True, timeout=1800).stdout.strip().splitlines()[-1]
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
        self.stopped = False

    def stop(self):
        """Stop the cloud once (scripts/testcloud.sh stop), and prove it stopped: no process of it is left.

        tests/conftest.py calls it after the last test of the cloud's group, so the cloud's daemons do not idle
        beside the rest of the run; the fixture calls it again at the end of the session (then it does nothing)."""
        if self.stopped:
            return
        self.stopped = True
        self.script("stop")
        print(f"\ntest cloud {self.dir}: timings (s) {self.timings}")
        left = processes_of(self.dir)
        assert left == {}, f"still running after testcloud.sh stop: {left}"

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
        """The environment of a playbook run against this cloud: its clouds.yaml, the json stdout callback."""
        return ansible_env(OS_CLIENT_CONFIG_FILE=self.clouds_yaml, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                           ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false", OS_CLOUD=None)

    def _run(self, path, *args):
        """Run ansible-playbook; returns (rc, [localhost task results in order], {name: result}, stdout)."""
        import pytest  # pylint: disable=import-outside-toplevel

        proc = run_playbook(path, *args, env=self.env())
        # The JSON document comes first; other callbacks (e.g. ogc_changes) may print after it.
        out = json_report(proc.stdout)
        if out is None:
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
