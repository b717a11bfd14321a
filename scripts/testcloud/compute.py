"""The test cloud's optional compute side (``testcloud.sh start --with-compute``).

Adds to the API-only test cloud, all on 127.0.0.1 and under the cloud's supervisor (supervise.py) like the rest:

* a message broker: RabbitMQ from Debian packages (``rabbitmq-server``; installed with apt-get when
  missing, debian.py), its own Erlang port mapper (epmd) on a free loopback port, node name, cookie, database and
  logs under ``DIR/data/rabbitmq`` and ``DIR/log/rabbitmq``;
* Placement (openstack-placement, gunicorn, its database in the cloud's MariaDB) registered in the catalog;
* a read-only Neutron stand-in (``fake_neutron.py``): Nova lists an instance's ports on delete and
  shelve-offload even when it was booted with ``networks: none``;
* nova-conductor, nova-scheduler (PciPassthroughFilter enabled) and one nova-compute on a fake virt
  driver (``ogc_fake_gpu.FakeGpuDriver``, loaded through ogc_nova_compute.py: Nova's FakeDriver reporting GPU-like PCI devices) with a
  ``[pci] device_spec`` for them; nova-api gets the matching ``[pci] alias`` and the broker's URL.

By default the compute host (``COMPUTE_HOST``) offers two Tesla V100 (10de:1db4, type-PCI, alias
``tesla-v100``); the alias ``rtx-2080ti`` (10de:1e07) is known to the API but no host has such a device, so
a flavor asking for it fails with "No valid host was found".

With ``--nova-pci-from FILE`` (a nova.conf kolla-ansible rendered for a GPU host's nova-compute, e.g.
``<node_config_directory>/nova-compute/nova.conf``) and ``--nova-scheduler-from FILE`` (the one rendered for a
controller's nova-scheduler; default the same file) Nova's PCI settings come from those files and from nowhere
else: the scheduler's ``[pci]`` (all but ``device_spec``) and ``[filter_scheduler]`` go to the nova.conf every
service reads (nova-api, nova-scheduler, nova-conductor, nova-compute), the compute's ``[pci]`` (all but ``alias``,
which oslo.config would add up across files) to nova-compute's own file, read after it. The test cloud adds no PCI
or scheduler setting of its own then (``report_in_placement``, ``pci_in_placement`` included: a proof runs what
the product renders); the rest of the rendered files points at containers and is not used. Without them the
test cloud's own settings apply (two V100, Placement on both sides). ``--fake-gpus FILE`` (a JSON list of
``{address, vendor_id, product_id, dev_type, numa_node}``) names the devices the fake driver reports, and
``--compute-host NAME`` the hypervisor's name. A start whose files' content changed restarts the services on the
same databases (the fake driver's guests keep running, ogc_fake_gpu.py).
"""

import datetime
import hashlib
import json
import os
import shutil
import socket
import sys
import time

import debian
from logtail import tail

COMPUTE_SERVICES = ("epmd", "rabbitmq", "placement", "neutron", "conductor", "scheduler", "compute")
COMPUTE_HOST = "ogc-gpu-1"
RABBIT_USER = "guest"  # RabbitMQ's default user, allowed on loopback only
PCI_DEVICES = [
    {"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4", "dev_type": "type-PCI", "numa_node": 0},
    {"address": "0000:44:00.0", "vendor_id": "10de", "product_id": "1db4", "dev_type": "type-PCI", "numa_node": 0},
]
PCI_ALIASES = [
    {"name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI"},
    {"name": "rtx-2080ti", "vendor_id": "10de", "product_id": "1e07", "device_type": "type-PCI"},
]
PCI_DEVICE_SPECS = [{"vendor_id": "10de", "product_id": "1db4"}]
ENABLED_FILTERS = ("ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,"
                   "ServerGroupAffinityFilter,PciPassthroughFilter")
RABBIT_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD_CANDIDATES = ("/usr/bin/epmd", "/usr/lib/erlang/bin/epmd")


class ComputeError(Exception):
    """Raised with an operator-facing message; testcloud.py turns it into its CloudError."""


RENDERED_SECTIONS = ("pci", "filter_scheduler")


def read_sections(path, sections, option, not_what):
    """{section: [(key, value), ...]} of SECTIONS in an INI file, read with oslo.config's own INI parser (repeated
    keys such as ``alias`` and ``device_spec`` are all kept, in order); a file that cannot be read or parsed names
    OPTION and NOT_WHAT it then is."""
    from oslo_config import iniparser  # the services venv  # pylint: disable=import-outside-toplevel

    class Parser(iniparser.BaseParser):
        def __init__(self):
            super().__init__()
            self.section = None
            self.found = {}

        def new_section(self, section):
            self.section = section

        def assignment(self, key, value):
            if self.section in sections:
                self.found.setdefault(self.section, []).append((key, "\n".join(value)))

        def parse_exc(self, msg, lineno, line=None):
            return ComputeError(f"{option} {path} line {lineno}: {msg} ({line!r}): {not_what}")

    parser = Parser()
    try:
        with open(path, encoding="utf-8") as handle:
            parser.parse(handle)
    except OSError as exc:
        raise ComputeError(f"{option} {path} cannot be read ({exc.strerror}): render it first "
                           "(playbooks/nova.yml, then kolla-ansible genconfig: playbooks/deploy.yml)") from None
    return parser.found


def read_rendered_sections(path, role="compute"):
    """{section: [(key, value), ...]} of RENDERED_SECTIONS in a rendered nova.conf. ``role``: "compute" (the file
    must have device_spec and alias) or "scheduler" (alias and enabled_filters)."""
    option = "--nova-pci-from" if role == "compute" else "--nova-scheduler-from"
    found = read_sections(path, RENDERED_SECTIONS, option, "not a nova.conf kolla-ansible rendered")
    pci_keys = {k for k, _v in found.get("pci", [])}
    if role == "compute" and not {"device_spec", "alias"} <= pci_keys:
        raise ComputeError(f"{option} {path} has no [pci] device_spec and alias: it is not the nova-compute "
                           "configuration of a GPU host that nova_pci_config configured")
    if role == "scheduler" and "alias" not in pci_keys:
        raise ComputeError(f"{option} {path} has no [pci] alias: it is not the nova-scheduler configuration "
                           "kolla-ansible rendered from nova_pci_config's overrides")
    if not any(k == "enabled_filters" for k, _v in found.get("filter_scheduler", [])):
        raise ComputeError(f"{option} {path} has no [filter_scheduler] enabled_filters (nova_pci_config writes "
                           "them into the global nova.conf override)")
    return found


PLACEMENT_SECTIONS = ("placement", "workarounds")


def read_placement_sections(path):
    """{section: [(key, value), ...]} of [placement] and [workarounds] in a placement.conf (kolla-ansible's rendered
    placement-api configuration, or the project's override): what the test cloud's Placement then runs with, and
    nothing else of the file."""
    found = read_sections(path, PLACEMENT_SECTIONS, "--placement-from", "not an INI file")
    if not found:
        raise ComputeError(f"--placement-from {path} has no [placement] or [workarounds] option: nothing to run with")
    return found


def read_fake_gpus(path):
    """The devices the fake driver reports, from a JSON list; a wrong entry names the file and the fix."""
    try:
        with open(path, encoding="utf-8") as handle:
            devices = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ComputeError(f"--fake-gpus {path} cannot be read as JSON ({exc})") from None
    if not isinstance(devices, list) or not devices:
        raise ComputeError(f"--fake-gpus {path} must hold a non-empty JSON list of devices")
    for item in devices:
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("address", "vendor_id",
                                                                                           "product_id")):
            raise ComputeError(f"--fake-gpus {path}: each device needs string address, vendor_id and product_id; got "
                               f"{item!r}")
    return devices


def _lines(pairs):
    return "".join(f"{key} = {value}\n" for key, value in pairs)


def _port_open(port, timeout=1.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


class Compute:
    """Configuration, initialisation and processes of the compute side, for one TestCloud."""

    def __init__(self, cloud, nova_pci_from=None, fake_gpus=None, host=None, nova_scheduler_from=None,
                 placement_from=None):
        self.cloud = cloud
        self.placement_from = placement_from
        self.nova_pci_from = nova_pci_from
        self.nova_scheduler_from = nova_scheduler_from or nova_pci_from
        self.fake_gpus = fake_gpus
        self.host = host or COMPUTE_HOST
        self.rabbit_dir = os.path.join(cloud.data, "rabbitmq")
        self.rabbit_logs = os.path.join(cloud.logs, "rabbitmq")
        self.here = os.path.dirname(os.path.abspath(__file__))
        # write_configs: whether nova-compute reports devices to Placement (wait_compute then waits for them)
        self.reports_devices = False

    def options(self):
        """What this start was asked for, the files' content included (a running cloud started otherwise, or from
        files that changed since, is restarted)."""
        digests = {}
        for path in {self.nova_pci_from, self.nova_scheduler_from, self.fake_gpus, self.placement_from} - {None}:
            try:
                with open(path, "rb") as handle:
                    digests[path] = hashlib.sha256(handle.read()).hexdigest()
            except OSError:
                digests[path] = None  # check_inputs names the file
        return {"nova_pci_from": self.nova_pci_from, "nova_scheduler_from": self.nova_scheduler_from,
                "fake_gpus": self.fake_gpus, "host": self.host, "placement_from": self.placement_from,
                "content": digests}

    def check_inputs(self):
        """Read the rendered configuration and the fake devices once, so a bad file stops the start early."""
        if self.nova_pci_from:
            read_rendered_sections(self.nova_pci_from)
            read_rendered_sections(self.nova_scheduler_from, "scheduler")
        if self.fake_gpus:
            read_fake_gpus(self.fake_gpus)
        if self.placement_from:
            read_placement_sections(self.placement_from)

    # ---- ports and URLs ---------------------------------------------------------
    def choose_ports(self, port_is_free, free_port):
        ports = self.cloud.state["ports"]
        previous = self.cloud.state.get("compute_ports", {})  # kept: the cell mapping stores the broker's port
        for name in ("epmd", "rabbitmq", "rabbitmq_dist", "placement", "neutron"):
            port = previous.get(name)
            taken = set(ports.values())
            if not port or not port_is_free(port) or port in taken:
                port = free_port(taken)
            ports[name] = port
        self.cloud.state["compute_ports"] = dict((k, ports[k]) for k in previous.keys() | ports.keys()
                                                 if k in ("epmd", "rabbitmq", "rabbitmq_dist", "placement", "neutron"))

    def transport_url(self):
        return f"rabbit://{RABBIT_USER}:{RABBIT_USER}@127.0.0.1:{self.cloud.state['ports']['rabbitmq']}/"

    def url(self, name):
        return f"http://127.0.0.1:{self.cloud.state['ports'][name]}"

    # ---- configuration ----------------------------------------------------------
    def secrets(self, write_file):
        """The cloud's secrets plus the placement service user's password (added once)."""
        pw = self.cloud.secrets()
        if "placement" not in pw:
            import secrets  # pylint: disable=import-outside-toplevel

            pw["placement"] = secrets.token_urlsafe(18)
            write_file(self.cloud.secrets_path, json.dumps(pw, indent=2) + "\n", 0o600)
        return pw

    def write_configs(self, write_file):
        cloud = self.cloud
        pw = self.secrets(write_file)
        for sub in (self.rabbit_dir, self.rabbit_logs, os.path.join(cloud.etc, "placement"), os.path.join(cloud.etc, "rabbitmq"),
                    os.path.join(cloud.data, "instances")):
            os.makedirs(sub, exist_ok=True)
        ports = cloud.state["ports"]
        write_file(os.path.join(cloud.etc, "rabbitmq", "rabbitmq.conf"), f"""# Test cloud broker: loopback only.
listeners.tcp.1 = 127.0.0.1:{ports['rabbitmq']}
loopback_users.guest = true
log.file.level = warning
""")
        write_file(os.path.join(cloud.etc, "rabbitmq", "enabled_plugins"), "[].\n")
        # nova.conf (every nova service, nova-api included): the broker, placement, neutron, scheduler
        # filters and the PCI aliases. Appended to the API-only file, whose transport_url is replaced.
        nova_conf = os.path.join(cloud.etc, "nova", "nova.conf")
        with open(nova_conf, encoding="utf-8") as handle:
            text = handle.read()
        text = text.replace("transport_url = fake://", f"transport_url = {self.transport_url()}")
        auth = f"""auth_type = password
auth_url = {cloud.url('keystone')}
project_domain_name = Default
user_domain_name = Default
project_name = service
username = nova
password = {pw['nova']}
region_name = RegionOne
"""
        # [pci] and [filter_scheduler]: the test cloud's own, or the rendered files' and nothing else.
        pci = [("alias", json.dumps(a, sort_keys=True)) for a in PCI_ALIASES]
        compute_pci = [("device_spec", json.dumps(s, sort_keys=True)) for s in PCI_DEVICE_SPECS] + \
            [("report_in_placement", "true")]
        scheduler = [("available_filters", "nova.scheduler.filters.all_filters"), ("enabled_filters", ENABLED_FILTERS),
                     # Passthrough devices are tracked in placement too (free/used through the API; see os_pci_inventory).
                     ("pci_in_placement", "true")]
        devices = PCI_DEVICES
        if self.nova_pci_from:
            rendered = read_rendered_sections(self.nova_pci_from)
            for_scheduler = read_rendered_sections(self.nova_scheduler_from, "scheduler")
            pci = [(k, v) for k, v in for_scheduler["pci"] if k != "device_spec"]
            scheduler = for_scheduler["filter_scheduler"]
            # alias is a multi-valued option: oslo.config adds up its values across files, so nova-compute takes
            # its aliases from nova.conf alone (the same global override renders both files).
            compute_pci = [(k, v) for k, v in rendered["pci"] if k != "alias"]
        if self.fake_gpus:
            devices = read_fake_gpus(self.fake_gpus)
        source = (f"from {self.nova_scheduler_from} and {self.nova_pci_from}" if self.nova_pci_from
                  else "the test cloud's own")
        self.reports_devices = any(k == "device_spec" for k, _v in compute_pci) and any(
            k == "report_in_placement" and v.strip().lower() in ("true", "1", "yes", "on") for k, v in compute_pci)
        text += f"""
# ---- compute services (testcloud.sh start --with-compute) ----
[DEFAULT]
# Periodic tasks start at once, not after Nova's random delay of up to 60 s: the scheduler maps the new compute
# host (discover_hosts_in_cells_interval) seconds after it registered, so the start waits for that, not for chance.
periodic_fuzzy_delay = 0
[placement]
{auth}
[neutron]
{auth}
[scheduler]
discover_hosts_in_cells_interval = 2
workers = 1
[conductor]
workers = 1
# [filter_scheduler] and [pci]: {source}
[filter_scheduler]
{_lines(scheduler)}[pci]
{_lines(pci)}[oslo_messaging_rabbit]
heartbeat_timeout_threshold = 0
"""
        write_file(nova_conf, text)
        write_file(os.path.join(cloud.etc, "nova", "nova-compute.conf"), f"""# nova-compute only (read after nova.conf).
[DEFAULT]
debug = {"true" if os.environ.get("OGC_TESTCLOUD_DEBUG") else "false"}
host = {self.host}
compute_driver = ogc_fake_gpu.FakeGpuDriver
instances_path = {cloud.data}/instances
# [pci] but alias: {source}
[pci]
{_lines(compute_pci)}""")
        write_file(os.path.join(cloud.etc, "nova", "fake-pci-devices.json"), json.dumps(devices, indent=1) + "\n")
        write_file(os.path.join(cloud.etc, "placement", "placement.conf"), f"""[DEFAULT]
log_file = {cloud.logs}/placement.log
[api]
auth_strategy = keystone
[placement_database]
connection = {cloud.db('placement')}
[oslo_policy]
enforce_new_defaults = true
{cloud.authtoken('placement', pw['placement'])}
""" + ("".join(f"# from {self.placement_from}\n[{section}]\n{_lines(pairs)}"
               for section, pairs in read_placement_sections(self.placement_from).items())
       if self.placement_from else ""))
        write_file(os.path.join(cloud.dir, "wsgi", "ogc_placement_app.py"),
                   "import sys\nsys.argv = sys.argv[:1]\nfrom placement.wsgi.api import application  # noqa: E402,F401\n")

    # ---- initialisation ---------------------------------------------------------
    def initialise(self):
        """Placement schema, the cell's broker URL (idempotent; once per database / port change)."""
        cloud = self.cloud
        state = cloud.state
        if not state.get("placement_initialised"):
            cloud.migrate("placement", ["placement"], [cloud_bin("placement-manage"), "--config-file",
                                                     os.path.join(cloud.etc, "placement", "placement.conf"), "db", "sync"])
            state["placement_initialised"] = True
        if state.get("cell_transport_url") != self.transport_url():
            # The conductor reaches the computes of cell1 through the cell mapping's transport URL.
            # (nova-manage cell_v2 update_cell does the same in a separate process; ~10 s here.)
            done = cloud.database.execute([("UPDATE cell_mappings SET transport_url = %s WHERE name = 'cell1'",
                                            (self.transport_url(),))], database="nova_api")
            if done != 1:
                raise ComputeError("the nova_api database has no cell 'cell1' (wipe the test cloud and start again)")
            state["cell_transport_url"] = self.transport_url()
        cloud.save_state()

    def register_catalog(self, conn):
        """Placement's service user and endpoints, and the Neutron stand-in's endpoints."""
        pw = self.cloud.secrets()
        ident = conn.identity
        project = ident.find_project("service", domain_id="default", ignore_missing=False)
        admin_role = ident.find_role("admin", ignore_missing=False)
        user = ident.find_user("placement", domain_id="default")
        if user is None:
            user = ident.create_user(name="placement", password=pw["placement"], domain_id="default")
        else:
            ident.update_user(user, password=pw["placement"])
        ident.assign_project_role_to_user(project, user, admin_role)
        for name, stype, url in (("placement", "placement", self.url("placement")),
                                 ("neutron", "network", self.url("neutron"))):
            service = next(iter(ident.services(type=stype)), None) or \
                ident.create_service(name=name, type=stype, is_enabled=True)
            existing = {e.interface: e for e in ident.endpoints(service_id=service.id)}
            for interface in ("public", "internal", "admin"):
                endpoint = existing.get(interface)
                if endpoint is None:
                    ident.create_endpoint(service_id=service.id, interface=interface, url=url, region_id="RegionOne")
                elif endpoint.url != url:
                    ident.update_endpoint(endpoint, url=url)

    # ---- processes --------------------------------------------------------------
    def spawn(self, name, argv, env=None):
        return self.cloud.launch(name, argv, env)

    def rabbit_env(self):
        ports = self.cloud.state["ports"]
        etc = os.path.join(self.cloud.etc, "rabbitmq")
        return {
            "HOME": self.rabbit_dir,  # the Erlang cookie lives here
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(ports["epmd"]),
            "RABBITMQ_NODENAME": "ogc-testcloud@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(ports["rabbitmq"]),
            "RABBITMQ_DIST_PORT": str(ports["rabbitmq_dist"]),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": os.path.join(self.rabbit_dir, "mnesia"),
            "RABBITMQ_LOG_BASE": self.rabbit_logs,
            "RABBITMQ_LOGS": os.path.join(self.rabbit_logs, "rabbit.log"),
            "RABBITMQ_CONFIG_FILE": os.path.join(etc, "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(etc, "enabled_plugins"),
            "RABBITMQ_PID_FILE": os.path.join(self.rabbit_dir, "rabbit.pid"),
        }

    def start_broker(self):
        try:
            debian.ensure_installed([RABBIT_SERVER], ["rabbitmq-server"], os.path.join(self.cloud.logs, "init.log"))
        except debian.PackageError as exc:
            raise ComputeError(str(exc)) from None
        epmd = next((p for p in EPMD_CANDIDATES if os.path.exists(p)), None) or shutil.which("epmd")
        if not epmd:
            raise ComputeError("epmd (Erlang's port mapper, package erlang-base) is missing")
        ports = self.cloud.state["ports"]
        procs = {"epmd": self.spawn("epmd", [epmd, "-address", "127.0.0.1", "-port", str(ports["epmd"])])}
        deadline = time.time() + 20
        while not _port_open(ports["epmd"]):
            if procs["epmd"].poll() is not None or time.time() > deadline:
                raise self.failed("epmd", f"did not listen on 127.0.0.1:{ports['epmd']}")
            time.sleep(0.2)
        procs["rabbitmq"] = self.spawn("rabbitmq", [RABBIT_SERVER], env=self.rabbit_env())
        return procs

    def start_services(self):
        cloud = self.cloud
        nova_conf = os.path.join(cloud.etc, "nova", "nova.conf")
        procs = {
            "placement": self.spawn("placement", [
                cloud_bin("gunicorn"), "--bind", f"127.0.0.1:{cloud.state['ports']['placement']}", "--workers", "1",
                "--worker-class", "gthread", "--threads", "4", "--timeout", "300", "--graceful-timeout", "5",
                "--access-logfile", os.path.join(cloud.logs, "placement-access.log"), "--capture-output",
                "--name", "ogc-testcloud-placement", "ogc_placement_app:application"],
                env={"OS_PLACEMENT_CONFIG_DIR": os.path.join(cloud.etc, "placement"),
                     "PYTHONPATH": os.path.join(cloud.dir, "wsgi")}),
            "neutron": self.spawn("neutron", [sys.executable, os.path.join(self.here, "fake_neutron.py"),
                                              str(cloud.state["ports"]["neutron"])]),
            "conductor": self.spawn("conductor", [cloud_bin("nova-conductor"), "--config-file", nova_conf]),
            "scheduler": self.spawn("scheduler", [cloud_bin("nova-scheduler"), "--config-file", nova_conf]),
            "compute": self.spawn("compute", [sys.executable, os.path.join(self.here, "ogc_nova_compute.py"),
                                              "--config-file", nova_conf, "--config-file",
                                              os.path.join(cloud.etc, "nova", "nova-compute.conf")],
                                  env={"OGC_FAKE_PCI_DEVICES": os.path.join(cloud.etc, "nova", "fake-pci-devices.json")}),
        }
        return procs

    def wait_port(self, name, proc, port, deadline):
        while time.time() < deadline:
            if proc.poll() is not None:
                raise self.failed(name, f"exited with status {proc.returncode} during start-up")
            if _port_open(port):
                return
            time.sleep(0.3)
        raise self.failed(name, f"did not listen on 127.0.0.1:{port} in time")

    def wait_compute(self, conn, procs, deadline, started):
        """Until the hypervisor is known to the API, the nova services are up and placement has the host."""
        seen = "nothing yet"
        last_tree = None
        while time.time() < deadline:
            for name in ("conductor", "scheduler", "compute", "placement", "neutron"):
                if procs[name].poll() is not None:
                    raise self.failed(name, f"exited with status {procs[name].returncode} during start-up")
            providers = []
            try:
                hypervisors = list(conn.compute.hypervisors())
                # "up" and heard from since this start: after a restart the old record still looks up for a
                # minute, and the scheduler's ComputeFilter rejects the host until a fresh heartbeat.
                services = {s.binary: (s.state if _since(s.updated_at, started) else "stale")
                            for s in conn.compute.services()}
            except Exception as exc:  # pylint: disable=broad-except
                hypervisors, services = [], {"error": str(exc)}
            if hypervisors and all(services.get(b) == "up" for b in ("nova-conductor", "nova-scheduler",
                                                                     "nova-compute")):
                try:
                    providers = list(conn.placement.resource_providers(name=self.host))
                except Exception as exc:  # pylint: disable=broad-except
                    providers, services = [], dict(services, placement_error=str(exc))
                if providers:
                    # The host's root provider is made first, its PCI devices' providers (report_in_placement) and
                    # the inventories right after, in the same update: ready when the tree has them all, i.e. has
                    # children (when a device_spec is set), every provider has an inventory, and a second look a
                    # second later finds the same tree.
                    try:
                        tree = sorted((p.name, bool(list(conn.placement.resource_provider_inventories(p))))
                                      for p in conn.placement.resource_providers(in_tree=providers[0].id))
                    except Exception as exc:  # pylint: disable=broad-except
                        tree, services = [], dict(services, placement_error=str(exc))
                    complete = tree and all(has for _name, has in tree) and \
                        (len(tree) > 1 or not self.reports_devices)
                    if complete and tree == last_tree:
                        return
                    last_tree = tree if complete else None
                    providers = [name for name, _has in tree] or providers
            names = [getattr(p, "name", p) for p in providers]
            seen = f"hypervisors {[h.name for h in hypervisors]}, services {services}, providers {names}"
            time.sleep(1)
        raise self.failed("compute", f"did not register with the API and placement in time (last seen: {seen})")

    def failed(self, name, why):
        logs = [os.path.join(self.cloud.logs, f"{name}-server.log")]
        if name == "rabbitmq":
            logs.append(os.path.join(self.rabbit_logs, "rabbit.log"))
        detail = "".join(f"\n--- last lines of {p}:\n{tail(p, 20)}" for p in logs if os.path.exists(p))
        return ComputeError(f"{name} {why}. Logs: {', '.join(logs)}{detail}")


def _since(updated_at, started):
    """True when a service record's updated_at (UTC, ISO) is later than the epoch time started."""
    if not updated_at:
        return False
    try:
        moment = datetime.datetime.fromisoformat(str(updated_at).replace("Z", "+00:00"))
    except ValueError:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp() > started


def cloud_bin(name):
    return os.path.join(os.path.dirname(sys.executable), name)
