"""Every role reached with tasks_from is reached through an entry point its meta/argument_specs.yml declares.

A role's other task files are its own: a playbook or another role that includes one of them couples itself to the
role's internals (docs/design.md section 1). Read from the YAML of every playbook, role and scenario.
"""

from __future__ import annotations

import glob
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE_ACTIONS = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")
COLLECTION = "open_gpu_cloud.toolkit."


def _entry_points(role):
    short = role.removeprefix(COLLECTION)
    with open(os.path.join(ROOT, "roles", short, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        return set(yaml.safe_load(handle)["argument_specs"])


def _tasks(items):
    for item in items or []:
        if isinstance(item, dict):
            yield item
            for key in TASK_LISTS:
                yield from _tasks(item.get(key))


def _role_calls():
    """(file, role, entry point) of every include_role/import_role with tasks_from."""
    files = (glob.glob(os.path.join(ROOT, "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "molecule", "**", "*.yml"), recursive=True))
    for path in sorted(files):
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        if not isinstance(document, list):
            continue
        for task in _tasks(document):
            for action in ROLE_ACTIONS & set(task):
                args = task[action]
                if isinstance(args, dict) and "tasks_from" in args:
                    entry = os.path.splitext(str(args["tasks_from"]))[0]
                    yield os.path.relpath(path, ROOT), str(args["name"]), entry


def test_every_tasks_from_is_a_declared_entry_point():
    calls = list(_role_calls())
    assert len(calls) > 10, calls  # the walk found the project's calls
    undeclared = [f"{path}: {role} tasks_from {entry}" for path, role, entry in calls
                  if entry not in _entry_points(role)]
    assert not undeclared, "tasks_from of a file no argument_specs entry point declares:\n" + "\n".join(undeclared)


def test_the_rollout_is_reached_through_its_entry_points():
    rollout = {(role, entry) for path, role, entry in _role_calls() if path == os.path.join("playbooks", "host.yml")}
    assert {(COLLECTION + "passthrough_rollout", "check"), (COLLECTION + "passthrough_rollout", "plan")} <= rollout
    assert not any(role.endswith("passthrough_host") for role, _ in rollout), rollout
    with open(os.path.join(ROOT, "playbooks", "host.yml"), encoding="utf-8") as handle:
        text = handle.read()
    assert "_passthrough_host_" not in text and "_passthrough_rollout_" not in text  # no private variable


def _role_references():
    """(file, role) of every role a play lists or a task includes or imports, with or without tasks_from."""
    files = (glob.glob(os.path.join(ROOT, "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "molecule", "**", "*.yml"), recursive=True))
    for path in sorted(files):
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        if not isinstance(document, list):
            continue
        for play in document:
            for role in (play.get("roles") or []) if isinstance(play, dict) else []:
                yield os.path.relpath(path, ROOT), str(role.get("role", role.get("name")) if isinstance(role, dict)
                                                       else role)
        for task in _tasks(document):
            for action in ROLE_ACTIONS & set(task):
                args = task[action]
                yield os.path.relpath(path, ROOT), str(args["name"] if isinstance(args, dict) else args)


def test_every_role_is_called_by_its_full_name():
    references = list(_role_references())
    assert len(references) > 30, references  # the walk found the project's plays and includes
    short = [f"{path}: {role}" for path, role in references if not role.startswith(COLLECTION)]
    assert not short, "a role called by its short name (call it open_gpu_cloud.toolkit.<role>):\n" + "\n".join(short)
