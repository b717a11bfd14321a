# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Nova flavors as code: the declaration's checks, the difference and how it is applied.

Used by os_flavors (flavors alone) and os_cloud (the flavors section). Everything before ``apply``
is pure and unit-tested without a cloud."""

from __future__ import annotations

import fnmatch
import re

try:
    from openstack import exceptions as sdk_exceptions
    from openstack import utils as sdk_utils
except ImportError:  # pragma: no cover - CloudModule reports the missing library
    sdk_exceptions = sdk_utils = None

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.flavor_requests import (
    ALIAS_KEY, alias_errors, spec_value)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan


IMMUTABLE = ("vcpus", "ram", "disk", "ephemeral", "swap", "is_public")
# Nova's own limits for extra-spec keys and values (nova/api/validation/parameter_types.py).
KEY_RE = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")
BOOL_SPECS = ("hw:hide_hypervisor_id", "hide_hypervisor_id")
BOOL_WORDS = ("true", "false", "yes", "no", "1", "0", "on", "off", "t", "f", "y", "n")

FLAVOR_OPTIONS = dict(
    name=dict(type="str", required=True),
    id=dict(type="str"),
    vcpus=dict(type="int", required=True),
    ram=dict(type="int", required=True),
    disk=dict(type="int", default=0),
    ephemeral=dict(type="int", default=0),
    swap=dict(type="int", default=0),
    is_public=dict(type="bool", default=True),
    projects=dict(type="list", elements="str", default=[]),
    extra_specs=dict(type="dict", default={}),
    description=dict(type="str"),
)

ARGUMENT_SPEC = dict(
    flavors=dict(type="list", elements="dict", required=True, options=FLAVOR_OPTIONS),
    known_aliases=dict(type="list", elements="str"),
    retired_aliases=dict(type="dict", default={}),
    prune=dict(type="bool", default=False),
    prune_patterns=dict(type="list", elements="str", default=["*"]),
    purge_extra_specs=dict(type="bool", default=True),
    recreate_on_change=dict(type="bool", default=False),
)


# --------------------------------------------------------------------------- validation (no API)

def normalise(flavor):
    """A declared flavor with defaults applied and extra-spec values as strings."""
    out = dict(flavor)
    out["extra_specs"] = dict((str(k), spec_value(v)) for k, v in (flavor.get("extra_specs") or {}).items())
    out["projects"] = list(flavor.get("projects") or [])
    return out


def validate(flavors, known_aliases, retired_aliases=None):
    """Every problem in the declared list, in words (empty when it is fine). Makes no API call.

    :param known_aliases: the aliases GPU hosts provide (None: not checked).
    :param retired_aliases: ``{alias: [hosts]}``, aliases no host provides any more and the hosts whose plans
        offered them (``passthrough_retired_alias_hosts``): a flavor asking for one is refused naming those hosts.
    """
    errors = []
    seen = {}
    for index, flavor in enumerate(flavors):
        name = flavor.get("name") or ""
        label = f"flavors[{index}] ({name or 'no name'})"
        if not name.strip():
            errors.append(f"{label}: name must not be empty")
        if name in seen:
            errors.append(f"{label}: name '{name}' is declared twice (also flavors[{seen[name]}])")
        seen.setdefault(name, index)
        for field, low in (("vcpus", 1), ("ram", 1), ("disk", 0), ("ephemeral", 0), ("swap", 0)):
            value = flavor.get(field)
            if value is not None and value < low:
                errors.append(f"{label}: {field}={value} must be >= {low}")
        if flavor.get("projects") and flavor.get("is_public", True):
            errors.append(f"{label}: projects {flavor['projects']} only apply to a private flavor; "
                          "set is_public: false")
        for key, value in (flavor.get("extra_specs") or {}).items():
            key = str(key)
            text = spec_value(value)
            if not KEY_RE.match(key):
                errors.append(f"{label}: extra spec key '{key}' must be 1-255 characters of letters, digits, '-_:. '")
            if len(text) > 255:
                errors.append(f"{label}: extra spec {key} is longer than 255 characters")
            if key == ALIAS_KEY:
                errors += alias_errors(label, text, known_aliases, retired_aliases)
            elif key in BOOL_SPECS and text.lower() not in BOOL_WORDS:
                errors.append(f"{label}: extra spec {key}='{text}' must be true or false")
    return errors


def retired_aliases_problem(retired_aliases):
    """Why ``retired_aliases`` is not ``{alias: [host, ...]}`` (the module option), or None."""
    if not isinstance(retired_aliases, dict):
        return f"retired_aliases must be a mapping {{alias: [hosts]}}, got {type(retired_aliases).__name__}"
    for alias, hosts in retired_aliases.items():
        if not isinstance(alias, str) or not isinstance(hosts, list) or not hosts or \
                not all(isinstance(host, str) and host for host in hosts):
            return (f"retired_aliases[{alias!r}] must be a non-empty list of host names (passthrough_retired_alias_hosts "
                    f"of the loaded plans), got {hosts!r}")
    return None


# --------------------------------------------------------------------------- the difference

def current_view(flavor, access=None):
    """An existing flavor (SDK object or dict) as a plain dict comparable with a declared one."""
    get = flavor.get if isinstance(flavor, dict) else lambda k, d=None: getattr(flavor, k, d)
    return dict(
        name=get("name"), id=get("id"), vcpus=int(get("vcpus") or 0), ram=int(get("ram") or 0),
        disk=int(get("disk") or 0), ephemeral=int(get("ephemeral") or 0), swap=int(get("swap") or 0),
        is_public=bool(get("is_public", True)), description=get("description"),
        extra_specs=dict((str(k), str(v)) for k, v in (get("extra_specs") or {}).items()),
        projects=sorted(access or []))


def plan(declared, existing, access, project_ids, purge_extra_specs=True, recreate_on_change=False,
         prune=False, prune_patterns=("*",)):
    """The difference between the declared flavors and the existing ones. Pure: no API call.

    declared: normalised declared flavors; existing: {name: current_view}; access: {name: [project ids]}
    for existing private flavors; project_ids: {declared project name or id: id}.
    Returns (actions, errors). Each action is a dict with 'action' in create, update, recreate, delete,
    unchanged, plus 'name', 'want'/'have' and the details ('changes' in words).
    """
    actions = []
    errors = []
    declared_names = set()
    for want in declared:
        name = want["name"]
        declared_names.add(name)
        want_projects = sorted(set(project_ids.get(p, p) for p in want["projects"]))
        have = existing.get(name)
        if have is None:
            specs = f", extra specs {want['extra_specs']}" if want["extra_specs"] else ""
            changes = [f"create (vcpus {want['vcpus']}, ram {want['ram']} MiB, disk {want['disk']} GiB{specs})"]
            if want_projects:
                changes.append(f"give access to projects {', '.join(want_projects)}")
            actions.append(dict(action="create", name=name, want=want, projects=want_projects, changes=changes))
            continue
        fields = [f for f in IMMUTABLE if want[f] != have[f]]
        if want.get("id") and want["id"] != have["id"]:
            fields.append("id")
        if fields:
            words = [f"{f}: {have[f]} -> {want[f]}" for f in fields]
            if not recreate_on_change:
                errors.append(f"flavor {name}: {', '.join(words)} cannot change in place (Nova flavors are immutable); "
                              "set recreate_on_change: true to delete and create it again (it gets a new ID unless "
                              "'id' is declared; running servers keep their copy)")
                continue
            actions.append(dict(action="recreate", name=name, want=want, have=have, projects=want_projects,
                                changes=["recreate: " + ", ".join(words)]))
            continue
        set_specs = dict((k, v) for k, v in want["extra_specs"].items() if have["extra_specs"].get(k) != v)
        unset_specs = sorted(k for k in have["extra_specs"] if k not in want["extra_specs"]) \
            if purge_extra_specs else []
        have_projects = sorted(access.get(name, [])) if not have["is_public"] else []
        add_projects = [p for p in want_projects if p not in have_projects]
        remove_projects = [p for p in have_projects if p not in want_projects]
        description = want.get("description")
        set_description = description is not None and description != (have.get("description") or "")
        changes = []
        for key in sorted(set_specs):
            old = have["extra_specs"].get(key)
            was = "absent" if old is None else f"'{old}'"
            changes.append(f"extra spec {key}: {was} -> '{set_specs[key]}'")
        changes += [f"extra spec {k}: '{have['extra_specs'][k]}' -> absent" for k in unset_specs]
        changes += [f"give access to project {p}" for p in add_projects]
        changes += [f"remove access of project {p}" for p in remove_projects]
        if set_description:
            changes.append(f"description -> '{description}'")
        if changes:
            actions.append(dict(action="update", name=name, id=have["id"], want=want, have=have,
                                set_specs=set_specs, unset_specs=unset_specs, add_projects=add_projects,
                                remove_projects=remove_projects,
                                description=description if set_description else None, changes=changes))
        else:
            actions.append(dict(action="unchanged", name=name, have=have, changes=[]))
    if prune:
        for name in sorted(existing):
            if name in declared_names:
                continue
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in prune_patterns):
                actions.append(dict(action="delete", name=name, id=existing[name]["id"], have=existing[name],
                                    changes=["delete (not declared, matches prune_patterns)"]))
    return actions, errors


def diff_of(actions):
    """Ansible diff (before/after) of the flavors that change."""
    def shown(view, projects=None):
        if view is None:
            return None
        keep = dict((k, view.get(k)) for k in ("id", "vcpus", "ram", "disk", "ephemeral", "swap", "is_public",
                                               "extra_specs", "description") if view.get(k) is not None)
        proj = view.get("projects") if projects is None else projects
        if proj:
            keep["projects"] = proj
        return keep

    before, after = {}, {}
    for act in actions:
        name = act["name"]
        if act["action"] == "create":
            after[name] = shown(act["want"], act["projects"])
        elif act["action"] == "recreate":
            before[name], after[name] = shown(act["have"]), shown(act["want"], act["projects"])
        elif act["action"] == "update":
            before[name] = shown(act["have"])
            specs = dict(act["have"]["extra_specs"])
            specs.update(act["set_specs"])
            for key in act["unset_specs"]:
                specs.pop(key, None)
            new = dict(act["have"], extra_specs=specs)
            if act["description"] is not None:
                new["description"] = act["description"]
            projects = [p for p in act["have"]["projects"] if p not in act["remove_projects"]] + act["add_projects"]
            after[name] = shown(new, sorted(projects))
        elif act["action"] == "delete":
            before[name] = shown(act["have"])
    return dict(before=before, after=after)


# --------------------------------------------------------------------------- applying it

def create_kwargs(want):
    kwargs = dict(name=want["name"], vcpus=want["vcpus"], ram=want["ram"], disk=want["disk"],
                  ephemeral=want["ephemeral"], swap=want["swap"], is_public=want["is_public"])
    if want.get("id"):
        kwargs["id"] = want["id"]
    if want.get("description") is not None:
        kwargs["description"] = want["description"]
    return kwargs


def apply(cm, _params, _state, action, applied):
    """Carry out one action over the run's connection; created/recreated flavors' IDs go into applied."""
    compute = cm.conn.compute
    act = action.data
    name = act["name"]
    kind = act["action"]
    if kind == "delete":
        cm.call("deleting flavor", name, compute.delete_flavor, act["id"], ignore_missing=True)
        return
    if kind == "recreate":
        cm.call("deleting flavor (to recreate it)", name, compute.delete_flavor, act["have"]["id"],
                ignore_missing=True)
    if kind in ("create", "recreate"):
        want = act["want"]
        flavor = cm.call("creating flavor", name, compute.create_flavor, **create_kwargs(want))
        if want["extra_specs"]:
            cm.call("setting extra specs of flavor", name, compute.create_flavor_extra_specs, flavor,
                    want["extra_specs"])
        for project in act["projects"]:
            cm.call(f"giving project {project} access to flavor", name, compute.flavor_add_tenant_access,
                    flavor, project)
        applied[name] = flavor.id
        return
    # update in place
    flavor = act["id"]
    if act["set_specs"]:
        cm.call("setting extra specs of flavor", name, compute.create_flavor_extra_specs, flavor,
                act["set_specs"])
    for key in act["unset_specs"]:
        cm.call(f"removing extra spec {key} of flavor", name, compute.delete_flavor_extra_specs_property,
                flavor, key)
    for project in act["add_projects"]:
        cm.call(f"giving project {project} access to flavor", name, compute.flavor_add_tenant_access,
                flavor, project)
    for project in act["remove_projects"]:
        cm.call(f"removing access of project {project} to flavor", name,
                compute.flavor_remove_tenant_access, flavor, project)
    if act["description"] is not None:
        cm.call("updating the description of flavor", name, compute.update_flavor, flavor,
                description=act["description"])


# Extra specs come inline in flavor listings from this compute API microversion on (Queens).
LIST_MICROVERSION = "2.61"
MAX_PAGES = 1000


def list_flavors(compute):
    """Every flavor, public and private, with its extra specs: plain dicts from GET /flavors/detail.

    Read as JSON through the SDK's compute proxy (the SDK's adapter, its auth and its error handling)
    instead of as SDK Flavor objects: building one costs about 6 ms of CPU, 0.3 s for 50 flavors, which
    was a tenth of a whole no-op run. Follows Nova's pages (osapi_max_limit) by marker.
    """
    # The same negotiation the SDK's own Flavor listing does (its _max_microversion is 2.61 too).
    version = sdk_utils.maximum_supported_microversion(compute, LIST_MICROVERSION)
    if version != LIST_MICROVERSION:
        raise ValueError(f"the compute API does not offer microversion {LIST_MICROVERSION} (OpenStack Queens or "
                         "later), which lists extra specs with the flavors")
    flavors, marker = [], None
    for _page in range(MAX_PAGES):
        query = {"is_public": "None"}
        if marker:
            query["marker"] = marker
        response = compute.get("/flavors/detail", params=query, microversion=version)
        sdk_exceptions.raise_from_response(response)
        body = response.json()
        page = body.get("flavors") or []
        for raw in page:
            flavors.append(dict(
                name=raw.get("name"), id=raw.get("id"), vcpus=raw.get("vcpus"), ram=raw.get("ram"),
                disk=raw.get("disk"), ephemeral=raw.get("OS-FLV-EXT-DATA:ephemeral"), swap=raw.get("swap"),
                is_public=raw.get("os-flavor-access:is_public", True), description=raw.get("description"),
                extra_specs=raw.get("extra_specs") or {}))
        if not page or not any(link.get("rel") == "next" for link in body.get("flavors_links") or []):
            return flavors
        marker = page[-1]["id"]
    raise ValueError(f"more than {MAX_PAGES} pages of flavors")


def read_state(cm, declared):
    """Existing flavors {name: view} (one listing) and access of declared private ones."""
    compute = cm.conn.compute
    try:
        listed = cm.call("listing", "flavors", list_flavors, compute)
    except ValueError as exc:
        cm.fail(f"cannot list the flavors: {exc}; nothing was written")
    existing = {}
    for flavor in listed:
        existing[flavor["name"]] = current_view(flavor)
    access = {}
    declared_private = set(f["name"] for f in declared if not f["is_public"])
    private = [name for name, view in sorted(existing.items()) if not view["is_public"] and name in declared_private]
    lists = cm.read_all("reading the access list of flavor", private,
                        lambda name: compute.get_flavor_access(existing[name]["id"]))
    for name, entries in zip(private, lists):
        access[name] = sorted(e.get("tenant_id") for e in entries)
        existing[name]["projects"] = access[name]
    return existing, access


def resolve_projects(cm, declared):
    """{declared project name or id: id}, from one project listing."""
    found = cm.find_projects(p for flavor in declared for p in flavor["projects"])
    for flavor in declared:
        for project in flavor["projects"]:
            if project not in found:
                cm.fail(f"flavor {flavor['name']}: project '{project}' does not exist (declare it first, e.g. with "
                        "os_access)", failed_item=flavor["name"])
    return dict((key, project.id) for key, project in found.items())


# --------------------------------------------------------------------------- one section of a module run

def prepare(params):
    """(declared flavors, problem) from the module parameters. Pure: makes no API call.

    problem is None, or the keyword arguments of CloudModule.fail() (msg, errors)."""
    problem = retired_aliases_problem(params.get("retired_aliases") or {})
    if problem:
        return None, dict(msg=f"invalid flavor options, nothing was written: {problem}", errors=[problem])
    declared = [normalise(f) for f in params["flavors"]]
    errors = validate(declared, params["known_aliases"], params.get("retired_aliases"))
    if errors:
        return None, dict(msg="invalid flavor declaration, nothing was written: " + "; ".join(errors), errors=errors)
    return declared, None


def read(cm, _params, declared):
    """The declared projects' IDs, the existing flavors and the access lists of the declared private ones."""
    project_ids = resolve_projects(cm, declared)
    existing, access = read_state(cm, declared)
    return dict(project_ids=project_ids, existing=existing, access=access)


# The progress key each kind of flavor action is reported under.
DONE = dict(create="created", update="updated", recreate="recreated", delete="deleted", unchanged="unchanged")


def make_plan(params, declared, state):
    """plan() as the protocol's Plan: one Action per flavor (data: plan()'s dict), the diff. Pure."""
    actions, errors = plan(declared, state["existing"], state["access"], state["project_ids"],
                           purge_extra_specs=params["purge_extra_specs"],
                           recreate_on_change=params["recreate_on_change"],
                           prune=params["prune"], prune_patterns=params["prune_patterns"])
    if errors:
        return Plan(problem=dict(msg="nothing was written: " + "; ".join(errors), errors=errors))
    diff = diff_of(actions)
    return Plan([Action(DONE[act["action"]], act["name"], act) for act in actions], diff["before"], diff["after"])


def report(params, declared, state, plan_, applied, progress):
    """The module result: progress, the changes in words, and every declared flavor as it now is."""
    flavors = []
    by_name = dict((action.item, action.data) for action in plan_.actions)
    for want in declared:
        act = by_name[want["name"]]
        have = act.get("have") or {}
        view = dict((k, want[k]) for k in ("name", "vcpus", "ram", "disk", "ephemeral", "swap", "is_public",
                                           "extra_specs", "description"))
        view["id"] = applied.get(want["name"]) if act["action"] in ("create", "recreate") else have.get("id")
        if act["action"] == "unchanged" or act["action"] == "update":
            view["description"] = want["description"] if want["description"] is not None \
                else have.get("description")
            if not params["purge_extra_specs"]:
                merged = dict(have["extra_specs"])
                merged.update(want["extra_specs"])
                view["extra_specs"] = merged
        view["projects"] = sorted(set(state["project_ids"].get(p, p) for p in want["projects"]))
        flavors.append(view)

    result = dict(created=[], updated=[], recreated=[], deleted=[], unchanged=[])
    result.update(progress)
    result["changes"] = dict((action.item, action.data["changes"]) for action in plan_.actions
                             if action.data["changes"])
    result["flavors"] = flavors
    return result
