# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""GPU passthrough planning filters: thin adapters over ``plugins/module_utils/passthrough/`` (the planner, the
policy checks, the report and the plan file) and ``plugins/module_utils/passthrough/verify.py``.

The logic and its rules are documented in those modules (``passthrough/planner.py`` for how the kernel and
Nova decide what can be passed). Here each filter calls its function and turns ``PlanError`` into
``AnsibleFilterError`` with the same message. The names below stay importable from this file.
"""

from __future__ import annotations

import functools
import os
import pwd

from ansible.errors import AnsibleFilterError

# pylint: disable=unused-import
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify as passthrough_verify
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError, planner, policy, report, rules, store
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.planner import EXCLUDED_CAUSES  # noqa: F401
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.policy import POLICY_KEYS, RETIRED_POLICY_VARS  # noqa: F401
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.rules import (  # noqa: F401
    BRIDGE_CLASSES, CLASS_NAMES, DEFAULT_VENDORS, KNOWN_ALIASES, VENDOR_NAMES, class_name, model_alias, model_name)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.store import PLAN_FORMAT, plan_fix  # noqa: F401


def _adapter(func):
    """The filter of a pure function: its PlanError becomes AnsibleFilterError, word for word."""
    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except PlanError as exc:
            raise AnsibleFilterError(str(exc)) from None
    return call


passthrough_plan = _adapter(planner.passthrough_plan)
normalise_address = _adapter(policy.normalise_address)
policy_errors = policy.policy_errors
retired_vars_errors = policy.retired_vars_errors
policy_fingerprint = _adapter(policy.policy_fingerprint)
plan_table = report.plan_table
plan_report = report.plan_report
plan_record = _adapter(store.plan_record)
plan_file = _adapter(store.plan_file)
plan_load = _adapter(store.plan_load)
fleet_plan_load = _adapter(store.fleet_plan_load)
plans_only = _adapter(store.plans_only)
retired_alias_hosts = _adapter(store.retired_alias_hosts)


@_adapter
def fleet(plan_files, inventory_hosts):
    """``found.files | passthrough_fleet(groups['all'])``: store.fleet, a plan file trusted when this user (the
    controller's, on the control host where the files are) or root owns it."""
    return store.fleet(plan_files, inventory_hosts, trusted={0: "root", os.geteuid(): _user_name(os.geteuid())})


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


plan_file_host = store.plan_file_host


def verify(facts, plan, host=None, fresh=None):
    """``facts | open_gpu_cloud.toolkit.passthrough_verify(plan, host=..., fresh=...)``: the host's problems against its plan
    (``plugins/module_utils/passthrough/verify.py``: a list of ``{cause, host, address?, group?, driver?,
    message}``, empty when the host is as planned). ``fresh``, the plan made again from ``facts``, adds
    the check that the plan still holds."""
    try:
        return passthrough_verify.verify(facts, plan, host=host, fresh=fresh)
    except passthrough_verify.VerifyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """GPU passthrough planning filters."""

    def filters(self):
        return {
            "passthrough_plan": passthrough_plan,
            "passthrough_plan_report": plan_report,
            "passthrough_plan_table": plan_table,
            "passthrough_policy_errors": policy_errors,
            "passthrough_retired_vars_errors": retired_vars_errors,
            "passthrough_plan_file": plan_file,
            "passthrough_verify": verify,
            "passthrough_plan_load": plan_load,
            "passthrough_fleet_plan_load": fleet_plan_load,
            "passthrough_plans_only": plans_only,
            "passthrough_retired_alias_hosts": retired_alias_hosts,
            "passthrough_fleet": fleet,
            "passthrough_plan_file_host": plan_file_host,
            "passthrough_plan_record": plan_record,
            "passthrough_policy_fingerprint": policy_fingerprint,
        }
