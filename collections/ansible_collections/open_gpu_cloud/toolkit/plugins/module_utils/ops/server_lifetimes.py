# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Server lifetimes: which servers are past their project's maximum age, and shelving or deleting them.

Used by os_server_lifetimes, on the resource protocol of openstack_cloud: prepare (the policy and ``now``)
-> read (the policy's projects, then every server once) -> make_plan (decide(), pure) -> apply (shelve or
delete one server) -> finish (wait for the acted servers)."""

from __future__ import annotations

import datetime
import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import sdk_exceptions
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
# The exemption rule (and its time parsing) is shared with os_compute_drain.
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops.server_exemption import exemption, iso, parse_time  # noqa: F401 (parse_time: tests)

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
        label = f"policies[{index}] (project {project})"
        if not project or not str(project).strip():
            errors.append(f"policies[{index}]: 'project' must be a project name or ID")
            continue
        age = item.get("max_age_hours")
        if age is None or age <= 0:
            errors.append(f"{label}: max_age_hours={age} must be a positive number of hours (e.g. 168 for a week)")
        if project in seen:
            errors.append(f"{label}: project '{project}' is already declared in policies[{seen[project]}]; keep one "
                          "item per project")
        else:
            seen[project] = index
    if default_max_age_hours is not None and default_max_age_hours <= 0:
        errors.append(f"default_max_age_hours={default_max_age_hours} must be a positive number of hours, or null to "
                      "leave projects without a policy alone")
    if timeout is not None and timeout <= 0:
        errors.append(f"timeout={timeout} must be a positive number of seconds")
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
            entry["reason"] = f"created_at {server['created_at']!r} cannot be parsed"
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
                out["exempt"].append(dict(entry, reason=f"metadata {expires_key}: kept until {iso(detail)}"))
                continue
            entry["reason"] = f"expired at {iso(detail)} (metadata {expires_key})"
        elif age > rule["max_age_hours"]:
            entry["reason"] = f"older than {_hours(rule['max_age_hours'])} h (project {rule['project']})"
        else:
            continue
        if rule["action"] == "shelve":
            if server["status"] in SHELVED:
                out["not_acted"].append(dict(entry, reason=f"already shelved ({server['status']})"))
                continue
            if server.get("task_state"):
                out["not_acted"].append(dict(entry, reason=f"task in progress ({server['task_state']})"))
                continue
            if server["status"] not in SHELVABLE:
                out["not_acted"].append(dict(entry, reason=f"Nova cannot shelve a server in state {server['status']}; "
                                                           "delete it or repair it"))
                continue
        out["would_act"].append(entry)
    return out, checked


def _hours(value):
    return (f"{value:g}") if value is not None else "-"


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
        cm.fail(f"lifetime policy names project(s) {', '.join(missing)} that do not exist in {cm._where()}; nothing "
                "was changed (fix the project names in the policy, or create the projects first)",
                errors=[f"unknown project {m}" for m in missing])
    return rules


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
            found = cm.call("reading server", f"{entry['name']} ({server_id})", _get_or_none, compute,
                            server_id)
            status = (getattr(found, "status", None) or "").upper() if found is not None else "DELETED"
            if entry["action"] == "delete" and (found is None or status in GONE):
                entry["status"] = "DELETED"
                del pending[server_id]
            elif entry["action"] == "shelve" and status in SHELVED:
                entry["status"] = status
                del pending[server_id]
            elif status == "ERROR":
                cm.fail(f"server {entry['name']} ({server_id}, project {entry['project']}) went to ERROR while being "
                        f"{'shelved' if entry['action'] == 'shelve' else 'deleted'}", failed_item=entry["name"])
            else:
                entry["status"] = status
        if not pending:
            break
        if time.time() > deadline:
            waiting = ", ".join(f"{e['name']} ({e['action']}, now {e['status']})" for e in pending.values())
            cm.fail(f"timed out after {timeout} s waiting for {waiting}")
        time.sleep(delay)
        delay = min(delay * 1.5, 5)


# --------------------------------------------------------------------------- the protocol's steps

def prepare(params):
    """(declared, problem): the policy checked and ``now`` parsed, before any API call. declared: {now}."""
    errors = validate_policy(params["policies"], params["default_max_age_hours"], params["timeout"])
    now = None
    if params["now"] is not None:
        try:
            now = parse_time(params["now"])
        except ValueError:
            errors.append(f"now={params['now']!r} is not an ISO 8601 date-time (e.g. 2026-11-21T18:00:00Z)")
    else:
        now = datetime.datetime.now(datetime.timezone.utc)
    if not params["policies"] and params["default_max_age_hours"] is None:
        errors.append("nothing to enforce: give policies ({project, max_age_hours, action}) and/or "
                      "default_max_age_hours")
    if errors:
        return None, dict(msg="invalid lifetime policy, nothing was read or changed: " + "; ".join(errors),
                          errors=errors)
    return dict(now=now), None


def read(cm, params, _declared):
    """The rules (every policy project looked up before any server is read) and every server, once."""
    rules = resolve_rules(cm, params["policies"], params["default_action"])
    default_rule = None
    if params["default_max_age_hours"] is not None:
        default_rule = dict(project="(default)", project_id=None, max_age_hours=params["default_max_age_hours"],
                            action=params["default_action"])
    names = dict((p.id, p.name) for p in cm.call("listing", "projects", lambda: list(cm.conn.identity.projects())))
    listed = cm.call("listing", "servers", lambda: list(cm.conn.compute.servers(details=True, all_projects=True)))
    for rule in rules.values():
        rule["project"] = names.get(rule["project_id"], rule["project"])
    return dict(rules=rules, default_rule=default_rule, servers=[server_view(s, names) for s in listed])


def make_plan(params, declared, state):
    """decide() as the protocol's Plan: one Action per server to shelve (reported as updated) or delete. Pure.

    The decision and the number of servers checked travel in Plan.details for the report; no diff (the
    module is check-only: would_act is its preview)."""
    decision, checked = decide(state["servers"], state["rules"], state["default_rule"], declared["now"],
                               params["exempt_key"], params["expires_key"])
    actions = [Action("updated" if entry["action"] == "shelve" else "deleted", entry["name"], entry)
               for entry in decision["would_act"]]
    return Plan(actions, details=dict(decision=decision, checked=checked))


def apply(cm, _params, _state, action, applied):
    """Shelve or delete one server (no waiting: finish() waits for all of them together)."""
    compute = cm.conn.compute
    entry = action.data
    if entry["action"] == "shelve":
        cm.call("shelving server", f"{entry['name']} ({entry['id']})", compute.shelve_server, entry["id"])
    else:
        cm.call("deleting server", f"{entry['name']} ({entry['id']})", compute.delete_server, entry["id"],
                ignore_missing=True, idempotent=True)
    applied.setdefault("acted", []).append(dict(entry))


def finish(cm, params, _state, applied):
    """With wait=true, poll until every acted server reached its final state."""
    if params["wait"]:
        wait_for(cm, applied.get("acted", []), params["timeout"])


def report(_params, declared, _state, plan, applied, _progress):
    """The module result: acted (empty in check mode), the decision, checked and now."""
    result = dict(acted=applied.get("acted", []), checked=plan.details["checked"], now=iso(declared["now"]))
    result.update(plan.details["decision"])
    return result
