# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Projects, allow-listed users and role assignments as code.

Used by os_access (access alone) and os_cloud (the access section)."""

from __future__ import annotations

import json
import re

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan


LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")

ARGUMENT_SPEC = dict(
    allow_list=dict(type="list", elements="str"),
    allow_list_file=dict(type="path"),
    disable_dropped=dict(type="bool", default=True),
    managed_marker=dict(type="str", default="managed by open-gpu-cloud allow-list"),
    projects=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        description=dict(type="str"),
        domain=dict(type="str", default="default"),
        enabled=dict(type="bool", default=True),
    )),
    role_assignments=dict(type="list", elements="dict", default=[], options=dict(
        user=dict(type="str", required=True),
        project=dict(type="str", required=True),
        role=dict(type="str", required=True),
    )),
    user_domain=dict(type="str", default="default"),
    user_projects=dict(type="list", elements="str", default=[]),
    user_role=dict(type="str", default="member"),
)


def load_allow_list(path):
    """The logins in a JSON allow-list file; raises ValueError naming the file and the problem."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ValueError(f"cannot read the allow-list file {path}: {exc.strerror or exc}")
    except ValueError as exc:
        raise ValueError(f"the allow-list file {path} is not valid JSON: {exc}")
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise ValueError(f"the allow-list file {path} must hold a JSON list of logins (strings), "
                         "e.g. [\"alice\", \"bob\"]")
    return data


def validate(logins, projects, user_projects):
    errors = []
    seen = {}
    for index, login in enumerate(logins):
        if not LOGIN_RE.match(login):
            errors.append(f"allow-list entry {index} '{login}' is not a valid login (letters, digits and single "
                          "hyphens, at most 39 characters)")
        key = login.lower()
        if key in seen:
            errors.append(f"allow-list entry {index} '{login}' duplicates entry {seen[key][0]} '{seen[key][1]}'")
        seen.setdefault(key, (index, login))
    names = set()
    for index, project in enumerate(projects):
        if project["name"] in names:
            errors.append(f"projects[{index}]: project '{project['name']}' is declared twice")
        names.add(project["name"])
    return errors


def plan(logins, declared_projects, existing_projects, users, assigned, user_projects, marker, disable_dropped):
    """The difference. Pure. existing_projects: {name: {id, description, enabled}}; users: {name: {id,
    description, enabled}}; assigned: set of (user name, project name) already holding the user role.

    Returns a list of actions: (kind, label, details)."""
    actions = []
    for project in declared_projects:
        have = existing_projects.get(project["name"])
        if have is None:
            actions.append(("create_project", f"project {project['name']}", project))
            continue
        changes = {}
        if project.get("description") is not None and project["description"] != (have.get("description") or ""):
            changes["description"] = project["description"]
        if project["enabled"] != have["enabled"]:
            changes["is_enabled"] = project["enabled"]
        if changes:
            actions.append(("update_project", f"project {project['name']}", dict(have, changes=changes)))
        else:
            actions.append(("unchanged", f"project {project['name']}", None))
    on_list = set(logins)
    for login in logins:
        have = users.get(login)
        if have is None:
            actions.append(("create_user", f"user {login}", login))
        elif have["description"] != marker:
            actions.append(("unmanaged", f"user {login}", have))
        elif not have["enabled"]:
            actions.append(("enable_user", f"user {login}", have))
        else:
            actions.append(("unchanged", f"user {login}", None))
        for project in user_projects:
            if (login, project) not in assigned:
                actions.append(("assign", None, (login, project)))
    if disable_dropped:
        for name in sorted(users):
            have = users[name]
            if name not in on_list and have["description"] == marker and have["enabled"]:
                actions.append(("disable_user", f"user {name}", have))
    return actions


# --------------------------------------------------------------------------- one section of a module run

# allow_list and allow_list_file are two sources of the same list.
MUTUALLY_EXCLUSIVE = [("allow_list", "allow_list_file")]


def prepare(params):
    """(logins, problem) from the module parameters: reads the allow-list file. Makes no API call.

    problem is None, or the keyword arguments of CloudModule.fail() (msg, errors)."""
    logins = params["allow_list"] or []
    if params["allow_list_file"]:
        try:
            logins = load_allow_list(params["allow_list_file"])
        except ValueError as exc:
            return None, dict(msg=f"{exc}; nothing was written", errors=[f"{exc}"])
    errors = validate(logins, params["projects"], params["user_projects"])
    if errors:
        return None, dict(msg="invalid access declaration, nothing was written: " + "; ".join(errors), errors=errors)
    return logins, None


def read(cm, params, logins):
    """Projects, users, the roles and the role assignments the declaration concerns. Reads only; a role,
    user or project the declaration needs but the cloud lacks fails here, before any write."""
    ident = cm.conn.identity
    listed_projects = cm.call("listing", "projects", lambda: list(ident.projects()))
    projects_by = {}
    for project in listed_projects:
        projects_by[project.id] = project
        projects_by.setdefault(project.name, project)
    existing_projects = dict((p.name, dict(id=p.id, description=p.description, enabled=bool(p.is_enabled)))
                             for p in listed_projects if p.domain_id in
                             set(d["domain"] for d in params["projects"]) | set(["default"]))
    listed_users = cm.call("listing users of domain", params["user_domain"],
                           lambda: list(ident.users(domain_id=params["user_domain"])))
    users = dict((u.name, dict(id=u.id, description=u.description or "", enabled=bool(u.is_enabled)))
                 for u in listed_users)
    users_by_id = dict((u.id, u.name) for u in listed_users)

    role, assigned = read_user_role(cm, params, logins, projects_by, users_by_id)
    missing_extra = read_extra_assignments(cm, params, logins, projects_by, users, users_by_id)
    return dict(existing_projects=existing_projects, users=users, assigned=assigned, missing_extra=missing_extra,
                role=dict(id=role.id, name=role.name) if role is not None else None,
                project_ids=dict((name, p.id) for name, p in projects_by.items()),
                user_ids=dict((name, u["id"]) for name, u in users.items()))


def read_user_role(cm, params, logins, projects_by, users_by_id):
    """(user_role, {(user, project)} already holding it on user_projects); fails on an unknown role or project."""
    ident = cm.conn.identity
    needs_role = bool(logins and params["user_projects"])
    role = None
    if needs_role:
        role = cm.call("looking up role", params["user_role"], ident.find_role, params["user_role"])
        if role is None:
            cm.fail(f"role '{params['user_role']}' does not exist (user_role); nothing was written")
    declared_names = set(p["name"] for p in params["projects"])
    for name in params["user_projects"]:
        if name not in declared_names and name not in projects_by:
            cm.fail(f"user_projects names project '{name}', which neither exists nor is declared in projects; nothing "
                    "was written")
    assigned = set()
    existing_targets = [n for n in params["user_projects"] if n in projects_by]
    if needs_role and existing_targets:
        lists = cm.read_all("listing role assignments on project", existing_targets,
                            lambda n: list(ident.role_assignments(scope_project_id=projects_by[n].id,
                                                                  role_id=role.id)))
        for name, found in zip(existing_targets, lists):
            for assignment in found:
                user = users_by_id.get((assignment.user or {}).get("id"))
                if user:
                    assigned.add((user, name))
    return role, assigned


def read_extra_assignments(cm, params, logins, projects_by, users, users_by_id):
    """[(user, project, role {id, name})] of role_assignments the cloud lacks; fails on an unknown user,
    project or role."""
    ident = cm.conn.identity
    declared_names = set(p["name"] for p in params["projects"])
    extra = []
    for item in params["role_assignments"]:
        if item["user"] not in users and item["user"] not in users_by_id and item["user"] not in logins:
            cm.fail(f"role_assignments: user '{item['user']}' does not exist in domain {params['user_domain']}; "
                    "nothing was written")
        if item["project"] not in projects_by and item["project"] not in declared_names:
            cm.fail(f"role_assignments: project '{item['project']}' does not exist; nothing was written")
        extra_role = cm.call("looking up role", item["role"], ident.find_role, item["role"])
        if extra_role is None:
            cm.fail(f"role_assignments: role '{item['role']}' does not exist; nothing was written")
        extra.append((item, extra_role))

    # Extra assignments: checked per pair against the server (one list call each).
    missing_extra = []
    for item, extra_role in extra:
        user_name = users_by_id.get(item["user"], item["user"])
        project = projects_by.get(item["project"])
        if project is not None and user_name in users:
            found = cm.call("listing role assignments of", f"user {user_name}", lambda: list(
                ident.role_assignments(scope_project_id=project.id, user_id=users[user_name]["id"],
                                       role_id=extra_role.id)))
            if found:
                continue
        missing_extra.append((user_name, item["project"], dict(id=extra_role.id, name=extra_role.name)))
    return missing_extra


# The progress key each kind of plan() step is reported under.
DONE = dict(create_project="created", update_project="updated", create_user="created", enable_user="enabled",
            disable_user="disabled", assign="assigned", assign_extra="assigned", unchanged="unchanged",
            unmanaged="unmanaged")


def make_plan(params, logins, state):
    """plan() and the missing extra assignments as the protocol's Plan, with the diff. Pure.

    Action data is (kind, detail) with plan()'s kinds; an assignment's detail is (user, project, role dict)
    and its item reads ROLE to USER on PROJECT."""
    # Without an allow-list (neither option given) users are not managed: nobody is disabled.
    manage_users = params["allow_list"] is not None or bool(params["allow_list_file"])
    steps = plan(logins, params["projects"], state["existing_projects"], state["users"], state["assigned"],
                 params["user_projects"], params["managed_marker"], params["disable_dropped"] and manage_users)
    steps += [("assign_extra", None, detail) for detail in state["missing_extra"]]
    actions, warnings = [], []
    before, after = {}, {}
    for kind, label, detail in steps:
        if kind == "assign":
            detail = detail + (state["role"],)
        if kind in ("assign", "assign_extra"):
            user, project, role = detail
            label = f"{role['name']} to {user} on {project}"
            after.setdefault("assignments", []).append(label)
        elif kind == "unmanaged":
            warnings.append(f"{label} exists without the marker '{params['managed_marker']}': it gets its roles but is "
                            "never disabled by this module")
        elif kind == "create_project":
            after[label] = dict(description=detail.get("description"), enabled=detail["enabled"])
        elif kind == "update_project":
            before[label] = dict((k, detail["description" if k == "description" else "enabled"])
                                 for k in detail["changes"])
            after[label] = dict(detail["changes"])
        elif kind == "create_user":
            after[label] = dict(enabled=True, description=params["managed_marker"])
        elif kind in ("enable_user", "disable_user"):
            enable = kind == "enable_user"
            before[label], after[label] = dict(enabled=not enable), dict(enabled=enable)
        actions.append(Action(DONE[kind], label, (kind, detail)))
    return Plan(actions, before, after, warnings=warnings)


def announce(cm, plan_):
    """Projects this run creates count as existing for the later sections of os_cloud (in check mode too)."""
    for action in plan_.writes:
        kind, detail = action.data
        if kind == "create_project":
            cm.plan_project(detail["name"])


def apply(cm, params, state, action, applied):
    """Carry out one step; IDs of created projects and users go into applied for later assignments."""
    ident = cm.conn.identity
    project_ids = applied.setdefault("project_ids", dict(state["project_ids"]))
    user_ids = applied.setdefault("user_ids", dict(state["user_ids"]))
    kind, detail = action.data
    label = action.item
    if kind == "create_project":
        created = cm.call("creating", label, ident.create_project, name=detail["name"], domain_id=detail["domain"],
                          description=detail.get("description") or "", is_enabled=detail["enabled"])
        project_ids[detail["name"]] = created.id
    elif kind == "update_project":
        cm.call("updating", label, ident.update_project, detail["id"], **detail["changes"])
    elif kind == "create_user":
        created = cm.call("creating", label, ident.create_user, name=detail, domain_id=params["user_domain"],
                          description=params["managed_marker"], is_enabled=True)
        user_ids[detail] = created.id
    elif kind in ("enable_user", "disable_user"):
        enable = kind == "enable_user"
        cm.call("enabling" if enable else "disabling", label, ident.update_user, detail["id"], is_enabled=enable)
    elif kind in ("assign", "assign_extra"):
        user, project, role = detail
        cm.call("assigning role", label, ident.assign_project_role_to_user, project_ids.get(project, project),
                user_ids.get(user, user), role["id"])


def report(_params, _logins, _state, _plan, _applied, progress):
    """The module result: what was (or would be) created, updated, enabled, disabled, assigned."""
    result = dict(created=[], updated=[], enabled=[], disabled=[], assigned=[], unchanged=[], unmanaged=[])
    result.update(progress)
    return result
