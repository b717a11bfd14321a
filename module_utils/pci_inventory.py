# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Nova's view of passthrough PCI devices: Placement's device providers summed per compute host.

Used by os_pci_inventory, on the resource protocol of openstack_cloud with nothing to apply: read (the
hypervisors, then Placement's providers, inventories and usages) -> make_plan (summarise(), pure, no
action) -> report."""

from __future__ import annotations

import fnmatch

from ansible.module_utils.openstack_cloud import Plan


ARGUMENT_SPEC = dict(
    resource_classes=dict(type="list", elements="str", default=["CUSTOM_PCI_*", "PGPU", "VGPU"]),
)
PLACEMENT_MICROVERSION = "1.14"  # parent/root provider fields


def summarise(providers, inventories, usages, patterns):
    """Pure: providers [{uuid, name, root_provider_uuid}], inventories/usages {uuid: {rc: n or {total}}}."""
    names = dict((p["uuid"], p["name"]) for p in providers)
    hosts, devices = {}, []
    for provider in sorted(providers, key=lambda p: p["name"]):
        inv = inventories.get(provider["uuid"]) or {}
        for rc in sorted(inv):
            if not any(fnmatch.fnmatchcase(rc, pattern) for pattern in patterns):
                continue
            total = int(inv[rc].get("total", 0)) - int(inv[rc].get("reserved", 0))
            used = int((usages.get(provider["uuid"]) or {}).get(rc, 0))
            host = names.get(provider.get("root_provider_uuid") or provider["uuid"], provider["name"])
            devices.append(dict(name=provider["name"], host=host, resource_class=rc, total=total, used=used))
            slot = hosts.setdefault(host, {}).setdefault(rc, dict(total=0, used=0))
            slot["total"] += total
            slot["used"] += used
    return hosts, devices


NO_PLACEMENT = "the cloud's catalog has no placement endpoint, so Nova's PCI view is not available"
NOT_REPORTED = ("Nova reports no PCI devices to Placement: set [pci] report_in_placement = true on the computes and "
                "[filter_scheduler] pci_in_placement = true to count free/used GPUs through the API")


# --------------------------------------------------------------------------- the protocol's steps

def prepare(_params):
    """Nothing to check beyond the argument spec."""
    return None, None


def read(cm, _params, _declared):
    """The hypervisors, and Placement's providers with their inventories and usages (None without a
    placement endpoint)."""
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
    inventories, usages = {}, {}
    for provider in providers:
        inventories[provider["uuid"]] = get(f"/resource_providers/{provider['uuid']}/inventories", "inventories")
        usages[provider["uuid"]] = get(f"/resource_providers/{provider['uuid']}/usages", "usages")
    return dict(hypervisors=hypervisors, placement=dict(providers=providers, inventories=inventories,
                                                        usages=usages))


def make_plan(params, _declared, state):
    """No action (the module only reads); the summary travels in Plan.details. Pure."""
    placement = state["placement"]
    if placement is None:
        return Plan(details=dict(hosts={}, devices=[], note=NO_PLACEMENT))
    hosts, devices = summarise(placement["providers"], placement["inventories"], placement["usages"],
                               params["resource_classes"])
    return Plan(details=dict(hosts=hosts, devices=devices, note="" if devices else NOT_REPORTED))


def report(_params, _declared, state, plan, _applied, _progress):
    """The module result: available, hosts, devices, hypervisors and note."""
    return dict(available=bool(plan.details["devices"]), hosts=plan.details["hosts"],
                devices=plan.details["devices"], hypervisors=state["hypervisors"], note=plan.details["note"])
