#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_compute_drain
short_description: Drain a nova-compute host before a reboot, and enable it again after
description:
  - PCI-passthrough instances cannot be live-migrated, so rebooting their host kills them. With
    I(state=drained) this module disables the host's C(nova-compute) service (nothing new is scheduled
    there) with a I(reason) naming the change, then waits until no instance runs on the host, up to
    I(timeout) seconds.
  - An instance runs on the host unless it is C(SHUTOFF), C(SHELVED), C(SHELVED_OFFLOADED) or deleted with
    no task in progress; C(ERROR), C(BUILD), C(PAUSED), C(SUSPENDED) and the rest count as running.
  - I(mode=shelve) shelves the running instances first, except those whose metadata exempts them (the rule
    of M(open_gpu_cloud.toolkit.os_server_lifetimes), C(ogc:exempt=true) or an C(ogc:expires) date still ahead); those keep blocking.
    I(mode=skip) leaves a busy host alone (the service is not disabled, or is enabled again when an instance
    landed meanwhile) and reports C(outcome=skipped).
  - When the wait times out the module fails naming the instances; the service stays disabled, so a later
    run finds the host emptier.
  - With I(state=enabled) it enables the service again, but only when this module disabled it (its disabled
    reason starts with I(owner_prefix)); a service an operator disabled for another reason stays disabled
    (C(outcome=left_disabled)).
  - A host that Nova does not know as a compute (no I(binary) service on it yet) is left alone
    (C(is_compute=false), C(outcome=not_compute)).
  - Every parameter is checked before any API call; a Nova (or Keystone) that cannot be reached fails the
    module before anything is disabled.
  - In check mode nothing is changed; the result lists the instances that keep the host busy (C(blocking))
    and those a real run would shelve (C(would_shelve)).
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_only]
options:
  binary:
    description: The service to disable.
    type: str
    default: nova-compute
  exempt_key:
    description: Server metadata key that exempts a server from shelving when C(true), C(yes), C(1) or C(on).
    type: str
    default: "ogc:exempt"
  expires_key:
    description: Server metadata key with an ISO 8601 date until which a server is not shelved.
    type: str
    default: "ogc:expires"
  host:
    description: The compute host's name as Nova knows it (C(openstack compute service list)).
    type: str
    required: true
  mode:
    description:
      - What to do with instances running on the host (I(state=drained)).
      - C(wait) waits for them to end; C(shelve) shelves them (minus the exempt ones), then waits;
        C(skip) leaves a busy host alone and reports it.
    type: str
    choices: [wait, shelve, skip]
    default: wait
  now:
    description: The time I(expires_key) dates are compared with, ISO 8601 (default the current time).
    type: str
  owner_prefix:
    description:
      - How this module recognises a service it disabled, as the start of the disabled reason. I(reason)
        must start with it.
    type: str
    default: "open-gpu-cloud:"
  reason:
    description: The disabled reason recorded on the service (shown by C(openstack compute service list --long)).
    type: str
    default: "open-gpu-cloud: host reboot"
  state:
    description: C(drained) disables the service and waits for the host to be idle; C(enabled) enables it again.
    type: str
    choices: [drained, enabled]
    default: drained
  timeout:
    description: Seconds to wait for the host to be idle (I(state=drained)).
    type: int
    default: 1800
notes:
  - Needs admin rights (compute services, servers of every project).
"""

EXAMPLES = r"""
- name: Drain gpu-node-3 before rebooting it, shelving what runs there
  open_gpu_cloud.toolkit.os_compute_drain:
    cloud: ogc-admin
    host: gpu-node-3
    mode: shelve
    reason: "open-gpu-cloud: reboot for PCI passthrough (kernel command line lacks iommu=pt)"
    timeout: 3600

- name: After a good verification, take instances again
  open_gpu_cloud.toolkit.os_compute_drain:
    cloud: ogc-admin
    host: gpu-node-3
    state: enabled
"""

RETURN = r"""
host:
  description: The host.
  returned: always
  type: str
is_compute:
  description: Whether Nova has a I(binary) service on the host.
  returned: always
  type: bool
outcome:
  description:
    - C(drained) (idle and disabled), C(would_drain) (check mode, instances still run), C(skipped)
      (I(mode=skip) and busy), C(not_compute), C(enabled), C(left_disabled) (disabled by someone else).
  returned: always
  type: str
service:
  description: The service as it is after the run (id, host, binary, status, state, disabled_reason); null when none.
  returned: always
  type: dict
foreign_reason:
  description: The disabled reason of a service disabled by someone else (kept as it is).
  returned: when the service was disabled with a reason not starting with I(owner_prefix)
  type: str
blocking:
  description: Instances that kept the host busy when the drain began (it waited for them, or skipped the host).
  returned: when state is drained
  type: list
  elements: dict
would_shelve:
  description: Instances the drain shelves (in check mode, would shelve).
  returned: when state is drained
  type: list
  elements: dict
shelved:
  description: Instances shelved in this run.
  returned: when state is drained
  type: list
  elements: dict
exempt:
  description: Running instances whose metadata exempts them from shelving, with the reason (they block).
  returned: when state is drained
  type: list
  elements: dict
waited_s:
  description: Seconds spent waiting for the host to be idle.
  returned: when state is drained
  type: float
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import compute_drain
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(compute_drain)


if __name__ == "__main__":
    main()
