#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_access
short_description: Converge Keystone projects, allow-listed users and their role assignments
description:
  - Declares projects, and users from an allow-list (the seed kept a JSON list of the GitHub logins of
    the people who accepted the terms of service), each given a role on some projects.
  - Users created by this module carry I(managed_marker) as their description. A managed user dropped from
    the allow-list is disabled, never deleted (their resources and audit trail stay); put back on the list,
    the user is enabled again. Users without the marker (admin, service users, people added by hand) are never
    disabled; if such a user is on the allow-list it gets the role but is reported in C(unmanaged).
  - Reads projects, users and role assignments once (a few list calls), writes only the difference, over
    one openstacksdk connection. Check mode and diff use the same difference function.
  - Role assignments of a disabled user are kept (disabling is enough to stop access).
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
options:
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
notes:
  - Users get no password here; on a production cloud they log in through federation (e.g. GitHub via an
    identity provider); give test users passwords separately if needed.
  - Logins must look like GitHub logins (letters, digits, single hyphens, at most 39 characters); duplicates
    that differ only in case are rejected.
"""

EXAMPLES = r"""
- name: Projects and the users who accepted the terms of service
  open_gpu_cloud.toolkit.os_access:
    cloud: gpu-cloud
    projects:
      - {name: ci, description: GitHub Actions runners}
    allow_list_file: "{{ playbook_dir }}/../access/users.json"
    user_projects: [ci]
    user_role: member
    role_assignments:
      - {user: admin, project: ci, role: admin}
"""

RETURN = r"""
created:
  description: Projects and users created (C(project NAME), C(user LOGIN)).
  returned: always
  type: list
  elements: str
updated:
  description: Projects whose description or enabled flag changed.
  returned: always
  type: list
  elements: str
enabled:
  description: Managed users enabled again (back on the allow-list).
  returned: always
  type: list
  elements: str
disabled:
  description: Managed users disabled (dropped from the allow-list).
  returned: always
  type: list
  elements: str
assigned:
  description: Role assignments added, as C(ROLE to USER on PROJECT).
  returned: always
  type: list
  elements: str
unchanged:
  description: Projects and users that already matched.
  returned: always
  type: list
  elements: str
unmanaged:
  description: Allow-listed users that exist without the managed marker (never disabled by this module).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import access as cloud_access
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(cloud_access, mutually_exclusive=cloud_access.MUTUALLY_EXCLUSIVE)


if __name__ == "__main__":
    main()
