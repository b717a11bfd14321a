#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_pci_return
short_description: Return one-time-use PCI devices (GPUs) to Nova through Placement
description:
  - Nova (2026.1) reserves the Placement inventory of a one-time-use device (a C(device_spec) with
    C(one_time_use) true; its provider carries the trait C(HW_PCI_ONE_TIME_USE)) once a server got it, and keeps it
    reserved after the server is gone, until an operator returns it. This module returns each of I(devices); it reads
    the provider's inventory of the resource class and puts it back with C(reserved) 0 and the same generation,
    total and other fields (C(PUT /resource_providers/{uuid}/inventories/{resource_class})).
  - A device whose C(reserved) is 0 already is C(unchanged). A device whose provider lacks the trait
    C(HW_PCI_ONE_TIME_USE) (an operator's reservation) or that is allocated to a consumer (in use) is refused, with
    every refused device named, before anything is written.
  - A generation conflict (HTTP 409 C(placement.concurrent_update), Nova's periodic update wrote the provider
    meanwhile) reads the device again, judges it again and writes again, at most I(conflict_retries) times.
  - It does not reset the device; playbooks/return_gpus.yml resets each on its host first (M(open_gpu_cloud.toolkit.pci_device_reset)).
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
attributes:
  check_mode:
    description: Reads and judges as a real run does and writes nothing; the result lists the devices it would return.
  diff_mode:
    description: Shows each returned device's C(reserved) before and after (1 -> 0).
options:
  conflict_retries:
    description: New tries after a generation conflict, per device (0 to 10).
    type: int
    default: 3
  devices:
    description: The devices to return, as os_pci_inventory lists them.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The device's name in messages and results (its provider's name C(<hypervisor>_<ADDRESS>)).
        type: str
      resource_class:
        description: Its resource class (C(CUSTOM_PCI_10DE_1DB4)).
        type: str
        required: true
      uuid:
        description: Its resource provider's UUID.
        type: str
        required: true
notes:
  - Needs admin rights (Placement's inventories, traits and allocations).
"""

EXAMPLES = r"""
- name: Return a one-time-use GPU once it is clean
  open_gpu_cloud.toolkit.os_pci_return:
    devices:
      - name: gpu01_0000:27:00.0
        uuid: 5c3f0e1a-0b7e-4bb1-9a53-5a4c4f0c2c11
        resource_class: CUSTOM_PCI_10DE_1DB4
"""

RETURN = r"""
returned:
  description: The names of the devices returned (in check mode, that would be).
  returned: always
  type: list
  elements: str
unchanged:
  description: The names of the devices whose C(reserved) was 0 already.
  returned: always
  type: list
  elements: str
devices:
  description: Per device C(name), C(uuid), C(resource_class), C(reserved_before) and C(reserved_after).
  returned: always
  type: list
  elements: dict
  sample:
    - {"name": "gpu01_0000:27:00.0", "uuid": "5c3f0e1a-...", "resource_class": "CUSTOM_PCI_10DE_1DB4",
       "reserved_before": 1, "reserved_after": 0}
refused:
  description: The devices refused, C([{name, uuid, reason}]) (the module fails and writes nothing).
  returned: on a refusal
  type: list
  elements: dict
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_return
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(pci_return)


if __name__ == "__main__":
    main()
