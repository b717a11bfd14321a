# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The end-of-run summary: hosts, GPUs offered per model, pending reboots, where the files are."""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in used when Ansible is not importable."""


def gpu_offer(plans):
    """GPUs offered to Nova per alias across hosts.

    :param plans: ``{host: plan}`` (hosts without a plan may map to None and are skipped).
    :returns: list of ``{alias, device_type, count, hosts: {host: count}}`` sorted by alias.
    """
    if not isinstance(plans, dict):
        raise AnsibleFilterError(f"gpu_offer: expected a mapping of host to plan, got {type(plans).__name__}")
    offer: dict[str, dict] = {}
    for host in sorted(plans):
        plan = plans[host]
        if not plan:
            continue
        for selected in plan.get("selected", []):
            entry = offer.setdefault(selected["alias"], {"alias": selected["alias"],
                                                         "device_type": selected["device_type"],
                                                         "count": 0, "hosts": {}})
            entry["count"] += 1
            entry["hosts"][host] = entry["hosts"].get(host, 0) + 1
    return [offer[a] for a in sorted(offer)]


def ogc_summary(plans, files=None, notes=None):
    """A readable summary (one string) of a site.yml run.

    :param plans: ``{host: plan}`` of every GPU host (None for a host not planned in this run).
    :param files: ``{label: path}`` of the rendered files worth knowing about (empty paths skipped).
    :param notes: extra lines (e.g. a phase that was skipped and why).
    """
    lines = []
    planned = {h: p for h, p in (plans or {}).items() if p}
    unplanned = sorted(h for h, p in (plans or {}).items() if not p)
    lines.append(f"GPU hosts: {len(plans or {})} ({', '.join(sorted(plans or {})) or 'none'})")
    offer = gpu_offer(planned)
    if offer:
        lines.append("GPUs offered to Nova:")
        for entry in offer:
            where = ", ".join(f"{n} on {h}" for h, n in entry["hosts"].items())
            lines.append(f"  {entry['alias']} ({entry['device_type']}): {entry['count']} ({where})")
    else:
        lines.append("GPUs offered to Nova: none yet")
    for host in sorted(planned):
        plan = planned[host]
        blocked = [b for b in plan.get("blocked_by") or [] if isinstance(b, dict)]
        if blocked:
            # No reboot can make it a passthrough host (plugins/module_utils/passthrough/settle.py): the host phase
            # writes nothing there.
            lines.extend(f"  {host}: left alone ({b.get('cause')}): {b.get('reason')}; first, {b.get('fix')}"
                         for b in blocked)
            continue
        if not plan.get("selected"):
            why = plan.get("notes") or ["no GPU passes the planner's rules (see the plan table)"]
            lines.append(f"  {host}: nothing offered: {why[0].split('. ')[0].rstrip('.')}")
        if plan.get("reboot_required"):
            lines.append(f"  {host}: reboot pending ({len(plan.get('pending', []))} item(s): "
                         f"{'; '.join(plan.get('pending', [])[:3])}{' ...' if len(plan.get('pending', [])) > 3 else ''})")
    if unplanned:
        lines.append(f"Not planned in this run: {', '.join(unplanned)}")
    shown = [(label, path) for label, path in (files or {}).items() if path]
    if shown:
        lines.append("Files:")
        width = max(len(label) for label, _path in shown)
        lines.extend(f"  {label.ljust(width)}  {path}" for label, path in shown)
    lines.extend(notes or [])
    return "\n".join(lines)


class FilterModule:
    """Summary filters."""

    def filters(self):
        return {"ogc_summary": ogc_summary, "gpu_offer": gpu_offer}
