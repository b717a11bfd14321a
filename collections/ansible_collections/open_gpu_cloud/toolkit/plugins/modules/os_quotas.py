#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_quotas
short_description: Converge Nova's default quota class set and per-project compute quotas
description:
  - Sets the C(default) quota class set (what C(openstack quota set --class --instances 15 default) does),
    which every project without its own value inherits, and per-project compute quotas.
  - Reads the current values once per target, writes only the keys that differ (one call per target),
    over one openstacksdk connection. Keys that are not declared are left as they are.
  - C(-1) means unlimited. Any other negative value is rejected before any API call.
  - Compute (Nova) quotas only. Network (Neutron) and block-storage (Cinder) quotas are not handled by
    this module; unknown keys are rejected by the argument spec.
  - A project whose effective value already equals the declared one is not written, so it keeps following
    the class default, except when this run changes that class key (the project value is then written, so
    the declared value holds after the run). If the class is changed by other means later, the next run
    writes the project's own value.
  - Check mode and diff mode use the same difference function as a real run.
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.quotas, open_gpu_cloud.toolkit.attributes.check_and_diff]
notes:
  - Needs admin rights.
"""

EXAMPLES = r"""
- name: The seed's quota, as code
  open_gpu_cloud.toolkit.os_quotas:
    cloud: gpu-cloud
    default_class:
      instances: 15
    projects:
      - {project: conda-forge, instances: 30, cores: 120, ram: 491520}
      - {project: sandbox, instances: 2, cores: -1}
"""

RETURN = r"""
updated:
  description: Targets written (C(class default), C(project NAME)).
  returned: always
  type: list
  elements: str
  sample: ["class default", "project conda-forge"]
unchanged:
  description: Targets that already matched.
  returned: always
  type: list
  elements: str
changes:
  description: "Per target, each key that changed (or would change in check mode), as C(KEY: OLD -> NEW)."
  returned: always
  type: dict
  sample: {"class default": ["instances: 10 -> 15"]}
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import quotas as cloud_quotas
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(cloud_quotas)


if __name__ == "__main__":
    main()
