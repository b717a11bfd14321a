#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
  - The policy is validated before any API call (zero or negative age, unknown action, a project named
    twice); every project it names is then looked up before any server is read or touched, so an unknown
    project fails the run with nothing changed.
  - In check mode nothing is changed; C(would_act) lists what a real run would do. A real run fills
    C(acted) with what it did (and C(would_act) with the same servers).
version_added: "0.1.0"
author: open-gpu-cloud contributors
extends_documentation_fragment: [ogc_openstack, ogc_openstack.check_only]
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
  os_server_lifetimes:
    cloud: ogc-test
    default_max_age_hours: 168
    policies:
      - {project: ci, max_age_hours: 6}
      - {project: scratch, max_age_hours: 24, action: delete}

- name: What would tomorrow's run do?
  os_server_lifetimes:
    cloud: ogc-test
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

import datetime
import time

from ansible.module_utils.openstack_cloud import CloudModule, sdk_exceptions
# The exemption rule (and its time parsing) is shared with os_compute_drain.
from ansible.module_utils.server_exemption import exemption, iso, parse_time  # noqa: F401 (parse_time: tests)

ACTIONS = ("shelve", "delete")
SHELVED = ("SHELVED", "SHELVED_OFFLOADED")
SHELVABLE = ("ACTIVE", "SHUTOFF", "PAUSED", "SUSPENDED")
GONE = ("DELETED", "SOFT_DELETED")

POLICY_OPTIONS = dict(
    project=dict(type="str", required=True),
    max_age_hours=dict(type="float", required=True),
    action=dict(type="str", choices=list(ACTIONS)),
)

ARGUMENT_SPEC = dict(
    policies=dict(type="list", elements="dict", default=[], options=POLICY_OPTIONS),
    default_max_age_hours=dict(type="float"),
    default_action=dict(type="str", default="shelve", choices=list(ACTIONS)),
    exempt_key=dict(type="str", default="ogc:exempt", no_log=False),
    expires_key=dict(type="str", default="ogc:expires", no_log=False),
    now=dict(type="str"),
    wait=dict(type="bool", default=True),
    timeout=dict(type="int", default=600),
)


# --------------------------------------------------------------------------- pure helpers

def validate_policy(policies, default_max_age_hours, timeout):
    """Errors in the declared policy (no API call)."""
    errors = []
    seen = {}
    for index, item in enumerate(policies):
        project = item.get("project")
        label = "policies[%d] (project %s)" % (index, project)
        if not project or not str(project).strip():
            errors.append("policies[%d]: 'project' must be a project name or ID" % index)
            continue
        age = item.get("max_age_hours")
        if age is None or age <= 0:
            errors.append("%s: max_age_hours=%s must be a positive number of hours (e.g. 168 for a week)"
                          % (label, age))
        if project in seen:
            errors.append("%s: project '%s' is already declared in policies[%d]; keep one item per project"
                          % (label, project, seen[project]))
        else:
            seen[project] = index
    if default_max_age_hours is not None and default_max_age_hours <= 0:
        errors.append("default_max_age_hours=%s must be a positive number of hours, or null to leave projects "
                      "without a policy alone" % default_max_age_hours)
    if timeout is not None and timeout <= 0:
        errors.append("timeout=%s must be a positive number of seconds" % timeout)
    return errors


def decide(servers, rules, default_rule, now, exempt_key, expires_key):
    """Sort servers into would_act / exempt / not_acted / invalid_metadata. Pure: no API call.

    servers: dicts with id, name, project_id, project, status, task_state, created_at (str), metadata.
    rules: {project_id: {max_age_hours, action, project}}; default_rule: same shape or None.
    Returns (decision dict, number of servers in covered projects).
    """
    out = dict(would_act=[], exempt=[], not_acted=[], invalid_metadata=[])
    checked = 0
    for server in servers:
        rule = rules.get(server["project_id"], default_rule)
        if rule is None or server["status"] in GONE:
            continue
        checked += 1
        entry = dict(id=server["id"], name=server["name"], project=server["project"],
                     project_id=server["project_id"], status=server["status"], created_at=server["created_at"],
                     action=rule["action"], max_age_hours=rule["max_age_hours"])
        try:
            created = parse_time(server["created_at"])
        except ValueError:
            entry["reason"] = "created_at %r cannot be parsed" % (server["created_at"],)
            out["not_acted"].append(entry)
            continue
        age = (now - created).total_seconds() / 3600.0
        entry["age_hours"] = round(age, 3)
        kind, detail = exemption(server.get("metadata"), now, exempt_key, expires_key)
        if kind == "invalid":
            out["invalid_metadata"].append(dict(entry, reason=detail))
        if kind == "exempt":
            if age > rule["max_age_hours"]:
                out["exempt"].append(dict(entry, reason=detail))
            continue
        if kind == "expires":
            if now < detail:
                out["exempt"].append(dict(entry, reason="metadata %s: kept until %s" % (expires_key, iso(detail))))
                continue
            entry["reason"] = "expired at %s (metadata %s)" % (iso(detail), expires_key)
        elif age > rule["max_age_hours"]:
            entry["reason"] = "older than %s h (project %s)" % (_hours(rule["max_age_hours"]), rule["project"])
        else:
            continue
        if rule["action"] == "shelve":
            if server["status"] in SHELVED:
                out["not_acted"].append(dict(entry, reason="already shelved (%s)" % server["status"]))
                continue
            if server.get("task_state"):
                out["not_acted"].append(dict(entry, reason="task in progress (%s)" % server["task_state"]))
                continue
            if server["status"] not in SHELVABLE:
                out["not_acted"].append(dict(entry, reason="Nova cannot shelve a server in state %s; delete it or "
                                                          "repair it" % server["status"]))
                continue
        out["would_act"].append(entry)
    return out, checked


def _hours(value):
    return ("%g" % value) if value is not None else "-"


def server_view(server, names):
    get = server.get if isinstance(server, dict) else lambda k, d=None: getattr(server, k, d)
    project_id = get("project_id")
    return dict(id=get("id"), name=get("name"), project_id=project_id, project=names.get(project_id, project_id),
                status=(get("status") or "").upper(), task_state=get("task_state"), created_at=get("created_at"),
                metadata=dict(get("metadata") or {}))


# --------------------------------------------------------------------------- API

def resolve_rules(cm, policies, default_action):
    """{project_id: rule} after looking up every policy project (before any server is read)."""
    rules = {}
    missing = []
    for item in policies:
        found = cm.call("looking up project", item["project"], cm.conn.identity.find_project, item["project"])
        if found is None:
            missing.append(item["project"])
            continue
        rules[found.id] = dict(project=found.name, project_id=found.id, max_age_hours=item["max_age_hours"],
                               action=item.get("action") or default_action)
    if missing:
        cm.fail("lifetime policy names project(s) %s that do not exist in %s; nothing was changed (fix the "
                "project names in the policy, or create the projects first)" % (", ".join(missing), cm._where()),
                errors=["unknown project %s" % m for m in missing])
    return rules


def apply(cm, would_act):
    compute = cm.conn.compute
    acted = []
    for entry in would_act:
        if entry["action"] == "shelve":
            cm.call("shelving server", "%s (%s)" % (entry["name"], entry["id"]), compute.shelve_server, entry["id"])
        else:
            cm.call("deleting server", "%s (%s)" % (entry["name"], entry["id"]), compute.delete_server, entry["id"],
                    ignore_missing=True)
        cm.record("updated" if entry["action"] == "shelve" else "deleted", entry["name"])
        acted.append(dict(entry))
    return acted


def _get_or_none(compute, server_id):
    try:
        return compute.get_server(server_id)
    except sdk_exceptions.NotFoundException:
        return None


def wait_for(cm, acted, timeout):
    """Poll until shelved servers are SHELVED/SHELVED_OFFLOADED and deleted ones are gone."""
    compute = cm.conn.compute
    pending = dict((e["id"], e) for e in acted)
    deadline = time.time() + timeout
    delay = 0.5
    while pending:
        for server_id, entry in list(pending.items()):
            found = cm.call("reading server", "%s (%s)" % (entry["name"], server_id), _get_or_none, compute,
                            server_id)
            status = (getattr(found, "status", None) or "").upper() if found is not None else "DELETED"
            if entry["action"] == "delete" and (found is None or status in GONE):
                entry["status"] = "DELETED"
                del pending[server_id]
            elif entry["action"] == "shelve" and status in SHELVED:
                entry["status"] = status
                del pending[server_id]
            elif status == "ERROR":
                cm.fail("server %s (%s, project %s) went to ERROR while being %s" % (
                    entry["name"], server_id, entry["project"],
                    "shelved" if entry["action"] == "shelve" else "deleted"), failed_item=entry["name"])
            else:
                entry["status"] = status
        if not pending:
            break
        if time.time() > deadline:
            cm.fail("timed out after %s s waiting for %s" % (timeout, ", ".join(
                "%s (%s, now %s)" % (e["name"], e["action"], e["status"]) for e in pending.values())))
        time.sleep(delay)
        delay = min(delay * 1.5, 5)


def main():
    cm = CloudModule(ARGUMENT_SPEC)
    params = cm.params
    errors = validate_policy(params["policies"], params["default_max_age_hours"], params["timeout"])
    if params["now"] is not None:
        try:
            now = parse_time(params["now"])
        except ValueError:
            errors.append("now=%r is not an ISO 8601 date-time (e.g. 2026-11-21T18:00:00Z)" % params["now"])
    else:
        now = datetime.datetime.now(datetime.timezone.utc)
    if not params["policies"] and params["default_max_age_hours"] is None:
        errors.append("nothing to enforce: give policies ({project, max_age_hours, action}) and/or "
                      "default_max_age_hours")
    if errors:
        cm.fail("invalid lifetime policy, nothing was read or changed: " + "; ".join(errors), errors=errors)

    rules = resolve_rules(cm, params["policies"], params["default_action"])
    default_rule = None
    if params["default_max_age_hours"] is not None:
        default_rule = dict(project="(default)", project_id=None, max_age_hours=params["default_max_age_hours"],
                            action=params["default_action"])
    names = dict((p.id, p.name) for p in cm.call("listing", "projects", lambda: list(cm.conn.identity.projects())))
    listed = cm.call("listing", "servers", lambda: list(cm.conn.compute.servers(details=True, all_projects=True)))
    servers = [server_view(s, names) for s in listed]
    for rule in rules.values():
        rule["project"] = names.get(rule["project_id"], rule["project"])
    decision, checked = decide(servers, rules, default_rule, now, params["exempt_key"], params["expires_key"])

    acted = []
    if not cm.check_mode and decision["would_act"]:
        acted = apply(cm, decision["would_act"])
        if params["wait"]:
            wait_for(cm, acted, params["timeout"])
    changed = bool(decision["would_act"])
    cm.exit(changed, acted=acted, checked=checked, now=iso(now), **decision)


if __name__ == "__main__":
    main()
