# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The values of the resource protocol (cloud/openstack.py, "the resource protocol"): an ``Action`` is one step of a
plan, a ``Plan`` is what a resource's pure ``make_plan`` answers, and ``DONE_KEYS`` are the progress keys that mean
something was written.

Pure, with no SDK import: the logic a filter plugin shares with a module (ops/pci_return.py) builds plans with them,
and a filter plugin is loaded in the task worker of each task that calls it (tests/unit/test_plugin_import_cost.py).
Each resource's module_utils imports them from here; cloud/openstack.py runs the protocol.
"""

from __future__ import annotations

# Progress keys that mean something was written (a failure after them reports changed=true).
DONE_KEYS = ("created", "updated", "recreated", "replaced", "retired", "deleted", "enabled", "disabled",
             "assigned", "fenced", "unfenced")


class Action:
    """One step of a plan.

    done: the progress key the step is reported under once carried out (one of DONE_KEYS for a write;
    e.g. ``unchanged`` or ``unmanaged`` for a step that writes nothing); item: the name it is reported as;
    data: what apply() needs (the resource's own shape); diff: (before, after) of the item, only on an
    Action that apply() returns instead of the planned one (see converge).
    """

    __slots__ = ("done", "item", "data", "diff")

    def __init__(self, done, item, data=None, diff=None):
        self.done = done
        self.item = item
        self.data = data
        self.diff = diff

    @property
    def writes(self):
        return self.done in DONE_KEYS

    def __eq__(self, other):
        return isinstance(other, Action) and (self.done, self.item, self.data, self.diff) == (
            other.done, other.item, other.data, other.diff)

    def __repr__(self):
        return f"Action({self.done!r}, {self.item!r}, {self.data!r})"


class Plan:
    """What make_plan() answers: the ordered actions; the Ansible diff (before/after of what changes; None
    for a module without diff support); a problem that stops the run before any write (the keyword
    arguments of CloudModule.fail); warnings; details the report needs besides the actions."""

    def __init__(self, actions=(), before=None, after=None, problem=None, warnings=(), details=None):
        self.actions = list(actions)
        self.before = before
        self.after = after
        self.problem = problem
        self.warnings = list(warnings)
        self.details = details if details is not None else {}

    @property
    def changed(self):
        return any(action.writes for action in self.actions)

    @property
    def writes(self):
        return [action for action in self.actions if action.writes]

    def amend(self, planned, done):
        """apply() did `done` instead of `planned`: the diff shows what was done for that item."""
        if self.before is None and self.after is None:
            return
        for side in (self.before, self.after):
            side.pop(planned.item, None)
        if done.diff is not None:
            self.before[done.item], self.after[done.item] = done.diff

    @property
    def diff(self):
        if self.before is None and self.after is None:
            return None
        return dict(before=self.before or {}, after=self.after or {})
