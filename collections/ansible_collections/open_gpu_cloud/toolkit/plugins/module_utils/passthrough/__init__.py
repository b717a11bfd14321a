# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""GPU passthrough planning, as pure functions (``ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough``).

* ``rules``: what a bridge, a display device and a card's slot are, and the tables (vendors, aliases,
  class names, drivers) the planner decides with;
* ``policy``: the operator's ``passthrough_policy``, validated, and its fingerprint;
* ``planner``: ``passthrough_plan(facts, policy, host)``, the plan;
* ``report``: the plan as table rows and as a readable report;
* ``store``: the plan file (its record, parser and the one loader);
* ``fleet``: the fleet report's data from the loaded plans.

The filters of ``plugins/filter/passthrough_plan.py`` and ``fleet_report.py`` are thin adapters over these;
errors here are ``PlanError`` (the fleet report's a ``ReportError``, one), which the adapters turn into
``AnsibleFilterError`` with the same message.
"""

from __future__ import annotations


class PlanError(ValueError):
    """Facts, a policy or a plan file that cannot be planned with, worded for the operator (host, key, fix)."""
