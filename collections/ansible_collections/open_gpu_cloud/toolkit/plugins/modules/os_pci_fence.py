#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_pci_fence
short_description: Fence failed PCI devices (GPUs) in Placement so Nova places no new server on them
description:
  - A device with I(state=fenced) gets its provider's inventory C(reserved) = C(total)
    (C(PUT /resource_providers/{uuid}/inventories/{resource_class}), the generation read), so the scheduler gives it to
    no new server; Nova never overrides an inventory's C(reserved). The reason goes into a fence record on the
    control host, C(<records_dir>/<host>.json) (mode 0644, written atomically), with the address, provider,
    resource class, cause, reason, since and whether the fence wrote C(reserved).
  - A fence never frees or disturbs a device a server holds. A device allocated to a consumer is C(deferred) (with
    the reason); it is fenced by a later run once its server is gone. A device reserved already (an operator's
    reservation, a one-time-use device Nova reserved after use) gets the record only; Placement is left as it is.
  - A device with I(state=unfenced) is lifted only when a record of this module says it is fenced, for a cause in
    I(lift_causes); C(reserved) back to 0 (only where the fence set it) and the record removed. A device without a
    record (an operator's reservation, a one-time-use device waiting to be returned) is never touched.
  - A generation conflict (HTTP 409 C(placement.concurrent_update)) reads the device again, judges it again and
    writes again, at most I(conflict_retries) times.
  - With I(devices) empty it only reads the records (no API call) and returns them.
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
attributes:
  check_mode:
    description: Reads and judges as a real run does and writes nothing (neither Placement nor a record); the result
      lists what it would fence and lift, and the records as the run would leave them.
  diff_mode:
    description: Shows each fenced or lifted device's C(reserved) and fence (cause, reason) before and after.
options:
  conflict_retries:
    description: New tries after a generation conflict, per device (0 to 10).
    type: int
    default: 3
  devices:
    description: The devices and the state each should be in (the health play's C(gpu_fence_requests) filter).
    type: list
    elements: dict
    default: []
    suboptions:
      address:
        description: The device's PCI address (C(0000:44:00.0)).
        type: str
        required: true
      cause:
        description: Why it is fenced (required with I(state=fenced)).
        type: str
        choices: [gone_from_bus, not_on_vfio, reset_failed]
      host:
        description: The inventory host the device is on (the record's file name).
        type: str
        required: true
      name:
        description: The device's name in messages and results (its provider's name C(<hypervisor>_<ADDRESS>)).
        type: str
      reason:
        description: The reason an operator reads in the record and the alert (required with I(state=fenced)).
        type: str
      resource_class:
        description: Its resource class (C(CUSTOM_GPU_TESLA_V100)).
        type: str
        required: true
      state:
        description: C(fenced) (failed) or C(unfenced) (repaired; lifts only a fence of this module's).
        type: str
        required: true
        choices: [fenced, unfenced]
      uuid:
        description: Its resource provider's UUID.
        type: str
        required: true
  lift_causes:
    description: The causes whose fences I(state=unfenced) may lift (a failed reset is not seen on the bus, so the
      health play leaves it to the operator).
    type: list
    elements: str
    default: [gone_from_bus, not_on_vfio]
  records_dir:
    description: The directory of the fence records on the control host (absolute; made when missing).
    type: path
    required: true
notes:
  - Needs admin rights (Placement's inventories and allocations).
"""

EXAMPLES = r"""
- name: Fence a GPU that fell off the bus
  open_gpu_cloud.toolkit.os_pci_fence:
    records_dir: /var/lib/open-gpu-cloud/fences
    devices:
      - host: gpu01
        address: "0000:44:00.0"
        name: gpu01_0000:44:00.0
        uuid: 5c3f0e1a-0b7e-4bb1-9a53-5a4c4f0c2c11
        resource_class: CUSTOM_GPU_TESLA_V100
        state: fenced
        cause: gone_from_bus
        reason: "gpu01: GPU 0000:44:00.0 is gone from the PCI bus"
"""

RETURN = r"""
fenced:
  description: The names of the devices fenced by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
unfenced:
  description: The names of the devices whose fence this run lifted (in check mode, would lift).
  returned: always
  type: list
  elements: str
unchanged:
  description: The names of the devices already as asked.
  returned: always
  type: list
  elements: str
deferred:
  description:
    - Failed devices not fenced because a consumer holds them, C([{name, host, address, reason}]).
  returned: always
  type: list
  elements: dict
kept:
  description: Repaired devices whose fence this run may not lift (its cause is not in I(lift_causes)), with the reason.
  returned: always
  type: list
  elements: dict
absent:
  description: The names of failed devices Placement has no provider of (nothing to fence).
  returned: always
  type: list
  elements: str
devices:
  description:
    - Per device written, C(name), C(host), C(address), C(uuid), C(resource_class), C(action) (C(fence) or
      C(unfence)), C(reserved_before), C(reserved_after).
  returned: always
  type: list
  elements: dict
records:
  description:
    - Every host's fences after the run (in check mode, as the run would leave them), a list of entries per host, each
      C({address, provider, name, resource_class, cause, reason, since, reserved_by_fence}).
  returned: always
  type: dict
  sample:
    gpu01:
      - address: "0000:44:00.0"
        provider: 5c3f0e1a-0b7e-4bb1-9a53-5a4c4f0c2c11
        name: gpu01_0000:44:00.0
        resource_class: CUSTOM_GPU_TESLA_V100
        cause: gone_from_bus
        reason: "gpu01: GPU 0000:44:00.0 is gone from the PCI bus"
        since: "2026-11-28T06:40:00Z"
        reserved_by_fence: true
records_dir:
  description: The records' directory.
  returned: always
  type: str
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_fence
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(pci_fence)


if __name__ == "__main__":
    main()
