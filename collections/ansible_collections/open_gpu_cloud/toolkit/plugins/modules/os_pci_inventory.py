#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

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
  - Device by device, it also reads each device provider's traits and allocations, and what holds them. A consumer
    is alive when it is an existing server (one listing of the servers of all projects) or a migration in progress
    (Nova holds the source host's resources under the migration's UUID during a move; Nova's migration records are
    listed only when some consumer is not a server). Each device gets one C(state), the first that applies of
    C(orphaned) (allocated to a consumer that is neither), C(reserved) (inventory reserved by an operator, no
    one-time-use trait), C(waiting_return) (a one-time-use device, trait C(HW_PCI_ONE_TIME_USE), that Nova reserved
    after use, with no allocation left, until an operator sets C(reserved) back to 0), C(in_use) and C(free).
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_only]
options:
  resource_classes:
    description:
      - Resource classes counted as passthrough devices, as shell-style patterns (C(CUSTOM_GPU_*) is the class
        nova_pci_config names each GPU model with, C(CUSTOM_PCI_*) Nova's default for a device_spec without one).
    type: list
    elements: str
    default: ["CUSTOM_GPU_*", "CUSTOM_PCI_*", "PGPU", "VGPU"]
notes:
  - Needs admin rights (hypervisors, placement, the servers of all projects and the migrations are admin APIs).
  - Placement is read before the servers, so a server created meanwhile is alive; a server deleted meanwhile can
    make its device C(orphaned) for one run (check before removing an allocation).
"""

EXAMPLES = r"""
- name: What Nova counts
  open_gpu_cloud.toolkit.os_pci_inventory:
    cloud: gpu-cloud
  register: nova_pci
"""

RETURN = r"""
available:
  description: Whether Nova reports any PCI device to Placement.
  returned: always
  type: bool
hosts:
  description:
    - Per compute host (hypervisor name), per resource class, C(total) (less the reserved units, what Nova can give),
      C(used), C(reserved) and C(free) (each device's free units, never below 0).
  returned: always
  type: dict
  sample: {"gpu01": {"CUSTOM_PCI_10DE_1DB4": {"total": 3, "used": 1, "reserved": 1, "free": 2}}}
devices:
  description:
    - One item per device provider and passthrough resource class, by name.
    - C(name), C(uuid) (the provider's), C(host) (hypervisor name), C(address) (the PCI address in the name
      C(<host>_<ADDRESS>), lower case; null for a provider named otherwise), C(resource_class).
    - C(total) (less reserved), C(inventory_total), C(reserved), C(used), C(free).
    - C(traits) (sorted), C(one_time_use) (the trait C(HW_PCI_ONE_TIME_USE)).
    - C(consumers), its allocations, C([{uuid, kind, status}]), C(kind) C(server), C(migration) (in progress;
      C(status) Nova's) or C(none) (orphaned).
    - C(state), one of C(orphaned), C(reserved), C(waiting_return), C(in_use), C(free) (see the description).
  returned: always
  type: list
  elements: dict
  sample:
    - {"name": "gpu01_0000:27:00.0", "uuid": "5c3f0e1a-...", "host": "gpu01", "address": "0000:27:00.0",
       "resource_class": "CUSTOM_PCI_10DE_1DB4", "total": 0, "inventory_total": 1, "reserved": 1, "used": 0,
       "free": 0, "traits": ["COMPUTE_MANAGED_PCI_DEVICE", "HW_PCI_ONE_TIME_USE"], "one_time_use": true,
       "consumers": [], "state": "waiting_return"}
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

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import pci_inventory
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(pci_inventory)


if __name__ == "__main__":
    main()
