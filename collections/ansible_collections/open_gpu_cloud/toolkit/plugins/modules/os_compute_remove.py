#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_compute_remove
short_description: Remove a decommissioned compute host from Nova and Placement
description:
  - Deletes the host's I(binary) service (Nova then deletes its compute node and resource provider tree), then every
    provider of that tree Placement still has, children first. A host with no service and no provider is left alone
    (C(outcome=absent)), so a second run changes nothing.
  - Refused before anything is written, naming what is in the way, while a server is on the host (its name, id,
    status and project), while Nova still reports the service up (its nova-compute runs and would register again),
    and while a provider of the host's tree holds an allocation (the consumers).
  - With I(down_timeout) the module first waits, up to that many seconds, for Nova to see a stopped service down.
  - In check mode nothing is changed; the diff names the service and the providers a real run deletes.
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
options:
  host:
    description: The compute host's name as Nova knows it (C(openstack compute service list)).
    type: str
    required: true
  binary:
    description: The service to delete.
    type: str
    default: nova-compute
  expect_down:
    description:
      - Whether a service Nova still reports up refuses the removal (its nova-compute would register again). C(false)
        for a look before the host's services are stopped, in check mode.
    type: bool
    default: true
  down_timeout:
    description:
      - Seconds to wait for Nova to report a stopped service down (Nova's C(service_down_time), 60 s by default,
        after the last heartbeat). C(0) does not wait.
    type: int
    default: 0
notes:
  - Needs admin rights (compute services, hypervisors, servers of every project, Placement).
"""

EXAMPLES = r"""
- name: Remove gpu-node-7 from Nova and Placement once its services are stopped
  open_gpu_cloud.toolkit.os_compute_remove:
    cloud: ogc-admin
    host: gpu-node-7
    down_timeout: 120
"""

RETURN = r"""
host:
  description: The host.
  returned: always
  type: str
outcome:
  description: C(removed) (the service and providers were deleted; in check mode, would be) or C(absent) (nothing of
    the host was left).
  returned: always
  type: str
service:
  description: The service as it was found (id, status, state, forced_down); null when there was none.
  returned: always
  type: dict
providers:
  description: The names of the host's resource providers found, children first.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import compute_removal
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(compute_removal)


if __name__ == "__main__":
    main()
