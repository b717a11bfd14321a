#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: os_quotas
short_description: Converge Nova's default quota class set and per-project compute quotas
description:
  - Sets the C(default) quota class set (what C(openstack quota set --class --instances 15 default) does),
    which every project without its own value inherits, and per-project compute quotas.
  - Reads the current values once per target, writes only the keys that differ (one call per target),
    over one openstacksdk connection. Keys that are not declared are left as they are.
  - C(-1) means unlimited. Any other negative value is rejected before any API call.
  - Compute (Nova) quotas only. Network (Neutron) and block-storage (Cinder) quotas are not handled by
    this module; unknown keys are rejected by the argument spec.
  - A project whose effective value already equals the declared one is not written, so it keeps following
    the class default, except when this run changes that class key (the project value is then written, so
    the declared value holds after the run). If the class is changed by other means later, the next run
    writes the project's own value.
  - Check mode and diff mode use the same difference function as a real run.
version_added: "0.1.0"
author: open-gpu-cloud contributors
requirements:
  - openstacksdk >= 1.0
options:
  default_class:
    description: Values of the C(default) quota class set. Omit it to leave the class alone.
    type: dict
    suboptions:
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
notes:
  - "Connection options (shared by every os_* module): I(cloud) (a name in clouds.yaml), or I(auth)
    (keystone auth options; C(password), C(token), C(application_credential_secret) are no_log),
    I(auth_type), I(region_name), I(interface) (public, internal, admin), I(validate_certs),
    I(ca_cert), I(api_timeout). Without I(cloud) and I(auth) the OS_CLOUD / OS_* environment applies."
  - Needs admin rights.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: The seed's quota, as code
  os_quotas:
    cloud: ogc-test
    default_class:
      instances: 15
    projects:
      - {project: conda-forge, instances: 30, cores: 120, ram: 491520}
      - {project: sandbox, instances: 2, cores: -1}
"""

RETURN = r"""
updated:
  description: Targets written (C(class default), C(project NAME)).
  returned: always
  type: list
  elements: str
  sample: ["class default", "project conda-forge"]
unchanged:
  description: Targets that already matched.
  returned: always
  type: list
  elements: str
changes:
  description: "Per target, each key that changed (or would change in check mode), as C(KEY: OLD -> NEW)."
  returned: always
  type: dict
  sample: {"class default": ["instances: 10 -> 15"]}
"""

from ansible.module_utils.openstack_cloud import CloudModule

QUOTA_KEYS = ("instances", "cores", "ram", "key_pairs", "metadata_items", "server_groups",
              "server_group_members", "injected_files", "injected_file_content_bytes", "injected_file_path_bytes")

_KEY_SPEC = dict((key, dict(type="int")) for key in QUOTA_KEYS)
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
    targets += [("projects[%d] (%s)" % (i, p.get("project")), p) for i, p in enumerate(projects)]
    for label, entry in targets:
        for key, value in sorted(declared_values(entry).items()):
            if value < -1:
                errors.append("%s: %s=%d is negative; use -1 for unlimited or a value >= 0" % (label, key, value))
    seen = set()
    for index, entry in enumerate(projects):
        if entry["project"] in seen:
            errors.append("projects[%d]: project '%s' is declared twice" % (index, entry["project"]))
        seen.add(entry["project"])
        if not declared_values(entry):
            errors.append("projects[%d] (%s): declares no quota key (one of %s)"
                          % (index, entry["project"], ", ".join(QUOTA_KEYS)))
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
            notes[key] = " (pinned: the class default changes to %s)" % class_change[key][1]
    return diff, notes


def quota_view(obj):
    get = obj.get if isinstance(obj, dict) else lambda k: getattr(obj, k, None)
    return dict((k, get(k)) for k in QUOTA_KEYS if get(k) is not None)


def main():
    cm = CloudModule(ARGUMENT_SPEC)
    params = cm.params
    errors = validate(params["default_class"], params["projects"])
    if errors:
        cm.fail("invalid quota declaration, nothing was written: " + "; ".join(errors), errors=errors)
    compute = cm.conn.compute

    # Read everything first: a missing project fails the run before any write.
    targets = []
    if params["default_class"] is not None and declared_values(params["default_class"]):
        have = quota_view(cm.call("reading quota class set", "default", compute.get_quota_class_set, "default"))
        targets.append(("class default", None, declared_values(params["default_class"]), have))
    projects = cm.find_projects(entry["project"] for entry in params["projects"])
    for entry in params["projects"]:
        if entry["project"] not in projects:
            cm.fail("project '%s' does not exist (declare it first, e.g. with os_access); nothing was written"
                    % entry["project"], failed_item="project %s" % entry["project"])
    # One GET per project (Nova has no bulk read), concurrently.
    current = cm.read_all("reading quotas of project", params["projects"],
                          lambda entry: compute.get_quota_set(projects[entry["project"]].id),
                          label=lambda entry: entry["project"])
    for entry, have in zip(params["projects"], current):
        targets.append(("project %s" % entry["project"], projects[entry["project"]].id, declared_values(entry),
                        quota_view(have)))

    changes, before, after = {}, {}, {}
    class_change = {}
    for label, project_id, want, have in targets:
        if project_id is None:
            diff = difference(want, have)
            class_change = diff
            notes = {}
        else:
            diff, notes = project_difference(want, have, class_change)
        if not diff:
            cm.record("unchanged", label)
            continue
        changes[label] = ["%s: %s -> %s%s" % (k, old, new, notes.get(k, "")) for k, (old, new) in diff.items()]
        before[label] = dict((k, old) for k, (old, new) in diff.items())
        after[label] = dict((k, new) for k, (old, new) in diff.items())
        if not cm.check_mode:
            values = dict((k, new) for k, (old, new) in diff.items())
            if project_id is None:
                cm.call("updating quota class set", "default", compute.update_quota_class_set, "default", **values)
            else:
                cm.call("updating quotas of", label, compute.update_quota_set, project_id, **values)
        cm.record("updated", label)

    result = dict(updated=[], unchanged=[])
    result.update(cm.progress)
    result["changes"] = changes
    if cm.module._diff:
        result["diff"] = dict(before=before, after=after)
    cm.exit(bool(changes), **result)


if __name__ == "__main__":
    main()
