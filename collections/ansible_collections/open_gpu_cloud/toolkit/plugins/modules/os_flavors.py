#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_flavors
short_description: Converge a declared list of Nova flavors (extra specs, access) in one run
description:
  - Reads every flavor once, computes the difference to the declared list, and applies only that
    difference, over one openstacksdk connection.
  - Extra specs and per-project access are updated in place, so the flavor ID never changes for them.
  - A change to an immutable field (vcpus, ram, disk, ephemeral, swap, is_public, id) needs the flavor
    deleted and created again (Nova gives it a new ID unless I(id) is declared). That happens only with
    I(recreate_on_change=true); otherwise the module fails before writing anything and names the fields.
    Running servers keep their own copy of the flavor, so a recreate does not touch them.
  - Every declared flavor is validated before any API call, extra-spec format included
    (C(pci_passthrough:alias) must be C(ALIAS:COUNT) with a positive integer count, several separated by
    commas); with I(known_aliases) every requested alias must be one a GPU host provides.
  - Flavors that are not declared are left alone unless I(prune=true).
  - Check mode and diff mode use the same difference function as a real run.
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
options:
  flavors:
    description: The flavors to converge, in the order they are applied.
    type: list
    elements: dict
    required: true
    suboptions:
      description:
        description: Free text shown to users (mutable, compute API microversion 2.55).
        type: str
      disk:
        description: Root disk in GiB (0 means the image's size).
        type: int
        default: 0
      ephemeral:
        description: Ephemeral disk in GiB.
        type: int
        default: 0
      extra_specs:
        description:
          - 'Extra specs, e.g. C({"pci_passthrough:alias": "tesla-v100:1", "hw:hide_hypervisor_id": "true"}).'
          - Values are sent as strings; booleans become C(true)/C(false).
          - With I(purge_extra_specs=true) (default) keys that are not declared are removed.
        type: dict
        default: {}
      id:
        description:
          - Flavor ID to use (the seed used C(--id) equal to the name). Omit it to let Nova pick a UUID.
          - Changing it on an existing flavor is an immutable change.
        type: str
      is_public:
        description: Whether every project can use the flavor. Immutable.
        type: bool
        default: true
      name:
        description: Flavor name (unique).
        type: str
        required: true
      projects:
        description: Projects (names or IDs) that get access to a private flavor (I(is_public=false)).
        type: list
        elements: str
        default: []
      ram:
        description: Memory in MiB.
        type: int
        required: true
      swap:
        description: Swap disk in MiB.
        type: int
        default: 0
      vcpus:
        description: Number of virtual CPUs.
        type: int
        required: true
  known_aliases:
    description:
      - When given, every alias named in a C(pci_passthrough:alias) extra spec must be in this list
        (the playbook passes the aliases of every GPU host's passthrough plan). An empty list rejects
        every GPU flavor. Omit it to skip the check.
    type: list
    elements: str
  retired_aliases:
    description:
      - Aliases no GPU host provides any more, each with the hosts whose plans offered it before their GPUs
        were replaced by another model (the playbook passes C(passthrough_retired_alias_hosts) of the loaded
        plans). A flavor asking for one is refused naming those hosts. Used with I(known_aliases).
    type: dict
    default: {}
  prune:
    description:
      - Delete existing flavors that are not declared and whose name matches I(prune_patterns).
        Flavors the patterns exclude are never deleted.
    type: bool
    default: false
  prune_patterns:
    description: Shell-style patterns (fnmatch) of the flavor names that I(prune) may delete.
    type: list
    elements: str
    default: ["*"]
  purge_extra_specs:
    description: Remove extra specs that exist on a declared flavor but are not declared.
    type: bool
    default: true
  recreate_on_change:
    description: Allow delete + create when an immutable field differs (the flavor ID changes).
    type: bool
    default: false
notes:
  - Needs admin rights (flavor management is admin-only by Nova's default policy).
"""

EXAMPLES = r"""
- name: Converge the GPU and CI flavors
  open_gpu_cloud.toolkit.os_flavors:
    cloud: gpu-cloud
    known_aliases: "{{ groups['gpu_hosts'] | map('extract', hostvars, ['passthrough_plan', 'aliases'])
                      | flatten | map(attribute='name') | unique }}"
    flavors:
      - {name: gpu_tiny, id: gpu_tiny, vcpus: 4, ram: 2048, disk: 20,
         extra_specs: {"pci_passthrough:alias": "tesla-v100:1"}}
      - {name: ci_medium, id: ci_medium, vcpus: 4, ram: 8192, disk: 60}
      - {name: team_only, vcpus: 2, ram: 4096, disk: 20, is_public: false, projects: [research]}

- name: Remove undeclared gpu_* flavors, resize one (new flavor ID)
  open_gpu_cloud.toolkit.os_flavors:
    cloud: gpu-cloud
    prune: true
    prune_patterns: ["gpu_*"]
    recreate_on_change: true
    flavors:
      - {name: gpu_tiny, id: gpu_tiny, vcpus: 4, ram: 4096, disk: 20,
         extra_specs: {"pci_passthrough:alias": "tesla-v100:1"}}
"""

RETURN = r"""
created:
  description: Names of the flavors created.
  returned: always
  type: list
  elements: str
  sample: [gpu_tiny]
updated:
  description: Names of the flavors changed in place (extra specs, access, description).
  returned: always
  type: list
  elements: str
recreated:
  description: Names of the flavors deleted and created again (immutable change, new ID).
  returned: always
  type: list
  elements: str
deleted:
  description: Names of the flavors removed by I(prune).
  returned: always
  type: list
  elements: str
unchanged:
  description: Names of the declared flavors that already matched.
  returned: always
  type: list
  elements: str
changes:
  description: What changed (or would change in check mode), per flavor name, in words.
  returned: always
  type: dict
  sample: {gpu_tiny: ["extra spec pci_passthrough:alias: 'tesla-v100:2' -> 'tesla-v100:1'"]}
flavors:
  description: The declared flavors as they are after the run (id is null for a flavor check mode would create).
  returned: success
  type: list
  elements: dict
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavors as cloud_flavors
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(cloud_flavors)


if __name__ == "__main__":
    main()
