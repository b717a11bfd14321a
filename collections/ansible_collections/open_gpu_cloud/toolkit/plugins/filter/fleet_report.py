# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report's filters: thin adapters over ``plugins/module_utils/passthrough/fleet.py``.

``plans | open_gpu_cloud.toolkit.fleet_report(missing=None, health=None)`` -> ``{hosts, models, pending, alerts, errors, totals,
colours}``: ``plans`` the loaded plans ``{host: {facts, plan}}`` (roles/passthrough tasks/load.yml:
``passthrough_plans | combine(passthrough_other_plans)``), ``missing`` its ``passthrough_plans_missing``
(``{host: plan file}``), ``health`` the ``health_summary`` of playbooks/health.yml or null; hosts in name
order. ``value | open_gpu_cloud.toolkit.fleet_report_md``: text that stays text in a Markdown table cell. The logic and its layout
are documented in that module; here ``ReportError`` becomes ``AnsibleFilterError`` with the same message.
"""

from __future__ import annotations


from ansible.errors import AnsibleFilterError

# pylint: disable=wrong-import-position
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import fleet

md_cell = fleet.md_cell


def fleet_report(plans, missing=None, health=None):
    """The report's data (``plugins/module_utils/passthrough/fleet.py``, ``fleet_report``)."""
    try:
        return fleet.fleet_report(plans, missing=missing, health=health)
    except fleet.ReportError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """Fleet report filters."""

    def filters(self):
        return {"fleet_report": fleet_report, "fleet_report_md": md_cell}
