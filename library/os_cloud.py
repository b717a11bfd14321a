#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_cloud
short_description: Converge access, flavors and quotas of a cloud in one module run and one login
description:
  - Declares the cloud's projects, users and role assignments, its flavors, and its quotas, in that order,
    over ONE openstacksdk connection, so a whole restore or a no-op re-run pays for one module process,
    one openstacksdk import and one Keystone login instead of one per kind of resource.
  - Each section takes exactly the options of the module of the same name (M(os_access), M(os_flavors),
    M(os_quotas)), without the connection options, and behaves as that module does; a section left out is
    not managed. See those modules for every option.
  - Every section's declaration is checked before any API call; one bad section stops the run with
    nothing written and all the problems named.
  - A failure halfway names the section, the resource and the server's message, and lists what every
    section already did; a re-run finishes the job.
  - In check mode a project the access section would create counts as existing (and empty) for the
    flavors and quotas sections, so a check run on an empty cloud shows the whole plan.
version_added: "0.2.0"
author: open-gpu-cloud contributors
extends_documentation_fragment: [ogc_openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
options:
  access:
    description:
      - Projects, allow-listed users and role assignments. Takes the options of M(os_access)
        (C(projects), C(allow_list) or C(allow_list_file), C(user_projects), C(user_role),
        C(role_assignments), C(disable_dropped), C(user_domain), C(managed_marker)).
      - Converged first, so the flavors and quotas sections can name projects it creates.
    type: dict
  flavors:
    description:
      - Nova flavors. Takes the options of M(os_flavors) (C(flavors), C(known_aliases), C(prune),
        C(prune_patterns), C(purge_extra_specs), C(recreate_on_change)).
    type: dict
  quotas:
    description:
      - The default quota class set and project quotas. Takes the options of M(os_quotas)
        (C(default_class), C(projects)).
    type: dict
notes:
  - Needs admin rights.
  - Images are not a section (uploads take minutes and fail in their own ways); use M(os_images).
"""

EXAMPLES = r"""
- name: Converge the whole declared cloud (one module run, one login)
  os_cloud:
    cloud: ogc-test
    access:
      projects: [{name: conda-forge, description: GPU CI}]
      allow_list_file: /etc/open-gpu-cloud/allowed-logins.json
      user_projects: [conda-forge]
    flavors:
      known_aliases: [tesla-v100]
      flavors:
        - {name: gpu_tiny, id: gpu_tiny, vcpus: 4, ram: 16384, disk: 60,
           extra_specs: {"pci_passthrough:alias": "tesla-v100:1", "hw:hide_hypervisor_id": true}}
    quotas:
      default_class: {instances: 15}
      projects: [{project: conda-forge, instances: 6, cores: 48}]
"""

RETURN = r"""
access:
  description: The section's result, as M(os_access) returns it (created, updated, disabled, assigned, ...).
  returned: when the section is given
  type: dict
flavors:
  description: The section's result, as M(os_flavors) returns it (created, updated, unchanged, changes, flavors).
  returned: when the section is given
  type: dict
quotas:
  description: The section's result, as M(os_quotas) returns it (updated, unchanged, changes).
  returned: when the section is given
  type: dict
sections:
  description: The sections converged, in order.
  returned: always
  type: list
  elements: str
  sample: [access, flavors, quotas]
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_sections
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import access as cloud_access
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavors as cloud_flavors
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import quotas as cloud_quotas

# Order matters: projects first (flavor access and quotas name them), then flavors, then quotas.
SECTIONS = (("access", cloud_access), ("flavors", cloud_flavors), ("quotas", cloud_quotas))

ARGUMENT_SPEC = dict(
    access=dict(type="dict", options=cloud_access.ARGUMENT_SPEC,
                mutually_exclusive=cloud_access.MUTUALLY_EXCLUSIVE),
    flavors=dict(type="dict", options=cloud_flavors.ARGUMENT_SPEC),
    quotas=dict(type="dict", options=cloud_quotas.ARGUMENT_SPEC),
)


def main():
    run_sections(SECTIONS, ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
