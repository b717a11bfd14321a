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
version_added: "0.1.0"
author: open-gpu-cloud contributors
extends_documentation_fragment: [ogc_openstack, ogc_attributes.check_only]
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

from ansible.module_utils import pci_inventory
from ansible.module_utils.openstack_cloud import run_module


def main():
    run_module(pci_inventory)


if __name__ == "__main__":
    main()
