#!/usr/bin/env python3
"""A local test cloud: real Keystone, Nova API and Glance API on 127.0.0.1, on MariaDB as kolla-ansible deploys them.

Run with the OpenStack services venv's Python (scripts/testcloud.sh does that):

    testcloud.py start  [--dir DIR] [--lifetime SECONDS] [--with-compute [--nova-pci-from FILE [--nova-scheduler-from FILE]]
                        [--fake-gpus FILE] [--compute-host NAME] [--placement-from FILE]]
    testcloud.py stop   [--dir DIR]
    testcloud.py status [--dir DIR]
    testcloud.py wipe   [--dir DIR] [--all]   stop, then delete databases, keys and images; the next
                                           start restores the freshly initialised databases kept in
                                           pristine/ (--all deletes those too: the next start migrates)

State layout under DIR (default: .demo/cloud in the repository):

    state.json      ports, PIDs, lifetime, when each server started
    secrets.json    admin and service passwords (0600; kept by wipe so clouds.yaml stays valid)
    clouds.yaml     cloud `ogc-test`, admin in project admin (0600)
    etc/<svc>/      generated configuration        data/   MariaDB's datadir, fernet keys, images
    log/<svc>.log   service log                    log/<svc>-server.log  gunicorn and stderr
    wsgi/           tiny wrappers that clear sys.argv before importing each WSGI app
    pristine/       the freshly initialised databases (dumps) and keys, restored by the start after a wipe

The databases live in a MariaDB server of the cloud's own (Debian's mariadb-server; mariadb.py): 127.0.0.1
and a free port, one database and one user per service, as kolla-ansible configures them.

With --with-compute it also runs RabbitMQ, Placement, a read-only Neutron stand-in, nova-conductor,
nova-scheduler and a nova-compute on a fake virt driver with GPU-like PCI devices, so servers can be
booted, shelved and deleted (see compute.py); without it nothing of that starts.

Every server runs under supervise.py, which stops it and every process it started (forked workers in
sessions of their own included) on `stop`, and by itself after --lifetime seconds (default 7200, env
OGC_TESTCLOUD_LIFETIME) even if nobody calls `stop`.
Only the Python standard library is needed before keystone is up; the catalog is registered with
openstacksdk from the same venv.
"""

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import compute  # scripts/testcloud/compute.py: the optional compute services
import mariadb  # scripts/testcloud/mariadb.py: the database server
from logtail import tail

SERVICES = ("keystone", "nova", "glance")
CLOUD_NAME = "ogc-test"
REGION = "RegionOne"
DEFAULT_LIFETIME = 7200
READY_TIMEOUT = 120
DATABASE_READY_TIMEOUT = 60
STOP_GRACE = 10  # seconds a stopped server has before its processes are killed (supervise.py)
# What the services need running: stopped after them, so they do not log a lost database or broker on the way out.
BACKENDS = ("mariadb", "rabbitmq", "epmd")
# What `wipe` forgets and the next start restores from pristine/: the API services' databases and keystone's keys
# (placement's database is the compute side's, migrated again when it is empty).
PRISTINE_DATABASES = ("keystone", "nova_api", "nova", "nova_cell0", "glance")
PRISTINE_FILES = ("fernet-keys", "credential-keys")
SUPERVISE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervise.py")

WSGI_WRAPPERS = {
    "keystone": "keystone.wsgi.api",
    "nova": "nova.wsgi.osapi_compute",
    "glance": "glance.wsgi.api",
}
# What GET <base> answers when the service is up (glance answers 300 Multiple Choices).
READY_PATHS = {"keystone": "/v3", "nova": "/", "glance": "/"}


class CloudError(Exception):
    """A failure with a message meant for the operator (no traceback)."""


# --------------------------------------------------------------------------- helpers

def venv_bin(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def load_json(path, default):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def write_file(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(taken):
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def pid_alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is not alive.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


def http_status(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


# --------------------------------------------------------------------------- migrated schemas
# Every test cloud's databases start from the same schemas: what keystone-manage db_sync, nova-manage api_db sync and
# db sync, glance-manage db_sync and placement-manage db sync produce with this venv's versions of the services. The
# first cloud runs the migrations and keeps a dump of each database they wrote (mariadb-dump, before anything of that
# cloud is in it: keys, users, endpoints, cell mappings and ports are each cloud's own and are made for it as before);
# the next cloud, in another directory, loads those dumps instead of migrating again. The folder is inside the venv
# and named by the services' versions, so a venv built with other versions never reads these.
SCHEMA_PACKAGES = ("keystone", "nova", "glance", "openstack-placement")


def schema_cache_dir():
    from importlib import metadata  # pylint: disable=import-outside-toplevel

    versions = []
    for package in SCHEMA_PACKAGES:
        try:
            versions.append(f"{package}-{metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package}-none")
    return os.path.join(sys.prefix, "ogc-testcloud-schemas-mariadb", "_".join(versions))


def schema_dump(name):
    return os.path.join(schema_cache_dir(), name + ".sql")


# --------------------------------------------------------------------------- the cloud

class TestCloud:
    def __init__(self, state_dir, lifetime=DEFAULT_LIFETIME, with_compute=False, compute_options=None):
        self.dir = os.path.abspath(state_dir)
        self.etc = os.path.join(self.dir, "etc")
        self.data = os.path.join(self.dir, "data")
        self.pristine = os.path.join(self.dir, "pristine")
        self.logs = os.path.join(self.dir, "log")
        self.state_path = os.path.join(self.dir, "state.json")
        self.secrets_path = os.path.join(self.dir, "secrets.json")
        self.clouds_yaml = os.path.join(self.dir, "clouds.yaml")
        self.lifetime = lifetime
        self.state = load_json(self.state_path, {})
        self.with_compute = with_compute
        self.compute = compute.Compute(self, **(compute_options or {})) if with_compute else None
        self.database = mariadb.MariaDB(self.dir, self.data, self.etc, self.logs)
        self.broker = None  # start: the broker's processes (compute side)

    # ---- state ---------------------------------------------------------------
    def save_state(self):
        write_file(self.state_path, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    def secrets(self):
        """Passwords: admin, the service users (nova, glance) and each database user (<user>_database, added to an
        older file when missing)."""
        found = load_json(self.secrets_path, None)
        wanted = ("admin", "nova", "glance") + tuple(f"{user}_database" for user in mariadb.USERS)
        if found is None or not set(wanted) <= set(found):
            found = dict({name: secrets.token_urlsafe(18) for name in wanted}, **(found or {}))
            write_file(self.secrets_path, json.dumps(found, indent=2) + "\n", 0o600)
        return found

    def url(self, service, port=None):
        port = port or self.state["ports"][service]
        suffix = {"keystone": "/v3", "nova": "/v2.1", "glance": ""}[service]
        return f"http://127.0.0.1:{port}{suffix}"

    def running(self):
        """{service: pid} of the servers that are alive."""
        return {svc: pid for svc, pid in self.state.get("pids", {}).items() if pid_alive(pid)}

    # ---- configuration -------------------------------------------------------
    def choose_ports(self):
        old = self.state.get("ports", {})
        ports = {}
        for svc in SERVICES + ("mariadb",):
            port = old.get(svc)
            if not port or not port_is_free(port) or port in ports.values():
                port = free_port(set(ports.values()))
            ports[svc] = port
        self.state["ports"] = ports

    def db(self, name):
        """The [database] connection of database NAME, as kolla-ansible writes it (mysql+pymysql, its own user)."""
        return self.database.url(name, self.secrets()[f"{mariadb.DATABASES[name]}_database"])

    def authtoken(self, user, password):
        return f"""[keystone_authtoken]
www_authenticate_uri = {self.url('keystone')}
auth_url = {self.url('keystone')}
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = {user}
password = {password}
region_name = {REGION}
"""

    def write_configs(self):
        pw = self.secrets()
        for sub in ("keystone", "nova", "glance"):
            os.makedirs(os.path.join(self.etc, sub), exist_ok=True)
        for sub in ("fernet-keys", "credential-keys", "images", "staging", "tasks", "locks"):
            os.makedirs(os.path.join(self.data, sub), exist_ok=True)
        os.makedirs(self.logs, exist_ok=True)
        self.database.write_config(self.state["ports"]["mariadb"], write_file)
        common = "[oslo_policy]\nenforce_new_defaults = true\n"

        write_file(os.path.join(self.etc, "keystone", "keystone.conf"), f"""[DEFAULT]
log_file = {self.logs}/keystone.log
[database]
connection = {self.db('keystone')}
[token]
provider = fernet
[fernet_tokens]
key_repository = {self.data}/fernet-keys
[fernet_receipts]
key_repository = {self.data}/fernet-keys
[credential]
key_repository = {self.data}/credential-keys
[cache]
enabled = true
backend = dogpile.cache.memory
[identity]
# Test-only speed-up: bcrypt's minimum cost.
password_hash_rounds = 4
{common}""")

        shutil.copy(os.path.join(sys.prefix, "etc", "nova", "api-paste.ini"),
                    os.path.join(self.etc, "nova", "api-paste.ini"))
        write_file(os.path.join(self.etc, "nova", "nova.conf"), f"""[DEFAULT]
log_file = {self.logs}/nova.log
transport_url = fake://
my_ip = 127.0.0.1
host = ogc-testcloud
state_path = {self.data}
[api]
auth_strategy = keystone
[api_database]
connection = {self.db('nova_api')}
[database]
connection = {self.db('nova')}
[oslo_concurrency]
lock_path = {self.data}/locks
[wsgi]
api_paste_config = {self.etc}/nova/api-paste.ini
{self.authtoken('nova', pw['nova'])}
{common}""")

        shutil.copy(os.path.join(sys.prefix, "etc", "glance", "glance-api-paste.ini"),
                    os.path.join(self.etc, "glance", "glance-api-paste.ini"))
        write_file(os.path.join(self.etc, "glance", "glance-api.conf"), f"""[DEFAULT]
log_file = {self.logs}/glance.log
enabled_backends = file:file
[glance_store]
default_backend = file
[file]
filesystem_store_datadir = {self.data}/images
[os_glance_staging_store]
filesystem_store_datadir = {self.data}/staging
[os_glance_tasks_store]
filesystem_store_datadir = {self.data}/tasks
[database]
connection = {self.db('glance')}
[paste_deploy]
flavor = keystone
config_file = {self.etc}/glance/glance-api-paste.ini
[oslo_concurrency]
lock_path = {self.data}/locks
{self.authtoken('glance', pw['glance'])}
{common}""")

        wsgi_dir = os.path.join(self.dir, "wsgi")
        for svc, module in WSGI_WRAPPERS.items():
            # oslo.config parses sys.argv: gunicorn's own flags would break the app's start-up.
            write_file(os.path.join(wsgi_dir, f"ogc_{svc}_app.py"),
                       f"import sys\nsys.argv = sys.argv[:1]\nfrom {module} import application  # noqa: E402,F401\n")

        write_file(self.clouds_yaml, f"""# Written by scripts/testcloud.sh: the local test cloud (admin). Do not commit.
clouds:
  {CLOUD_NAME}:
    auth:
      auth_url: {self.url('keystone')}
      username: admin
      password: {pw['admin']}
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: {REGION}
    interface: public
    identity_api_version: 3
""", 0o600)

    # ---- initialisation ------------------------------------------------------
    def manage(self, label, argv, env=None):
        log = os.path.join(self.logs, "init.log")
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  cwd=self.dir, env=env)
        if proc.returncode:
            raise CloudError(f"{label}: `{' '.join(argv)}` exited {proc.returncode}; see {log}\n{tail(log)}")

    def migrate(self, label, names, argv):
        """Run a schema migration that writes the databases NAMES, or load its results from the schema cache (all of
        them, else the migration runs; then each is dumped into the cache)."""
        if all(os.path.isfile(schema_dump(name)) for name in names):
            for name in names:
                self.database.load(name, schema_dump(name))
            return
        for name in names:
            self.database.empty(name)  # a partial load must not meet the migration
        self.manage(label, argv)
        os.makedirs(schema_cache_dir(), exist_ok=True)
        for name in names:
            self.database.dump(name, schema_dump(name))

    def init_keystone(self):
        conf = ["--config-file", os.path.join(self.etc, "keystone", "keystone.conf")]
        km = venv_bin("keystone-manage")
        self.migrate("keystone", ["keystone"], [km, *conf, "db_sync"])
        self.manage("keystone", [km, *conf, "fernet_setup", "--keystone-user", str(os.getuid()),
                                 "--keystone-group", str(os.getgid())])
        self.manage("keystone", [km, *conf, "credential_setup", "--keystone-user", str(os.getuid()),
                                 "--keystone-group", str(os.getgid())])
        self.bootstrap_keystone()

    def bootstrap_keystone(self):
        conf = ["--config-file", os.path.join(self.etc, "keystone", "keystone.conf")]
        url = self.url("keystone")
        # The password goes through the environment: not in init.log, and safe when it starts with '-'.
        self.manage("keystone", [venv_bin("keystone-manage"), *conf, "bootstrap",
                                 "--bootstrap-admin-url", url, "--bootstrap-internal-url", url,
                                 "--bootstrap-public-url", url, "--bootstrap-region-id", REGION],
                    env=dict(os.environ, OS_BOOTSTRAP_PASSWORD=self.secrets()["admin"]))

    def init_nova(self):
        conf = ["--config-file", os.path.join(self.etc, "nova", "nova.conf")]
        nm = venv_bin("nova-manage")
        self.migrate("nova", ["nova_api"], [nm, *conf, "api_db", "sync"])
        self.manage("nova", [nm, *conf, "cell_v2", "map_cell0", "--database_connection",
                             self.db("nova_cell0")])
        # `db sync` migrates the cell database and, through the mapping just made, cell0.
        self.migrate("nova", ["nova", "nova_cell0"], [nm, *conf, "db", "sync"])
        self.manage("nova", [nm, *conf, "cell_v2", "create_cell", "--name", "cell1",
                             "--database_connection", self.db("nova"), "--transport-url", "fake://"])

    def init_glance(self):
        self.migrate("glance", ["glance"], [venv_bin("glance-manage"), "--config-file",
                                          os.path.join(self.etc, "glance", "glance-api.conf"), "db_sync"])

    def initialise(self):
        errors = []

        def run(func):
            try:
                func()
            except (CloudError, mariadb.DatabaseError) as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=run, args=(f,))
                   for f in (self.init_keystone, self.init_nova, self.init_glance)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise CloudError("initialising the databases failed:\n" + "\n".join(errors))
        self.state["initialised"] = True
        self.state["keystone_url"] = self.url("keystone")
        # Keep the freshly initialised databases (dumps) and keys: `start` after `wipe` restores them instead of
        # running the schema migrations again.
        shutil.rmtree(self.pristine, ignore_errors=True)
        os.makedirs(self.pristine)
        for name in PRISTINE_DATABASES:
            self.database.dump(name, os.path.join(self.pristine, name + ".sql"))
        for name in PRISTINE_FILES:
            shutil.copytree(os.path.join(self.data, name), os.path.join(self.pristine, name))
        self.state["pristine_keystone_url"] = self.url("keystone")
        self.save_state()

    def restore_pristine(self):
        for name in PRISTINE_DATABASES:
            self.database.load(name, os.path.join(self.pristine, name + ".sql"))
        for name in PRISTINE_FILES:
            shutil.rmtree(os.path.join(self.data, name), ignore_errors=True)
            shutil.copytree(os.path.join(self.pristine, name), os.path.join(self.data, name))
        self.state["initialised"] = True
        self.state["keystone_url"] = self.state["pristine_keystone_url"]

    # ---- servers -------------------------------------------------------------
    def launch(self, name, argv, env=None):
        """Start server NAME under supervise.py (its lifetime, and every process it starts stopped with it) in a
        session of its own, output to log/NAME-server.log; records its PID. Every process of the cloud has
        OGC_TESTCLOUD_DIR=<this cloud's directory> in its environment."""
        full_env = dict(os.environ)
        full_env.pop("OS_CLOUD", None)
        full_env.update(env or {}, OGC_TESTCLOUD_DIR=self.dir)
        argv = [sys.executable, SUPERVISE, str(int(self.lifetime)), str(STOP_GRACE), "--", *argv]
        log = os.path.join(self.logs, f"{name}-server.log")
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.dir, env=full_env, start_new_session=True)
        self.state.setdefault("pids", {})[name] = proc.pid
        self.state.setdefault("started_at", {})[name] = time.time()
        return proc

    def spawn(self, svc):
        server_log = os.path.join(self.logs, f"{svc}-server.log")
        return self.launch(svc, [
            venv_bin("gunicorn"), "--bind", f"127.0.0.1:{self.state['ports'][svc]}",
            "--workers", "1", "--worker-class", "gthread", "--threads", "4",
            "--timeout", "300", "--graceful-timeout", "5",
            "--error-logfile", server_log, "--capture-output",
            "--access-logfile", os.path.join(self.logs, f"{svc}-access.log"),
            "--name", f"ogc-testcloud-{svc}",
            f"ogc_{svc}_app:application"], env={
                "OS_KEYSTONE_CONFIG_DIR": os.path.join(self.etc, "keystone"),
                "OS_NOVA_CONFIG_DIR": os.path.join(self.etc, "nova"),
                "OS_GLANCE_CONFIG_DIR": os.path.join(self.etc, "glance"),
                "PYTHONPATH": os.path.join(self.dir, "wsgi"),
            })

    def start_database(self):
        """The cloud's MariaDB: system tables on first use, the server, every service's database and user."""
        db = self.database
        try:
            db.ensure_installed()
            db.install()
            proc = self.launch("mariadb", db.argv())
            self.save_state()
            db.wait_ready(proc, time.time() + DATABASE_READY_TIMEOUT, lambda why: self.failed("mariadb", why))
            db.create_databases({user: self.secrets()[f"{user}_database"] for user in mariadb.USERS})
        except mariadb.DatabaseError as exc:
            raise CloudError(str(exc)) from None

    def wait_ready(self, svc, proc, deadline):
        url = f"http://127.0.0.1:{self.state['ports'][svc]}{READY_PATHS[svc]}"
        while time.time() < deadline:
            if proc.poll() is not None:
                raise self.failed(svc, f"exited with status {proc.returncode} during start-up")
            status = http_status(url)
            if status is not None and status < 500:
                return
            time.sleep(0.3)
        raise self.failed(svc, f"did not answer on {url} within {READY_TIMEOUT} s")

    def failed(self, svc, why):
        logs = [os.path.join(self.logs, f"{svc}-server.log"), os.path.join(self.logs, f"{svc}.log")]
        detail = "".join(f"\n--- last lines of {p}:\n{tail(p)}" for p in logs if os.path.exists(p))
        return CloudError(f"{svc} {why}. Logs: {', '.join(logs)}{detail}")

    def register_catalog(self):
        """Service project, service users (admin role; nova also the service role, as kolla-ansible's
        nova_ks_user_roles gives it: Placement lets only a service reshape, which nova-compute does when it starts
        reporting PCI devices with servers on them) and compute/image endpoints: idempotent."""
        import openstack  # the services venv has openstacksdk  # pylint: disable=import-outside-toplevel

        pw = self.secrets()
        conn = openstack.connect(
            auth_url=self.url("keystone"), username="admin", password=pw["admin"], project_name="admin",
            user_domain_name="Default", project_domain_name="Default", region_name=REGION,
            identity_api_version="3", load_yaml_config=False, load_envvars=False)
        ident = conn.identity
        project = ident.find_project("service", domain_id="default") or \
            ident.create_project(name="service", domain_id="default", description="Service users")
        admin_role = ident.find_role("admin", ignore_missing=False)
        service_role = ident.find_role("service") or ident.create_role(name="service")
        for svc, stype, user in (("nova", "compute", "nova"), ("glance", "image", "glance")):
            found = ident.find_user(user, domain_id="default")
            if found is None:
                found = ident.create_user(name=user, password=pw[user], domain_id="default")
            else:
                ident.update_user(found, password=pw[user])
            ident.assign_project_role_to_user(project, found, admin_role)
            if user == "nova":
                ident.assign_project_role_to_user(project, found, service_role)
            service = next(iter(ident.services(type=stype)), None) or \
                ident.create_service(name=svc, type=stype, is_enabled=True)
            url = self.url(svc)
            existing = {e.interface: e for e in ident.endpoints(service_id=service.id)}
            for interface in ("public", "internal", "admin"):
                endpoint = existing.get(interface)
                if endpoint is None:
                    ident.create_endpoint(service_id=service.id, interface=interface, url=url,
                                          region_id=REGION)
                elif endpoint.url != url:
                    ident.update_endpoint(endpoint, url=url)
        conn.close()

    # ---- commands ------------------------------------------------------------
    def start(self):
        if self.compute:
            try:
                self.compute.check_inputs()  # before anything is stopped or written
            except compute.ComputeError as exc:
                raise CloudError(str(exc)) from None
        os.makedirs(self.dir, exist_ok=True)
        up = self.running()
        options = self.compute.options() if self.compute else None
        # A start without --with-compute asks for the API services: a cloud running them, with its compute side or
        # not, is kept as it is. A start with --with-compute keeps only a cloud started with the same options.
        if set(self.expected()) <= set(up) and (not self.compute or self.state.get("compute_options") == options):
            print(f"testcloud: already running in {self.dir}")
            self.print_status()
            return 0
        if up:
            self.stop(quiet=True)
        t0 = time.time()
        self.choose_ports()
        if self.compute:
            self.compute.choose_ports(port_is_free, free_port)
        self.write_configs()
        if self.compute:
            self.compute.write_configs(write_file)
        self.state["with_compute"] = self.with_compute
        self.state["compute_options"] = options
        self.state["lifetime"] = self.lifetime
        self.save_state()
        try:
            t1 = self.start_databases(t0)
            procs = {svc: self.spawn(svc) for svc in SERVICES}
            self.save_state()
            deadline = time.time() + READY_TIMEOUT
            self.wait_ready("keystone", procs["keystone"], deadline)
            try:
                self.register_catalog()
            except Exception as exc:  # pylint: disable=broad-except
                raise self.failed("keystone", f"refused the catalog registration ({exc})") from None
            for svc in ("nova", "glance"):
                self.wait_ready(svc, procs[svc], deadline)
            if self.compute:
                self.start_compute(self.broker)
        except (compute.ComputeError, mariadb.DatabaseError) as exc:
            self.stop(quiet=True)
            raise CloudError(str(exc)) from None
        except CloudError:
            self.stop(quiet=True)
            raise
        print(f"testcloud: started in {time.time() - t0:.1f} s (databases {t1 - t0:.1f} s); "
              f"servers stop by themselves after {self.lifetime} s")
        self.print_status()
        return 0

    def start_databases(self, t0):
        """MariaDB, the databases restored, initialised or kept, and the compute side's; returns when that was."""
        self.start_database()
        print(f"testcloud: MariaDB ready in {time.time() - t0:.1f} s", flush=True)
        if not self.state.get("initialised") and os.path.isdir(self.pristine) and \
                self.state.get("pristine_keystone_url"):
            print(f"testcloud: restoring the freshly initialised databases from {self.pristine}", flush=True)
            self.restore_pristine()
        if not self.state.get("initialised"):
            cached = os.path.isdir(schema_cache_dir())
            print(f"testcloud: initialising the databases"
                  f"{' from the migrated schemas in ' + schema_cache_dir() if cached else ' (migrations)'}", flush=True)
            self.initialise()
        if self.state.get("keystone_url") != self.url("keystone"):
            self.bootstrap_keystone()  # updates the identity endpoint to the new port
            self.state["keystone_url"] = self.url("keystone")
        if self.compute:
            self.compute.initialise()
            self.broker = self.compute.start_broker()
        return time.time()

    def expected(self):
        """Names of the processes a complete start of this kind runs."""
        return ("mariadb",) + SERVICES + (compute.COMPUTE_SERVICES if self.with_compute else ())

    def admin_connection(self):
        import openstack  # the services venv has openstacksdk  # pylint: disable=import-outside-toplevel

        return openstack.connect(
            auth_url=self.url("keystone"), username="admin", password=self.secrets()["admin"], project_name="admin",
            user_domain_name="Default", project_domain_name="Default", region_name=REGION,
            identity_api_version="3", load_yaml_config=False, load_envvars=False)

    def start_compute(self, broker):
        """After the API services: the broker, placement, the neutron stand-in and the nova services."""
        t0 = time.time()
        conn = self.admin_connection()
        try:
            self.compute.register_catalog(conn)
        finally:
            conn.close()
        # A new token: its catalog has the placement endpoint registered just now.
        conn = self.admin_connection()
        try:
            deadline = time.time() + READY_TIMEOUT
            ports = self.state["ports"]
            self.compute.wait_port("rabbitmq", broker["rabbitmq"], ports["rabbitmq"], deadline)
            services_started = time.time()
            procs = self.compute.start_services()
            self.save_state()
            self.compute.wait_port("placement", procs["placement"], ports["placement"], deadline)
            self.compute.wait_port("neutron", procs["neutron"], ports["neutron"], deadline)
            procs.update(broker)
            self.compute.wait_compute(conn, procs, time.time() + READY_TIMEOUT, services_started)
        finally:
            conn.close()
        print(f"testcloud: compute services ready in {time.time() - t0:.1f} s (host {self.compute.host}, "
              f"PCI configuration {self.compute.nova_pci_from or 'the test cloud own'}"
              f"{', scheduler ' + self.compute.nova_scheduler_from if self.compute.nova_pci_from else ''})")

    def stop(self, quiet=False):
        """Stop every server: the services first, then what they use (BACKENDS). Each server's supervisor stops the
        server and every process it started (SIGTERM, SIGKILL after STOP_GRACE s) and exits when none is left.
        Ctrl-C does not cut it short (it is bounded): an interrupted stop would leave MariaDB and RabbitMQ running."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        pids = self.state.get("pids", {})
        for phase in ([s for s in pids if s not in BACKENDS], [s for s in pids if s in BACKENDS]):
            for svc in phase:
                if pid_alive(pids[svc]):
                    try:
                        os.kill(pids[svc], signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            deadline = time.time() + STOP_GRACE + 10
            for svc in phase:
                pid = pids[svc]
                while pid_alive(pid) and time.time() < deadline:
                    time.sleep(0.1)
                if pid_alive(pid):
                    # A supervisor that did not finish in time: its own session (start_new_session), the process
                    # group id is the recorded PID.
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                if not quiet:
                    print(f"testcloud: {svc} (pid {pid}) stopped")
        self.state["pids"] = {}
        if os.path.isdir(self.dir) and self.state:
            self.save_state()
        if not pids and not quiet:
            print(f"testcloud: nothing running in {self.dir}")
        return 0

    def status(self):
        if not self.state:
            print(f"testcloud: no test cloud in {self.dir}")
            return 3
        return self.print_status()

    def print_status(self):
        up = self.running()
        started = self.state.get("started_at", {})
        lifetime = self.state.get("lifetime", DEFAULT_LIFETIME)
        for svc in ("mariadb",) + SERVICES + tuple(n for n in compute.COMPUTE_SERVICES
                                                   if n in self.state.get("pids", {})):
            port = self.state.get("ports", {}).get(svc)
            if svc not in SERVICES:
                where = f"port {port}" if port else "(no port)"
                if svc in up:
                    left = int(started.get(svc, 0) + lifetime - time.time())
                    print(f"  {svc:8} running  pid {up[svc]:<7} {where}  (stops itself in {left} s)")
                else:
                    print(f"  {svc:8} stopped  log {os.path.join(self.logs, svc + '-server.log')}")
                continue
            if svc in up:
                left = int(started.get(svc, 0) + lifetime - time.time())
                print(f"  {svc:8} running  pid {up[svc]:<7} {self.url(svc, port)}  (stops itself in {left} s)")
            else:
                print(f"  {svc:8} stopped  log {os.path.join(self.logs, svc + '-server.log')}")
        print(f"  clouds.yaml {self.clouds_yaml} (cloud {CLOUD_NAME}); "
              f"export OS_CLIENT_CONFIG_FILE={self.clouds_yaml} OS_CLOUD={CLOUD_NAME}")
        expected = ("mariadb",) + SERVICES + tuple(n for n in compute.COMPUTE_SERVICES
                                                   if n in self.state.get("pids", {}))
        return 0 if set(expected) <= set(up) else 3

    def wipe(self, everything=False):
        self.stop(quiet=True)
        paths = [self.data, os.path.join(self.dir, "wsgi"), self.etc]
        keys = ["initialised", "keystone_url", "pids", "started_at"]
        if everything:
            paths.append(self.pristine)
            keys.append("pristine_keystone_url")
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        if os.path.dirname(self.database.socket) != self.database.datadir:
            shutil.rmtree(os.path.dirname(self.database.socket), ignore_errors=True)
        for key in keys + ["placement_initialised", "cell_transport_url"]:
            self.state.pop(key, None)
        if os.path.isdir(self.dir):
            self.save_state()
        if everything:
            print(f"testcloud: wiped databases, keys, images and the pristine copy in {self.dir}")
        else:
            print(f"testcloud: wiped databases, keys and images in {self.dir}; the next start restores the freshly "
                  f"initialised databases (wipe --all forgets them too)")
        return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("command", choices=("start", "stop", "status", "wipe"))
    parser.add_argument("--dir", default=os.environ.get("OGC_TESTCLOUD_DIR", ".demo/cloud"),
                        help="state directory (default .demo/cloud, env OGC_TESTCLOUD_DIR)")
    parser.add_argument("--all", action="store_true",
                        help="wipe: also forget the freshly initialised databases (the next start migrates again)")
    parser.add_argument("--lifetime", type=int,
                        default=int(os.environ.get("OGC_TESTCLOUD_LIFETIME", DEFAULT_LIFETIME)),
                        help="seconds after which every server stops by itself (default 7200)")
    parser.add_argument("--with-compute", action="store_true",
                        help="start: also run RabbitMQ, Placement, nova-conductor, nova-scheduler and a fake "
                             "nova-compute with GPU-like PCI devices (servers can be booted)")
    parser.add_argument("--nova-pci-from", metavar="FILE",
                        help="with --with-compute: take every nova service's [pci] and [filter_scheduler] from this "
                             "nova.conf kolla-ansible rendered for a GPU host's nova-compute")
    parser.add_argument("--nova-scheduler-from", metavar="FILE",
                        help="with --nova-pci-from: take the [pci] alias (and every other [pci] key but device_spec) "
                             "and [filter_scheduler] of every nova service from this nova.conf kolla-ansible rendered "
                             "for a controller's nova-scheduler (default: the --nova-pci-from file)")
    parser.add_argument("--fake-gpus", metavar="FILE",
                        help="with --with-compute: the PCI devices the fake nova-compute reports (JSON list of "
                             "{address, vendor_id, product_id, dev_type, numa_node})")
    parser.add_argument("--compute-host", metavar="NAME", help="with --with-compute: the hypervisor's name")
    parser.add_argument("--placement-from", metavar="FILE",
                        help="with --with-compute: run Placement with the [placement] and [workarounds] options of "
                             "this placement.conf (kolla-ansible's rendered one, or nova_pci_config's override)")
    args = parser.parse_args(argv)
    if args.lifetime <= 0:
        parser.error("--lifetime must be a positive number of seconds")
    if args.nova_scheduler_from and not args.nova_pci_from:
        parser.error("--nova-scheduler-from needs --nova-pci-from")
    options = {"nova_pci_from": args.nova_pci_from and os.path.abspath(args.nova_pci_from),
               "nova_scheduler_from": args.nova_scheduler_from and os.path.abspath(args.nova_scheduler_from),
               "fake_gpus": args.fake_gpus and os.path.abspath(args.fake_gpus), "host": args.compute_host,
               "placement_from": args.placement_from and os.path.abspath(args.placement_from)}
    if any(options.values()) and not args.with_compute:
        parser.error("--nova-pci-from, --fake-gpus, --compute-host and --placement-from need --with-compute")
    cloud = TestCloud(args.dir, args.lifetime, with_compute=args.with_compute, compute_options=options)
    try:
        if args.command == "wipe":
            return cloud.wipe(everything=args.all)
        return getattr(cloud, args.command)()
    except CloudError as exc:
        print(f"testcloud: {args.command} failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
