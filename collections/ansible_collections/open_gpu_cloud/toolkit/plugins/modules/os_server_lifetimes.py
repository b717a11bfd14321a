#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: os_server_lifetimes
short_description: Shelve or delete servers older than their project's maximum age
description:
  - Lists every server of the cloud once (all projects), measures each one's age from its C(created_at),
    and shelves (default) or deletes the servers older than the maximum age of their project, over one
    openstacksdk connection.
  - The policy is a list of C({project, max_age_hours, action}) items plus a default for the projects it
    does not name (I(default_max_age_hours); null leaves those projects alone).
  - A server is exempt when its metadata says so, C(ogc:exempt=true) (key I(exempt_key)), or carries an
    expiry date, C(ogc:expires=2026-12-24) or C(ogc:expires=2026-12-24T18:00:00Z) (key I(expires_key));
    with an expiry date the date replaces the age rule, the server is left alone until that time and acted
    on after it. An expiry that cannot be parsed is reported in C(invalid_metadata) and the age rule
    applies.
  - Shelving is skipped for a server already shelved (C(SHELVED), C(SHELVED_OFFLOADED)), for a server
    with a task in progress (C(task_state) set), and for states Nova cannot shelve (C(ERROR), C(BUILD),
    ...); each is reported in C(not_acted) with the reason. Deleting applies to every state.
  - A delete that Nova's endpoint answers with "unavailable" (HTTP 502, 503 or 504, as kolla-ansible's HAProxy
    does while nova-api restarts) is sent again, at most twice, after 2 and then 4 seconds; a delete of a
    server already gone is no change, so repeating it is safe. Every other call, and every other error (an
    HTTP 500 included, Nova's own failure), fails the run at once.
  - The policy is validated before any API call (zero or negative age, unknown action, a project named
    twice); every project it names is then looked up before any server is read or touched, so an unknown
    project fails the run with nothing changed.
  - In check mode nothing is changed; C(would_act) lists what a real run would do. A real run fills
    C(acted) with what it did (and C(would_act) with the same servers).
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_only]
options:
  default_action:
    description: Action for policy items without their own I(action), and for the default.
    type: str
    choices: [shelve, delete]
    default: shelve
  default_max_age_hours:
    description:
      - Maximum age in hours of servers of projects the policy does not name. Null (the default) leaves
        them alone. Must be positive.
    type: float
  exempt_key:
    description:
      - Server metadata key that exempts a server when its value is C(true), C(yes), C(1) or C(on)
        (case-insensitive).
    type: str
    default: "ogc:exempt"
  expires_key:
    description:
      - Server metadata key holding an ISO 8601 date or date-time (UTC unless an offset is given) until
        which the server is kept, whatever its age; after it the policy's action applies.
    type: str
    default: "ogc:expires"
  now:
    description:
      - The time ages are measured at, ISO 8601 (UTC unless an offset is given). Default the current time.
      - Lets an operator preview a future run in check mode (C(now=2026-12-01T00:00:00Z)), and the
        integration tests age servers without waiting.
    type: str
  policies:
    description: Per-project maximum ages.
    type: list
    elements: dict
    default: []
    suboptions:
      action:
        description: What to do with servers older than I(max_age_hours) (default I(default_action)).
        type: str
        choices: [shelve, delete]
      max_age_hours:
        description: Maximum age in hours (may be fractional); must be positive.
        type: float
        required: true
      project:
        description: Project name or ID.
        type: str
        required: true
  timeout:
    description: Seconds to wait for the acted servers to reach their final state when I(wait=true).
    type: int
    default: 600
  wait:
    description:
      - Wait until every shelved server is C(SHELVED)/C(SHELVED_OFFLOADED) and every deleted one is gone.
      - The servers are acted on first and waited for together.
    type: bool
    default: true
notes:
  - Needs admin rights (listing servers of every project).
  - A shelved server keeps its disk and addresses but frees its host's CPUs, memory and GPUs; its owner
    brings it back with C(openstack server unshelve).
"""

EXAMPLES = r"""
- name: Shelve CI servers after 6 hours, research servers after a week, delete scratch servers after a day
  open_gpu_cloud.toolkit.os_server_lifetimes:
    cloud: gpu-cloud
    default_max_age_hours: 168
    policies:
      - {project: ci, max_age_hours: 6}
      - {project: scratch, max_age_hours: 24, action: delete}

- name: What would tomorrow's run do?
  open_gpu_cloud.toolkit.os_server_lifetimes:
    cloud: gpu-cloud
    default_max_age_hours: 168
    now: "2026-11-22T00:00:00Z"
  check_mode: true
  register: preview
"""

RETURN = r"""
acted:
  description: Servers acted on in this run (empty in check mode).
  returned: always
  type: list
  elements: dict
  sample:
    - {id: 5f0c..., name: ci-runner-1, project: ci, project_id: 8a1b..., status: SHELVED_OFFLOADED,
       action: shelve, age_hours: 7.5, max_age_hours: 6.0, created_at: "2026-11-21T10:00:00Z",
       reason: "older than 6 h (project ci)"}
would_act:
  description: Servers the policy selects, with the action (in check mode what a real run would do).
  returned: always
  type: list
  elements: dict
exempt:
  description: Servers past their maximum age (or with an expiry date) that the metadata keeps, with the reason.
  returned: always
  type: list
  elements: dict
not_acted:
  description:
    - Servers past their maximum age that were not acted on, with the reason (already shelved, task in
      progress, a state Nova cannot shelve). Not called C(skipped), which Ansible reserves.
  returned: always
  type: list
  elements: dict
invalid_metadata:
  description: Servers whose expiry metadata could not be parsed (the age rule applied to them).
  returned: always
  type: list
  elements: dict
checked:
  description: Number of servers looked at (in the projects the policy covers).
  returned: always
  type: int
now:
  description: The time ages were measured at (UTC, ISO 8601).
  returned: always
  type: str
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import server_lifetimes
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(server_lifetimes)


if __name__ == "__main__":
    main()
