# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Compute quotas as code: the default quota class set and per-project quota sets.

Used by os_quotas (quotas alone) and os_cloud (the quotas section)."""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan

QUOTA_KEYS = ("instances", "cores", "ram", "key_pairs", "metadata_items", "server_groups",
              "server_group_members", "injected_files", "injected_file_content_bytes", "injected_file_path_bytes")

# key_pairs is a count of key pairs, not a key: no_log=False says so (a name with "key" in it reads like a secret).
_KEY_SPEC = dict((key, dict(type="int", no_log=False) if key == "key_pairs" else dict(type="int")) for key in QUOTA_KEYS)
_PROJECT_SPEC = dict(project=dict(type="str", required=True))
_PROJECT_SPEC.update(_KEY_SPEC)

ARGUMENT_SPEC = dict(
    default_class=dict(type="dict", options=_KEY_SPEC),
    projects=dict(type="list", elements="dict", default=[], options=_PROJECT_SPEC),
)


def declared_values(entry):
    """The quota keys an entry declares (None = not declared)."""
    return dict((k, entry[k]) for k in QUOTA_KEYS if entry and entry.get(k) is not None)


def validate(default_class, projects):
    """Every problem in the declaration, in words. Makes no API call."""
    errors = []
    targets = [("default_class", default_class or {})]
    targets += [(f"projects[{i}] ({p.get('project')})", p) for i, p in enumerate(projects)]
    for label, entry in targets:
        for key, value in sorted(declared_values(entry).items()):
            if value < -1:
                errors.append(f"{label}: {key}={value} is negative; use -1 for unlimited or a value >= 0")
    seen = set()
    for index, entry in enumerate(projects):
        if entry["project"] in seen:
            errors.append(f"projects[{index}]: project '{entry['project']}' is declared twice")
        seen.add(entry["project"])
        if not declared_values(entry):
            errors.append(f"projects[{index}] ({entry['project']}): declares no quota key (one of "
                          f"{', '.join(QUOTA_KEYS)})")
    return errors


def difference(want, have):
    """{key: (old, new)} for the declared keys whose current value differs. Pure."""
    return dict((k, (have.get(k), v)) for k, v in sorted(want.items()) if have.get(k) != v)


def project_difference(want, have, class_change):
    """Like difference(), for a project while the class default changes in the same run. Pure.

    A project value equal to the old class value may be inherited: once the class changes it would follow
    the new value, so the declared value is written (pinned) even though it reads the same now.
    Returns ({key: (old, new)}, {key: note}).
    """
    diff, notes = {}, {}
    for key, value in sorted(want.items()):
        current = have.get(key)
        if current != value:
            diff[key] = (current, value)
        elif key in class_change and current == class_change[key][0] and value != class_change[key][1]:
            diff[key] = (current, value)
            notes[key] = f" (pinned: the class default changes to {class_change[key][1]})"
    return diff, notes


def quota_view(obj):
    get = obj.get if isinstance(obj, dict) else lambda k: getattr(obj, k, None)
    return dict((k, get(k)) for k in QUOTA_KEYS if get(k) is not None)


# --------------------------------------------------------------------------- one section of a module run

def prepare(params):
    """(None, problem) from the module parameters. Pure: makes no API call.

    problem is None, or the keyword arguments of CloudModule.fail() (msg, errors)."""
    errors = validate(params["default_class"], params["projects"])
    if errors:
        return None, dict(msg="invalid quota declaration, nothing was written: " + "; ".join(errors), errors=errors)
    return None, None


def read_project_quotas(compute, project):
    """A project's quota set; a project check mode would create holds nothing yet."""
    if getattr(project, "planned", False):
        return {}
    return compute.get_quota_set(project.id)


def read(cm, params, _declared=None):
    """[(label, project id or None for the class, declared values, current values)]. Reads only.

    Everything is read first: a missing project fails the run before any write."""
    compute = cm.conn.compute
    targets = []
    if params["default_class"] is not None and declared_values(params["default_class"]):
        have = quota_view(cm.call("reading quota class set", "default", compute.get_quota_class_set, "default"))
        targets.append(("class default", None, declared_values(params["default_class"]), have))
    projects = cm.find_projects(entry["project"] for entry in params["projects"])
    for entry in params["projects"]:
        if entry["project"] not in projects:
            cm.fail(f"project '{entry['project']}' does not exist (declare it first, e.g. with os_access); nothing was "
                    "written", failed_item=f"project {entry['project']}")
    # One GET per project (Nova has no bulk read), concurrently.
    current = cm.read_all("reading quotas of project", params["projects"],
                          lambda entry: read_project_quotas(compute, projects[entry["project"]]),
                          label=lambda entry: entry["project"])
    for entry, have in zip(params["projects"], current):
        targets.append((f"project {entry['project']}", projects[entry["project"]].id, declared_values(entry),
                        quota_view(have)))
    return targets


def make_plan(_params, _declared, targets):
    """The quota updates, in order (the class first). Pure.

    Each write is Action('updated', label, {project_id, values, changes}); the diff shows only changed keys."""
    actions, before, after = [], {}, {}
    class_change = {}
    for label, project_id, want, have in targets:
        if project_id is None:
            diff = difference(want, have)
            class_change = diff
            notes = {}
        else:
            diff, notes = project_difference(want, have, class_change)
        if not diff:
            actions.append(Action("unchanged", label))
            continue
        before[label] = dict((k, old) for k, (old, new) in diff.items())
        after[label] = dict((k, new) for k, (old, new) in diff.items())
        actions.append(Action("updated", label, dict(
            project_id=project_id, values=dict(after[label]),
            changes=[f"{k}: {old} -> {new}{notes.get(k, '')}" for k, (old, new) in diff.items()])))
    return Plan(actions, before, after)


def apply(cm, _params, _state, action, _applied):
    """Write one quota set."""
    compute = cm.conn.compute
    if action.data["project_id"] is None:
        cm.call("updating quota class set", "default", compute.update_quota_class_set, "default",
                **action.data["values"])
    else:
        cm.call("updating quotas of", action.item, compute.update_quota_set, action.data["project_id"],
                **action.data["values"])


def report(_params, _declared, _state, plan, _applied, progress):
    """The module result: updated, unchanged, and the changes in words per target."""
    result = dict(updated=[], unchanged=[])
    result.update(progress)
    result["changes"] = dict((action.item, action.data["changes"]) for action in plan.writes)
    return result
