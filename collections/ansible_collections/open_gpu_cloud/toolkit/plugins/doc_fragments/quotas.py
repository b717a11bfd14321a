# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The quota options of os_quotas (plugins/module_utils/cloud/quotas.py, ARGUMENT_SPEC): the default quota class set
and per-project quotas.

Each of the compute quota keys (cloud_quotas.QUOTA_KEYS) is described once, under default_class; projects
takes the same keys (the YAML merge key <<) beside project."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options:
  default_class:
    description: Values of the C(default) quota class set. Omit it to leave the class alone.
    type: dict
    suboptions: &quota_keys
      cores:
        description: Virtual CPUs.
        type: int
      injected_file_content_bytes:
        description: Bytes per injected file.
        type: int
      injected_file_path_bytes:
        description: Bytes per injected file path.
        type: int
      injected_files:
        description: Injected files per server.
        type: int
      instances:
        description: Servers.
        type: int
      key_pairs:
        description: Key pairs per user.
        type: int
      metadata_items:
        description: Metadata items per server.
        type: int
      ram:
        description: Memory in MiB.
        type: int
      server_group_members:
        description: Servers per server group.
        type: int
      server_groups:
        description: Server groups.
        type: int
  projects:
    description: Per-project compute quotas.
    type: list
    elements: dict
    default: []
    suboptions:
      project:
        description: Project name or ID (it must exist).
        type: str
        required: true
      <<: *quota_keys
"""
