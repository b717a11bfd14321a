#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: os_pci_inventory
short_description: Nova's view of passthrough PCI devices (GPUs), free and used, per compute host
description:
  - Read-only. Lists the hypervisors (compute API) and the Placement resource providers with their
    inventories and usages of PCI resource classes, over one openstacksdk connection.
  - Nova reports passthrough devices to Placement when the computes have C([pci] report_in_placement =
    true) (and the scheduler C([filter_scheduler] pci_in_placement = true)); each device is a child
    provider of its compute node, with a C(CUSTOM_PCI_<VENDOR>_<PRODUCT>) class (or the C(resource_class)
    of its device_spec). Without that setting Nova keeps the PCI pool in its own database only, which no
    API exposes (the old C(os-pci) extension does not exist in the v2.1 compute API of the 2026.1 release);
    the result then says so in C(note).
  - Totals are summed per compute host (the root provider's name, which is the hypervisor name).
version_added: "0.1.0"
author: open-gpu-cloud contributors
extends_documentation_fragment: [ogc_openstack, ogc_openstack.check_only]
options:
  resource_classes:
    description:
      - Resource classes counted as passthrough devices, as shell-style patterns.
    type: list
    elements: str
    default: ["CUSTOM_PCI_*", "PGPU", "VGPU"]
notes:
  - Needs admin rights (hypervisors and placement are admin APIs).
"""

EXAMPLES = r"""
- name: What Nova counts
  os_pci_inventory:
    cloud: ogc-test
  register: nova_pci
"""

RETURN = r"""
available:
  description: Whether Nova reports any PCI device to Placement.
  returned: always
  type: bool
hosts:
  description: Per compute host (hypervisor name), per resource class, C(total) and C(used).
  returned: always
  type: dict
  sample: {"gpu01": {"CUSTOM_PCI_10DE_1DB4": {"total": 4, "used": 1}}}
devices:
  description: One item per device provider, C(name), C(host), C(resource_class), C(total), C(used).
  returned: always
  type: list
  elements: dict
hypervisors:
  description: Hypervisors of the compute API with their C(state) and C(status).
  returned: always
  type: list
  elements: dict
note:
  description: Why nothing is reported, when nothing is.
  returned: always
  type: str
"""

import fnmatch

from ansible.module_utils.openstack_cloud import CloudModule

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


def main():
    cm = CloudModule(ARGUMENT_SPEC)
    conn = cm.conn
    hypervisors = [dict(name=h.name, state=getattr(h, "state", None), status=getattr(h, "status", None))
                   for h in cm.call("listing", "hypervisors", lambda: list(conn.compute.hypervisors()))]
    try:
        conn.placement.get_endpoint()
    except Exception:  # pylint: disable=broad-except
        cm.exit(False, available=False, hosts={}, devices=[], hypervisors=hypervisors,
                note="the cloud's catalog has no placement endpoint, so Nova's PCI view is not available")

    def get(path, key):
        response = cm.call("reading placement", path, conn.placement.get, path,
                           microversion=PLACEMENT_MICROVERSION)
        if response.status_code >= 400:
            cm.fail("reading placement %s failed: HTTP %s: %s" % (path, response.status_code, response.text[:300]))
        return response.json()[key]

    providers = get("/resource_providers", "resource_providers")
    inventories, usages = {}, {}
    for provider in providers:
        inventories[provider["uuid"]] = get("/resource_providers/%s/inventories" % provider["uuid"], "inventories")
        usages[provider["uuid"]] = get("/resource_providers/%s/usages" % provider["uuid"], "usages")
    hosts, devices = summarise(providers, inventories, usages, cm.params["resource_classes"])
    note = "" if devices else (
        "Nova reports no PCI devices to Placement: set [pci] report_in_placement = true on the computes and "
        "[filter_scheduler] pci_in_placement = true to count free/used GPUs through the API")
    cm.exit(False, available=bool(devices), hosts=hosts, devices=devices, hypervisors=hypervisors, note=note)


if __name__ == "__main__":
    main()
