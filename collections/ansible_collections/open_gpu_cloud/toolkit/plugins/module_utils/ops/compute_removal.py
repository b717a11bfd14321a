# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Removing a GPU host from Nova and Placement (playbooks/remove_host.yml, plugins/modules/os_compute_remove.py).

What a removed host leaves in the cloud: its ``nova-compute`` service record, the compute node behind it and, in
Placement, the compute node's resource provider with its children (one per PCI device with PCI in Placement).
Nova's own ``DELETE /os-services/{id}`` removes the compute node and deletes its provider tree, children first
(``SchedulerReportClient.delete_resource_provider``), and refuses a service that still hosts instances. It has two
gaps this module closes: it deletes the service of a nova-compute that still runs (which then registers again), and
it passes over a provider Placement keeps (``ResourceProviderInUse`` is ignored, "for backward compatibility").

So, pure (``judge``): the removal is refused, before anything is written and naming what is in the way, while a
server is on the host (any state but shelved-offloaded: its name, id, status and project; one whose deletion its
nova-compute has not finished, status DELETED, with its own advice), while Nova still reports
the service up (its nova-compute runs: stop it first), and while a provider of the host's tree holds an allocation
(the consumers). Otherwise the plan deletes the service, then every provider of the tree that is still there,
children first (a 404 means Nova already did). A host with no service and no provider is already removed: nothing
to do, so a second run changes nothing.

Providers are found from the compute node (the hypervisor's id is its provider's uuid since compute API 2.53) and,
for a host whose service is already gone, by the root provider's name (the hypervisor's host name).
"""

from __future__ import annotations

import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova.placement_api import placement_get
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import compute_drain

PLACEMENT_MICROVERSION = "1.14"  # in_tree and parent_provider_uuid
HYPERVISORS_MICROVERSION = "2.87"  # hypervisor ids are the compute nodes' uuids (2.53), no uptime in the list (2.88)
GUIDE = 'docs/operator-guide.md, "Removing a GPU host"'

ARGUMENT_SPEC = dict(
    host=dict(type="str", required=True),
    binary=dict(type="str", default="nova-compute"),
    down_timeout=dict(type="int", default=0),
    expect_down=dict(type="bool", default=True),
)


# --------------------------------------------------------------------------- pure parts

def validate(params):
    """Errors of the module's parameters; no API call."""
    errors = []
    if not str(params.get("host") or "").strip():
        errors.append("host must be the compute host's name as Nova knows it (openstack compute service list)")
    if params.get("down_timeout") is None or params["down_timeout"] < 0:
        errors.append(f"down_timeout={params.get('down_timeout')} must be 0 (do not wait) or a positive number of "
                      "seconds to wait for Nova to see the stopped service down")
    return errors


def children_first(providers):
    """The providers of one tree (dicts with uuid, parent) ordered so that every child comes before its parent."""
    by_parent = {}
    for provider in providers:
        by_parent.setdefault(provider.get("parent"), []).append(provider)
    known = {p["uuid"] for p in providers}
    roots = [p for p in providers if p.get("parent") not in known]
    ordered = []

    def visit(provider):
        for child in sorted(by_parent.get(provider["uuid"], []), key=lambda p: p["name"]):
            visit(child)
        ordered.append(provider)

    for root in sorted(roots, key=lambda p: p["name"]):
        visit(root)
    return ordered


def describe_servers(servers):
    """'name (id, STATUS, project P), ...' for messages."""
    return ", ".join(f"{s['name']} ({s['id']}, {s['status']}, project {s.get('project_id') or '?'})"
                     for s in servers)


def servers_problem(host, binary, servers):
    """The refusal for servers on the host. A server whose status is DELETED is one whose deletion its nova-compute
    has not finished (Nova's compute marks it deleted, then frees its allocation, then destroys its record): it still
    counts for Nova, which refuses to delete the service, and it gets its own advice."""
    live = [s for s in servers if s["status"] != "DELETED"]
    unfinished = [s for s in servers if s["status"] == "DELETED"]
    said = []
    if live:
        said.append(f"{len(live)} server{'s' if len(live) != 1 else ''} still on it: {describe_servers(live)}. "
                    f"Nova refuses to delete the {binary} service of a host that holds servers, and a GPU server "
                    "cannot be live-migrated: delete them, or shelve them (shelve-offload frees the host), or "
                    "cold-migrate them to another GPU host, then run again")
    if unfinished:
        said.append(f"{len(unfinished)} deleted server{'s' if len(unfinished) != 1 else ''} whose deletion its "
                    f"{binary} has not finished: {describe_servers(unfinished)}. Nova counts them until then: wait "
                    f"until 'openstack server list --all-projects --host {host}' shows none, then run again; if the "
                    f"host's {binary} was stopped before it finished, start it again (it finishes the deletion as it "
                    "starts), or, once Nova sees the service down, delete each again ('openstack server delete <id>': "
                    "Nova then finishes it in its database)")
    return f"{host}: " + "; and ".join(said) + f". Nothing was changed ({GUIDE})"


def judge(host, binary, service, servers, providers, expect_down=True):
    """(problem, actions) for removing HOST: problem is None or the message that refuses the removal.

    service: None or {id, status, state, forced_down}; servers: the server dicts on the host (server_view);
    providers: [{uuid, name, parent, consumers}] of the host's provider tree; expect_down false: a service still up
    is no reason to refuse (a look before its services are stopped). Pure.
    """
    if servers:
        return servers_problem(host, binary, servers), []
    if expect_down and service is not None and service.get("state") == "up" and not service.get("forced_down"):
        return (f"{host}: Nova still reports its {binary} service up (it sent a heartbeat within Nova's "
                "service_down_time): a service deleted while its nova-compute runs registers again. Stop the host's "
                "services first (with kolla_deploy_mode full this playbook runs kolla-ansible stop for the host; "
                f"otherwise stop the nova_compute container on {host}), then run again; Nova sees it down after "
                f"service_down_time (60 s by default). Nothing was changed ({GUIDE})"), []
    held = [p for p in providers if p.get("consumers")]
    if held:
        where = "; ".join(f"{p['name']} ({p['uuid']}): {', '.join(p['consumers'])}" for p in held)
        return (f"{host}: Placement still holds allocations against its resource providers, consumers {where}. "
                "A consumer that is a server or a migration is shown by 'openstack server show <id>' or "
                "'openstack server migration list'; one that is neither is a leftover "
                f"('openstack resource provider allocation delete <consumer>'). Nothing was changed ({GUIDE})"), []
    actions = []
    if service is not None:
        actions.append(Action("deleted", f"{binary} service of {host}", dict(kind="service", id=service["id"])))
    for provider in children_first(providers):
        actions.append(Action("deleted", f"resource provider {provider['name']}",
                              dict(kind="provider", uuid=provider["uuid"], name=provider["name"])))
    return None, actions


def diff_sides(host, binary, service, providers):
    """(before, after) of what the removal deletes: the service and the providers' names."""
    before = {}
    if service is not None:
        before[f"{binary} service"] = f"{host} (id {service['id']}, {service.get('status')}, {service.get('state')})"
    if providers:
        before["resource providers"] = [p["name"] for p in children_first(providers)]
    return before, {}


# --------------------------------------------------------------------------- API

def _placement_get(cm, path):
    """One GET of Placement: the body, or None on a 404."""
    return placement_get(cm, path, PLACEMENT_MICROVERSION, missing=None)


def _service_view(service):
    return dict(id=service.id, status=service.status, state=getattr(service, "state", None),
                forced_down=bool(getattr(service, "is_forced_down", False) or getattr(service, "forced_down", False)))


def wait_down(cm, host, binary, service, timeout):
    """Poll the service until Nova reports it down (or forced down), up to TIMEOUT seconds; its last view."""
    view = _service_view(service)
    deadline = time.time() + timeout
    while view["state"] == "up" and not view["forced_down"] and time.time() < deadline:
        time.sleep(min(5.0, max(0.5, deadline - time.time())))
        service = compute_drain.find_service(cm, host, binary)
        if service is None:
            return None
        view = _service_view(service)
    return view


def root_providers(cm, host):
    """The host's compute node providers: from Nova's hypervisors of the host (id = provider uuid), else (the
    service is gone already) the provider named after the host."""
    # Compute API 2.87: the detailed list names each hypervisor's service and carries no uptime; from 2.88 Nova asks
    # every compute it still believes up for its uptime over RPC, which fails (HTTP 500) for one just stopped.
    response = cm.call("listing", f"hypervisors of {host}", cm.conn.compute.get, "/os-hypervisors/detail",
                       microversion=HYPERVISORS_MICROVERSION, raise_exc=False)
    if response.status_code >= 400:
        cm.fail(f"listing hypervisors of {host} failed: HTTP {response.status_code}: {response.text[:300]}",
                failed_item=f"hypervisors of {host}")
    uuids = [h["id"] for h in response.json().get("hypervisors", [])
             if (h.get("service") or {}).get("host") == host]
    if uuids:
        return uuids
    found = _placement_get(cm, f"/resource_providers?name={host}") or {}
    return [p["uuid"] for p in found.get("resource_providers", [])]


def tree_providers(cm, roots):
    """[{uuid, name, parent, consumers}] of every provider in the trees of ROOTS (those Placement has)."""
    out = {}
    for root in roots:
        found = _placement_get(cm, f"/resource_providers?in_tree={root}") or {}
        for provider in found.get("resource_providers", []):
            allocations = (_placement_get(cm, f"/resource_providers/{provider['uuid']}/allocations") or {}).get(
                "allocations", {})
            out[provider["uuid"]] = dict(uuid=provider["uuid"], name=provider["name"],
                                         parent=provider.get("parent_provider_uuid"), consumers=sorted(allocations))
    return list(out.values())


# --------------------------------------------------------------------------- the resource protocol

def prepare(params):
    errors = validate(params)
    if errors:
        return None, dict(msg="invalid parameters, nothing was read or changed: " + "; ".join(errors), errors=errors)
    return {}, None


def read(cm, params, _declared):
    """The service (after waiting up to down_timeout for it to be down), the servers on the host, its providers."""
    host, binary = params["host"], params["binary"]
    service = compute_drain.find_service(cm, host, binary)
    view = None
    if service is not None:
        view = wait_down(cm, host, binary, service, params["down_timeout"]) if params["down_timeout"] \
            else _service_view(service)
    servers = compute_drain.host_servers(cm, host)
    providers = tree_providers(cm, root_providers(cm, host))
    return dict(service=view, servers=servers, providers=providers)


def make_plan(params, _declared, state):
    host, binary = params["host"], params["binary"]
    problem, actions = judge(host, binary, state["service"], state["servers"], state["providers"],
                             params["expect_down"])
    if problem:
        return Plan(problem=dict(msg=problem, host=host, servers=state["servers"]))
    before, after = diff_sides(host, binary, state["service"], state["providers"])
    outcome = "removed" if actions else "absent"
    return Plan(actions, before=before, after=after, details=dict(outcome=outcome))


def apply(cm, params, _state, action, _applied):
    """Delete the service (Nova deletes its compute node and provider tree), or a provider still there."""
    data = action.data
    if data["kind"] == "service":
        cm.call("deleting", action.item, cm.conn.compute.delete_service, data["id"], ignore_missing=True)
        return
    path = f"/resource_providers/{data['uuid']}"
    response = cm.call("deleting", action.item, cm.conn.placement.delete, path, microversion=PLACEMENT_MICROVERSION,
                       raise_exc=False)
    if response.status_code not in (204, 404):  # 404: Nova deleted it with the service
        cm.fail(f"deleting {action.item} failed: HTTP {response.status_code}: {response.text[:300]}",
                failed_item=action.item)


def finish(cm, params, state, _applied):
    """A real removal ends with nothing of the host left in Nova or Placement; otherwise it fails naming it."""
    host, binary = params["host"], params["binary"]
    if not state["service"] and not state["providers"]:
        return
    left = []
    if compute_drain.find_service(cm, host, binary) is not None:
        left.append(f"the {binary} service")
    for provider in state["providers"]:
        if _placement_get(cm, f"/resource_providers/{provider['uuid']}") is not None:
            left.append(f"resource provider {provider['name']}")
    if left:
        cm.fail(f"{host}: still there after the removal: {', '.join(left)}. A nova-compute that still runs "
                f"registers again: stop it and run again ({GUIDE})", host=host)


def report(params, _declared, state, plan, _applied, _progress):
    service = state["service"]
    return dict(host=params["host"], outcome=plan.details.get("outcome", "absent"),
                service=service, providers=[p["name"] for p in children_first(state["providers"])])
