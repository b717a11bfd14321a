# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Nova's view of passthrough PCI devices: Placement's device providers, device by device and summed per host.

Used by os_pci_inventory, on the resource protocol of openstack_cloud with nothing to apply: read (the
hypervisors; Placement's providers, inventories and usages, and the device providers' traits and allocations; the
servers and migrations that hold them) -> make_plan (summarise(), pure, no action) -> report.

What each device is (``device_state``, pure; the health check's alerts come from it):

* ``orphaned``: allocated to a consumer that is neither a server nor an in-progress migration (Nova uses a
  migration's UUID as the consumer of the source host's resources during a move);
* ``reserved``: its inventory is reserved and it is not a one-time-use device: an operator's reservation;
* ``waiting_return``: a one-time-use device (trait ``HW_PCI_ONE_TIME_USE``), reserved by Nova after use, with no
  allocation left: it waits for an operator to return it (set ``reserved`` back to 0);
* ``in_use``: allocated to a server or an in-progress migration;
* ``free``.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Plan


ARGUMENT_SPEC = dict(
    resource_classes=dict(type="list", elements="str", default=["CUSTOM_GPU_*", "CUSTOM_PCI_*", "PGPU", "VGPU"]),
)
PLACEMENT_MICROVERSION = "1.14"  # parent/root provider fields (traits since 1.6, a provider's allocations since 1.0)
ONE_TIME_USE = "HW_PCI_ONE_TIME_USE"  # os-traits; Nova puts it on the provider of a one_time_use device
# Nova's migration statuses after which the migration holds nothing (nova/db/main/api.py
# migration_get_in_progress_by_host_and_node, which `nova-manage placement audit` asks too): any other status
# ('queued', 'running', 'finished' = waiting for a resize to be confirmed, ...) is a move in progress.
MIGRATION_ENDED = frozenset(("confirmed", "reverted", "error", "failed", "completed", "cancelled", "done"))
STATES = ("orphaned", "reserved", "waiting_return", "in_use", "free")  # device_state's answers, first wins


def matches(resource_class, patterns):
    """Whether a resource class is one of the passthrough classes (shell-style patterns)."""
    return any(fnmatch.fnmatchcase(resource_class, pattern) for pattern in patterns)


def consumer_kinds(consumers, servers, migrations):
    """Pure: what each consumer UUID is: {uuid: {kind, status}}, kind ``server`` (an existing server, any project),
    ``migration`` (a migration in progress, by its UUID) or ``none`` (neither: its allocations are orphaned).

    servers: the IDs of the existing servers; migrations: {uuid: {status, ...}} of Nova's migration records."""
    server_ids = set(servers)
    kinds = {}
    for uuid in sorted(set(consumers)):
        migration = (migrations or {}).get(uuid)
        if uuid in server_ids:
            kinds[uuid] = dict(kind="server", status=None)
        elif migration is not None and str(migration.get("status") or "").lower() not in MIGRATION_ENDED:
            kinds[uuid] = dict(kind="migration", status=migration.get("status"))
        else:
            kinds[uuid] = dict(kind="none", status=migration.get("status") if migration else None)
    return kinds


def device_state(reserved, one_time_use, consumers, used=0):
    """Pure: the one state of a device provider (see the module docstring), the first of STATES that applies.

    reserved: its inventory's ``reserved``; one_time_use: whether it has the trait HW_PCI_ONE_TIME_USE;
    consumers: [{uuid, kind}] of its allocations (kind from consumer_kinds); used: its usage (Placement's sum of
    the allocations: a device whose allocations were not read is in use when it is used)."""
    if any(c["kind"] == "none" for c in consumers):
        return "orphaned"
    if reserved > 0 and not one_time_use:
        return "reserved"
    busy = bool(consumers) or used > 0
    if reserved > 0 and not busy:
        return "waiting_return"
    return "in_use" if busy else "free"


def _address(name, host):
    """The PCI address in a device provider's name ``<hypervisor>_<ADDRESS>`` (Nova upper-cases it; given here in
    the kernel's lower case), or None for a provider named otherwise (the compute node itself, a vGPU's)."""
    prefix = host + "_"
    address = name[len(prefix):].lower() if name.startswith(prefix) else None
    return address if pci_address.is_address(address) else None


def summarise(providers, inventories, usages, patterns, traits=None, allocations=None, kinds=None):
    """Pure: the device providers and their sums per host.

    providers [{uuid, name, root_provider_uuid}]; inventories {uuid: {rc: {total, reserved, ...}}}; usages
    {uuid: {rc: n}}; traits {uuid: [trait]}; allocations {uuid: {consumer: {rc: n}}} (a provider's allocations by
    consumer); kinds: consumer_kinds() of every consumer (missing: ``none``).

    Returns (hosts, devices): hosts {host: {rc: {total, used, reserved, free}}}, where ``total`` is less the
    reserved units (what Nova can give) and ``free`` counts each device's free units (never below 0: a reserved
    one-time-use device in use counts 0); devices [{name, uuid, host, address, resource_class, total (less
    reserved), inventory_total, reserved, used, free, traits, one_time_use, consumers: [{uuid, kind, status}],
    state}], by name.
    """
    names = dict((p["uuid"], p["name"]) for p in providers)
    traits, allocations, kinds = traits or {}, allocations or {}, kinds or {}
    hosts, devices = {}, []
    for provider in sorted(providers, key=lambda p: p["name"]):
        uuid = provider["uuid"]
        inv = inventories.get(uuid) or {}
        for rc in sorted(inv):
            if not matches(rc, patterns):
                continue
            inventory_total = int(inv[rc].get("total", 0))
            reserved = int(inv[rc].get("reserved", 0))
            used = int((usages.get(uuid) or {}).get(rc, 0))
            free = max(inventory_total - reserved - used, 0)
            host = names.get(provider.get("root_provider_uuid") or uuid, provider["name"])
            own_traits = sorted(traits.get(uuid) or [])
            consumers = [dict(uuid=c, kind=kinds.get(c, {}).get("kind", "none"), status=kinds.get(c, {}).get("status"))
                         for c, resources in sorted((allocations.get(uuid) or {}).items())
                         if int((resources or {}).get(rc, 0)) > 0]
            one_time_use = ONE_TIME_USE in own_traits
            devices.append(dict(name=provider["name"], uuid=uuid, host=host, address=_address(provider["name"], host),
                                resource_class=rc, total=inventory_total - reserved, inventory_total=inventory_total,
                                reserved=reserved, used=used, free=free, traits=own_traits, one_time_use=one_time_use,
                                consumers=consumers, state=device_state(reserved, one_time_use, consumers, used)))
            slot = hosts.setdefault(host, {}).setdefault(rc, dict(total=0, used=0, reserved=0, free=0))
            slot["total"] += inventory_total - reserved
            slot["used"] += used
            slot["reserved"] += reserved
            slot["free"] += free
    return hosts, devices


NO_PLACEMENT = "the cloud's catalog has no placement endpoint, so Nova's PCI view is not available"
NOT_REPORTED = ("Nova reports no PCI devices to Placement: set [pci] report_in_placement = true on the computes and "
                "[filter_scheduler] pci_in_placement = true to count free/used GPUs through the API")


# --------------------------------------------------------------------------- the protocol's steps

def prepare(_params):
    """Nothing to check beyond the argument spec."""
    return None, None


def read(cm, params, _declared):
    """The hypervisors; Placement's providers with their inventories and usages, and the device providers' traits
    and allocations; then the consumers of those allocations that are servers (one listing of all projects) and,
    for the others, Nova's migration records (one listing, only when some consumer is not a server). Placement is
    read first, so a server created meanwhile is found; placement None without a placement endpoint."""
    conn = cm.conn
    hypervisors = [dict(name=h.name, state=getattr(h, "state", None), status=getattr(h, "status", None))
                   for h in cm.call("listing", "hypervisors", lambda: list(conn.compute.hypervisors()))]
    try:
        conn.placement.get_endpoint()
    except Exception:  # pylint: disable=broad-except
        return dict(hypervisors=hypervisors, placement=None)

    def get(path, key):
        response = cm.call("reading placement", path, conn.placement.get, path,
                           microversion=PLACEMENT_MICROVERSION)
        if response.status_code >= 400:
            cm.fail(f"reading placement {path} failed: HTTP {response.status_code}: {response.text[:300]}")
        return response.json()[key]

    providers = get("/resource_providers", "resource_providers")
    inventories, usages, traits, allocations = {}, {}, {}, {}
    for provider in providers:
        uuid = provider["uuid"]
        inventories[uuid] = get(f"/resource_providers/{uuid}/inventories", "inventories")
        usages[uuid] = get(f"/resource_providers/{uuid}/usages", "usages")
        if any(matches(rc, params["resource_classes"]) for rc in inventories[uuid]):
            traits[uuid] = get(f"/resource_providers/{uuid}/traits", "traits")
            allocations[uuid] = dict((consumer, (entry or {}).get("resources") or {}) for consumer, entry in
                                     get(f"/resource_providers/{uuid}/allocations", "allocations").items())
    consumers = set(c for by_consumer in allocations.values() for c in by_consumer)
    servers, migrations = [], {}
    if consumers:
        servers = sorted(consumers & set(cm.call("listing", "servers of all projects", lambda: [
            s.id for s in conn.compute.servers(details=False, all_projects=True)])))
    if consumers - set(servers):
        unknown = consumers - set(servers)
        migrations = dict((m["uuid"], m) for m in cm.call("listing", "migrations", lambda: [
            dict(uuid=getattr(m, "uuid", None), status=m.status, server_id=m.server_id,
                 migration_type=m.migration_type) for m in conn.compute.migrations()]) if m["uuid"] in unknown)
    return dict(hypervisors=hypervisors, placement=dict(providers=providers, inventories=inventories, usages=usages,
                                                        traits=traits, allocations=allocations),
                servers=servers, migrations=migrations)


def make_plan(params, _declared, state):
    """No action (the module only reads); the summary travels in Plan.details. Pure."""
    placement = state["placement"]
    if placement is None:
        return Plan(details=dict(hosts={}, devices=[], note=NO_PLACEMENT))
    allocations = placement.get("allocations") or {}
    kinds = consumer_kinds([c for by_consumer in allocations.values() for c in by_consumer],
                           state.get("servers") or [], state.get("migrations") or {})
    hosts, devices = summarise(placement["providers"], placement["inventories"], placement["usages"],
                               params["resource_classes"], placement.get("traits"), allocations, kinds)
    return Plan(details=dict(hosts=hosts, devices=devices, note="" if devices else NOT_REPORTED))


def report(_params, _declared, state, plan, _applied, _progress):
    """The module result: available, hosts, devices, hypervisors and note."""
    return dict(available=bool(plan.details["devices"]), hosts=plan.details["hosts"],
                devices=plan.details["devices"], hypervisors=state["hypervisors"], note=plan.details["note"])
