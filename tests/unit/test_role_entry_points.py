"""Every role reached with tasks_from is reached through an entry point its meta/argument_specs.yml declares.

A role's other task files are its own: a playbook or another role that includes one of them couples itself to the
role's internals (docs/design.md section 1). Read from the YAML of every playbook, role and scenario.
"""

from __future__ import annotations

import glob
import os
import re

import yaml

from ogc_testlib import collection_plugin

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


def _task_lists():
    """(file, its YAML list) of every playbook, role task file and scenario that is a list of plays or tasks."""
    files = (glob.glob(os.path.join(ROOT, "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "molecule", "**", "*.yml"), recursive=True))
    for path in sorted(files):
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        if isinstance(document, list):
            yield os.path.relpath(path, ROOT), document


def _role_calls():
    """(file, role, entry point) of every include_role/import_role with tasks_from."""
    for path, document in _task_lists():
        for task in _tasks(document):
            for action in ROLE_ACTIONS & set(task):
                args = task[action]
                if isinstance(args, dict) and "tasks_from" in args:
                    entry = os.path.splitext(str(args["tasks_from"]))[0]
                    yield path, str(args["name"]), entry


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
    for path, document in _task_lists():
        for play in document:
            for role in (play.get("roles") or []) if isinstance(play, dict) else []:
                yield path, str(role.get("role", role.get("name")) if isinstance(role, dict) else role)
        for task in _tasks(document):
            for action in ROLE_ACTIONS & set(task):
                args = task[action]
                yield path, str(args["name"] if isinstance(args, dict) else args)


def test_every_role_is_called_by_its_full_name():
    references = list(_role_references())
    assert len(references) > 30, references  # the walk found the project's plays and includes
    short = [f"{path}: {role}" for path, role in references if not role.startswith(COLLECTION)]
    assert not short, "a role called by its short name (call it open_gpu_cloud.toolkit.<role>):\n" + "\n".join(short)


def _code_lines(path):
    """The file's lines without their comments (a YAML comment starts a line or follows a space)."""
    with open(path, encoding="utf-8") as handle:
        return [line.split(" #", 1)[0] for line in handle if not line.lstrip().startswith("#")]


def _names(role, prefix, parts=("tasks", "vars", "defaults")):
    """{variable name with this prefix: [files]} in the role's code (comments left out)."""
    found = {}
    for part in parts:
        for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, part, "*.yml"))):
            for line in _code_lines(path):
                for name in re.findall(rf"\b{prefix}\w+", line):
                    found.setdefault(name, []).append(os.path.relpath(path, ROOT))
    return found


def test_the_host_role_reads_nothing_of_the_rollout():
    assert _names("passthrough_host", "passthrough_rollout_") == {}


def test_the_rollout_reads_the_host_role_only_through_its_declared_options_and_passes_it_arguments():
    checks = collection_plugin("filter", "passthrough_host_checks")
    with open(os.path.join(ROOT, "roles", "passthrough_host", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        host_arguments = {name for entry in yaml.safe_load(handle)["argument_specs"].values()
                          for name in entry.get("options", {})}
    in_tasks = _names("passthrough_rollout", "passthrough_host_", parts=("tasks", "vars"))
    # Arguments it passes to the host role's entry points, and the old names its check refuses.
    refused = set(checks.RENAMED) | {"passthrough_host_reboot_slots_dir"}
    assert {name for name in in_tasks if name not in refused} <= host_arguments, in_tasks
    assert {name for name, files in in_tasks.items() if name in refused} == refused
    assert all(files == ["roles/passthrough_rollout/tasks/check.yml"] * 2 for name, files in in_tasks.items()
               if name in refused), in_tasks
    # What the host role published: read by the defaults of the rollout's own options, each declared.
    with open(os.path.join(ROOT, "roles", "passthrough_rollout", "meta", "argument_specs.yml"), encoding="utf-8") as f:
        specs = yaml.safe_load(f)["argument_specs"]
    with open(os.path.join(ROOT, "roles", "passthrough_rollout", "defaults", "main.yml"), encoding="utf-8") as f:
        defaults = yaml.safe_load(f)
    reading = {name: value for name, value in defaults.items() if "passthrough_host_" in str(value)}
    assert set(reading) == {"passthrough_rollout_reboot_hosts", "passthrough_rollout_reboot_reasons",
                            "passthrough_rollout_restart_seconds", "passthrough_rollout_held_lock",
                            "passthrough_rollout_verify"}
    declared = {name: option for entry in specs.values() for name, option in entry.get("options", {}).items()}
    assert all(declared[name]["default"] == value for name, value in reading.items()), reading
    # Every variable of each role carries its own prefix.
    for role in ("passthrough_host", "passthrough_rollout"):
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as f:
            assert all(name.startswith(role + "_") for name in yaml.safe_load(f)), role
