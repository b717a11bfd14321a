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
  - Each section takes exactly the options of the module of the same name (M(open_gpu_cloud.toolkit.os_access), M(open_gpu_cloud.toolkit.os_flavors),
    M(open_gpu_cloud.toolkit.os_quotas)), without the connection options, and behaves as that module does; a section left out is
    not managed. See those modules for every option.
  - Every section's declaration is checked before any API call; one bad section stops the run with
    nothing written and all the problems named.
  - A failure halfway names the section, the resource and the server's message, and lists what every
    section already did; a re-run finishes the job.
  - In check mode a project the access section would create counts as existing (and empty) for the
    flavors and quotas sections, so a check run on an empty cloud shows the whole plan.
version_added: "0.2.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
options:
  access:
    description:
      - Projects, allow-listed users and role assignments. Takes the options of M(open_gpu_cloud.toolkit.os_access)
        (C(projects), C(allow_list) or C(allow_list_file), C(user_projects), C(user_role),
        C(role_assignments), C(disable_dropped), C(user_domain), C(managed_marker)).
      - Converged first, so the flavors and quotas sections can name projects it creates.
    type: dict
    suboptions:
      allow_list:
        description:
        - Logins allowed to use the cloud. Mutually exclusive with I(allow_list_file).
        - When neither is given, users are not managed (nobody is disabled); an empty list disables every
          managed user.
        type: list
        elements: str
      allow_list_file:
        description: Path (on the host running the module) of a JSON file holding a list of logins.
        type: path
      disable_dropped:
        description: Disable managed users that are no longer on the allow-list.
        type: bool
        default: true
      managed_marker:
        description: Description given to the users this module creates; how it recognises them later.
        type: str
        default: managed by open-gpu-cloud allow-list
      projects:
        description: Projects that must exist.
        type: list
        elements: dict
        default: []
        suboptions:
          description:
            description: Project description.
            type: str
          domain:
            description: Domain ID of the project.
            type: str
            default: default
          enabled:
            description: Whether the project is enabled.
            type: bool
            default: true
          name:
            description: Project name.
            type: str
            required: true
      role_assignments:
        description: Further role assignments, e.g. operators with C(admin) on a project. The user must exist.
        type: list
        elements: dict
        default: []
        suboptions:
          project:
            description: Project name or ID.
            type: str
            required: true
          role:
            description: Role name or ID.
            type: str
            required: true
          user:
            description: User name (in I(user_domain)) or ID.
            type: str
            required: true
      user_domain:
        description: Domain ID the allow-listed users live in.
        type: str
        default: default
      user_projects:
        description: Projects on which every allow-listed user gets I(user_role).
        type: list
        elements: str
        default: []
      user_role:
        description: Role given to allow-listed users on I(user_projects).
        type: str
        default: member
  flavors:
    description:
      - Nova flavors. Takes the options of M(open_gpu_cloud.toolkit.os_flavors) (C(flavors), C(known_aliases), C(prune),
        C(prune_patterns), C(purge_extra_specs), C(recreate_on_change)).
    type: dict
    suboptions:
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
        - When given, every alias named in a C(pci_passthrough:alias) extra spec must be in this list (the
          playbook passes the aliases of every GPU host's passthrough plan). An empty list rejects every GPU
          flavor. Omit it to skip the check.
        type: list
        elements: str
      retired_aliases:
        description:
        - Aliases no GPU host provides any more, each with the hosts whose plans offered it before their GPUs were
          replaced by another model (the playbook passes C(passthrough_retired_alias_hosts) of the loaded plans). A
          flavor asking for one is refused naming those hosts. Used with I(known_aliases).
        type: dict
        default: {}
      prune:
        description:
        - Delete existing flavors that are not declared and whose name matches I(prune_patterns). Flavors
          the patterns exclude are never deleted.
        type: bool
        default: false
      prune_patterns:
        description: Shell-style patterns (fnmatch) of the flavor names that I(prune) may delete.
        type: list
        elements: str
        default:
        - '*'
      purge_extra_specs:
        description: Remove extra specs that exist on a declared flavor but are not declared.
        type: bool
        default: true
      recreate_on_change:
        description: Allow delete + create when an immutable field differs (the flavor ID changes).
        type: bool
        default: false
  quotas:
    description:
      - The default quota class set and project quotas. Takes the options of M(open_gpu_cloud.toolkit.os_quotas)
        (C(default_class), C(projects)).
    type: dict
    suboptions:
      default_class:
        description: Values of the C(default) quota class set. Omit it to leave the class alone.
        type: dict
        suboptions:
          cores: &id001
            description: Virtual CPUs.
            type: int
          injected_file_content_bytes: &id002
            description: Bytes per injected file.
            type: int
          injected_file_path_bytes: &id003
            description: Bytes per injected file path.
            type: int
          injected_files: &id004
            description: Injected files per server.
            type: int
          instances: &id005
            description: Servers.
            type: int
          key_pairs: &id006
            description: Key pairs per user.
            type: int
          metadata_items: &id007
            description: Metadata items per server.
            type: int
          ram: &id008
            description: Memory in MiB.
            type: int
          server_group_members: &id009
            description: Servers per server group.
            type: int
          server_groups: &id010
            description: Server groups.
            type: int
      projects:
        description: Per-project compute quotas.
        type: list
        elements: dict
        default: []
        suboptions:
          cores: *id001
          injected_file_content_bytes: *id002
          injected_file_path_bytes: *id003
          injected_files: *id004
          instances: *id005
          key_pairs: *id006
          metadata_items: *id007
          ram: *id008
          server_group_members: *id009
          server_groups: *id010
          project:
            description: Project name or ID (it must exist).
            type: str
            required: true
notes:
  - Needs admin rights.
  - Images are not a section (uploads take minutes and fail in their own ways); use M(open_gpu_cloud.toolkit.os_images).
"""

EXAMPLES = r"""
- name: Converge the whole declared cloud (one module run, one login)
  open_gpu_cloud.toolkit.os_cloud:
    cloud: gpu-cloud
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
  description: The section's result, as M(open_gpu_cloud.toolkit.os_access) returns it (created, updated, disabled, assigned, ...).
  returned: when the section is given
  type: dict
flavors:
  description: The section's result, as M(open_gpu_cloud.toolkit.os_flavors) returns it (created, updated, unchanged, changes, flavors).
  returned: when the section is given
  type: dict
quotas:
  description: The section's result, as M(open_gpu_cloud.toolkit.os_quotas) returns it (updated, unchanged, changes).
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
