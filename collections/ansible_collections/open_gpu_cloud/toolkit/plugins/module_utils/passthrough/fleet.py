# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report's data: every GPU host's plan and health results, laid out for the templates.

``fleet_report(plans, missing=None, health=None)`` -> ``{hosts, models, pending, left_alone, alerts, errors,
without_reset, totals, colours}`` where ``plans`` is ``{host: {facts, plan}}`` as the one loader sets it (roles/passthrough
tasks/load.yml: ``passthrough_plans``, combined with ``passthrough_other_plans``), ``missing`` the
``{host: plan file}`` of the hosts without one (``passthrough_plans_missing``; each is a row with its error)
and ``health`` the ``health_summary`` of playbooks/health.yml (``{reports: [...]}``) when it ran in the same
command. Hosts come in name order (case-insensitive, then as written): the same report whichever AWX slice
writes it. Each host has its IOMMU groups as SVG boxes (``x``, ``y``, ``width``, ``height``) holding its
devices, each with the verdict and reason of the planner's own table (``plan_table``, the same rows the plan
phase prints, its window and reset columns included); ``without_reset`` lists the GPUs offered to Nova that the
kernel has no usable reset for, and each host its ``guest_phys_bits_needed`` (plans written before these fields
show none). ``left_alone`` lists the hosts whose plan names ``blocked_by`` (``settle.py``: no reboot can make them
passthrough hosts, so the host phase writes nothing there), each cause with its reason and fix. The templates in
``templates/`` only place them. Pure functions; errors are ``ReportError``
(a ``PlanError``), which the filter (``plugins/filter/fleet_report.py``) turns into ``AnsibleFilterError``
with the same message.
"""

from __future__ import annotations

from collections.abc import Mapping

# The planner's own table, names and bridge rule: one rule, one place.
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError, rules
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.report import plan_table, reset_text, window_text


class ReportError(PlanError):
    """Input the fleet report cannot lay out, worded for the operator (the host and the fix)."""


# Device verdicts: the planner's (nova, vfio, host) and two for devices its table does not list.
COLOURS = {"nova": "#2e7d32", "vfio": "#1565c0", "host": "#8d6e63", "bridge": "#b0bec5", "other": "#eceff1",
           "missing": "#c62828"}
VERDICT_WORDS = {"nova": "offered to Nova", "vfio": "bound to vfio-pci (not offered)", "host": "stays on the host",
                 "bridge": "PCI bridge (needs nothing)", "other": "not planned (keeps its driver)",
                 "missing": "gone from the PCI bus"}
GROUP_COLOURS = {"passed": "#2e7d32", "ineligible": "#c62828", "excluded": "#ef6c00", None: "#90a4ae"}
COLUMNS = 4
BOX_WIDTH = 300
ROW_HEIGHT = 22
HEADER = 26
GAP = 12


def _fail(message):
    raise ReportError(f"fleet_report: {message}")


def _host_order(host):
    """Name order, as the report always had it: case-insensitive, then as written (one order for every slice)."""
    return host.lower(), host


def _missing_error(host, path):
    return (f"no plan file for {host} (file not found: {path}): run the plan phase "
            "(ansible-playbook playbooks/plan.yml) with passthrough_plan_dir set")


def _checked(plans, missing):
    """``{host: (data, error)}``: each loaded plan ``{facts, plan}`` (error None), each missing one (data None)."""
    if not isinstance(plans, Mapping):
        _fail("plans must be the loaded plans {host: {facts, plan}} (passthrough_plans of roles/passthrough "
              f"tasks/load.yml, combined with passthrough_other_plans), got {type(plans).__name__}")
    if missing is not None and not isinstance(missing, Mapping):
        _fail("missing must be {host: plan file} (passthrough_plans_missing of roles/passthrough tasks/load.yml) "
              f"or null, got {type(missing).__name__}")
    hosts = {}
    for host, data in plans.items():
        if not isinstance(host, str):
            _fail(f"each host of the plans must be its inventory name, got {host!r}")
        if not isinstance(data, Mapping) or not isinstance(data.get("plan"), Mapping) \
                or not isinstance(data.get("facts"), Mapping):
            _fail(f"the plan of {host} lacks 'facts' and 'plan'; write it again with playbooks/plan.yml")
        hosts[host] = (data, None)
    for host, path in (missing or {}).items():
        if not isinstance(host, str):
            _fail(f"each host of missing must be its inventory name, got {host!r}")
        if host in hosts:
            _fail(f"{host} is both among the plans and among the hosts without one (missing)")
        hosts[host] = (None, _missing_error(host, path))
    return hosts


def _layout(groups):
    """Place the group boxes in rows of COLUMNS; returns the SVG's width and height."""
    y = 0
    for start in range(0, len(groups), COLUMNS):
        row = groups[start:start + COLUMNS]
        height = max(HEADER + ROW_HEIGHT * len(g["devices"]) + 6 for g in row)
        for col, group in enumerate(row):
            group.update(x=col * (BOX_WIDTH + GAP), y=y, width=BOX_WIDTH, height=height)
            for i, dev in enumerate(group["devices"]):
                dev.update(x=group["x"] + 6, y=y + HEADER + i * ROW_HEIGHT, width=BOX_WIDTH - 12,
                           height=ROW_HEIGHT - 4)
        y += height + GAP
    width = min(len(groups), COLUMNS) * (BOX_WIDTH + GAP) - GAP if groups else 0
    return max(width, 0), max(y - GAP, 0)


def _host(host, data, health):
    facts, plan = data["facts"], data["plan"]
    try:
        rows = {r["address"]: r for r in plan_table(plan, facts)}
    except (KeyError, TypeError, AttributeError) as exc:
        _fail(f"the plan file of {host} is not a plan of this version ({exc!r}); write it again with playbooks/plan.yml")
    by_addr = {d["address"]: d for d in facts.get("devices") or []}
    missing = set((health or {}).get("missing") or [])
    verdicts = {g["group"]: g for g in plan.get("groups") or []}
    groups = []
    iommu_groups = facts.get("iommu_groups") or {}
    # Numerically, as discovery orders them (the plan file stores them sorted as text).
    for group_id in sorted(iommu_groups, key=lambda g: (0, int(g), "") if str(g).isdigit() else (1, 0, str(g))):
        members = iommu_groups[group_id]
        devices = []
        for address in members:
            dev = by_addr.get(address, {})
            row = rows.get(address)
            model = (row or {}).get("model") or rules.model_name(dev) or rules.class_name(dev.get("class_id", "000000"))
            if address in missing:
                verdict, reason = "missing", "in the plan, gone from the PCI bus now (health check)"
            elif row:
                verdict, reason = row["verdict"], row["reason"]
            elif rules.is_bridge(dev):  # the one bridge rule (plugins/module_utils/passthrough/rules.py)
                verdict, reason = "bridge", "PCI bridge: needs no driver change"
            else:
                verdict = "other"
                reason = f"{rules.class_name(dev.get('class_id', '000000'))}: not planned, keeps its driver"
            devices.append({"address": address, "model": model, "verdict": verdict, "reason": reason,
                            "colour": COLOURS[verdict], "words": VERDICT_WORDS[verdict],
                            "driver": dev.get("driver") or "-", "window": window_text(dev), "reset": reset_text(dev)})
        group = verdicts.get(group_id, {})
        groups.append({"group": group_id, "devices": devices, "verdict": group.get("verdict"),
                       "reason": group.get("reason") or "no GPU for passthrough in this group",
                       "colour": GROUP_COLOURS.get(group.get("verdict"), GROUP_COLOURS[None])})
    width, height = _layout(groups)
    alerts = list((health or {}).get("alerts") or [])
    return {
        "host": host, "iommu_enabled": bool(plan.get("iommu_enabled")), "groups": groups,
        "svg_width": width, "svg_height": height,
        "rows": [rows[a] for a in sorted(rows)],
        "offered": len(plan.get("selected") or []),
        "aliases": plan.get("aliases") or [],
        "reboot_required": bool(plan.get("reboot_required")), "pending": list(plan.get("pending") or []),
        "blocked_by": [dict(b) for b in plan.get("blocked_by") or [] if isinstance(b, Mapping)],
        "notes": list(plan.get("notes") or []), "alerts": alerts,
        "health": None if health is None else ("OK" if not alerts else f"{len(alerts)} alert(s)"),
        "pci_ids": facts.get("pci_ids"), "error": None,
        "guest_phys_bits_needed": plan.get("guest_phys_bits_needed"),
        "ovmf_phys_bits_needed": plan.get("ovmf_phys_bits_needed"),
        "without_reset": [{"host": host, "address": s.get("address"), "model": s.get("model") or "?"}
                          for s in plan.get("selected") or [] if s.get("resettable") is False],
    }


def fleet_report(plans, missing=None, health=None):
    """The report's data (see the module docstring)."""
    checked = _checked(plans, missing)
    if health is not None and not (isinstance(health, Mapping) and isinstance(health.get("reports", []), list)):
        _fail("health must be the health_summary of playbooks/health.yml ({reports: [...]}) or null")
    reports = {r.get("host"): r for r in (health or {}).get("reports") or [] if isinstance(r, Mapping)}
    hosts, models = [], {}
    for host in sorted(checked, key=_host_order):
        data, error = checked[host]
        if data is None:
            hosts.append({"host": host, "error": error, "groups": [], "rows": [], "offered": 0, "aliases": [],
                          "pending": [], "blocked_by": [], "notes": [], "alerts": [], "reboot_required": False,
                          "svg_width": 0,
                          "svg_height": 0, "iommu_enabled": False, "health": None, "pci_ids": None,
                          "guest_phys_bits_needed": None, "ovmf_phys_bits_needed": None, "without_reset": []})
            continue
        entry_out = _host(host, data, reports.get(host))
        hosts.append(entry_out)
        for sel in data["plan"].get("selected") or []:
            key = sel.get("alias") or "?"
            model = models.setdefault(key, {"alias": key, "model": sel.get("model") or key,
                                            "device_type": sel.get("device_type"), "count": 0, "hosts": {}})
            model["count"] += 1
            model["hosts"][host] = model["hosts"].get(host, 0) + 1
    model_list = [dict(m, hosts=[{"host": h, "count": c} for h, c in sorted(m["hosts"].items())])
                  for _model, m in sorted(models.items())]
    return {
        "hosts": hosts,
        "models": model_list,
        "pending": [{"host": h["host"], "items": h["pending"]} for h in hosts if h["reboot_required"]],
        "left_alone": [{"host": h["host"], "blocked_by": h["blocked_by"]} for h in hosts if h["blocked_by"]],
        "alerts": [a for h in hosts for a in h["alerts"]],
        "errors": [h["error"] for h in hosts if h["error"]],
        "without_reset": [gpu for h in hosts for gpu in h["without_reset"]],
        "totals": {"hosts": len(hosts), "gpus_offered": sum(m["count"] for m in model_list),
                   "gpus_without_reset": sum(len(h["without_reset"]) for h in hosts),
                   "groups": sum(len(h["groups"]) for h in hosts),
                   "reboots_pending": sum(1 for h in hosts if h["reboot_required"]),
                   "hosts_left_alone": sum(1 for h in hosts if h["blocked_by"]),
                   "health_checked": health is not None},
        "colours": [{"verdict": v, "colour": c, "words": VERDICT_WORDS[v]} for v, c in COLOURS.items()],
    }


def md_cell(value):
    """Text that stays text in the Markdown report: ``&``, ``<`` and ``>`` as HTML entities (a name holding
    ``<script>`` or an ``<img>`` is shown, never rendered), a backslash and ``|`` escaped (a ``|`` would end a
    table cell), line breaks as spaces."""
    text = str(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.splitlines())
