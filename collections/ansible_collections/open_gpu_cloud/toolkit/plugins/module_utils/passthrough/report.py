# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The per-host report of a plan: ``plan_table`` (rows: address, model, group, driver, window, reset, verdict,
reason) and ``plan_report`` (those rows as a fixed-width table plus the plan's key decisions). The fleet report
(``fleet.py``, filter ``fleet_report``) lays out the same rows."""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars as pci_bars
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.rules import class_name, model_name


def window_text(dev):
    """A device's largest 64-bit memory window as ``lspci`` sizes it (``16G``), ``-`` without one, ``?`` when the
    facts lack its windows (a capture taken before discovery read them)."""
    bars = dev.get("bars")
    if bars is None:
        return "?"
    windows = pci_bars.high_windows(bars)
    return pci_bars.size_text(max(windows)) if windows else "-"


def reset_text(dev):
    """A device's reset methods (``flr,bus``), ``none`` when the kernel has no usable reset for it, ``?`` when the
    facts do not say."""
    methods = dev.get("reset_methods")
    if methods is None:
        return "?"
    return ",".join(methods) or "none"


def plan_table(plan, facts):
    """Rows for the per-host report: address, model, group, driver, window (``window_text``), reset
    (``reset_text``), verdict, reason."""
    by_addr = {d["address"]: d for d in facts.get("devices", [])}
    selected = {s["address"]: s for s in plan["selected"]}
    reasons = {e["address"]: e["reason"] for e in plan["excluded"]}
    rows = []
    shown = set(selected) | set(reasons) | set(plan["vfio_devices"])
    for address in sorted(shown):
        dev = by_addr.get(address, {})
        model_id = f"{dev.get('vendor_id')}:{dev.get('product_id')}"
        model = model_name(dev) or f"{class_name(dev.get('class_id', '000000'))} {model_id}"
        if address in selected:
            verdict, reason = "nova", f"alias {selected[address]['alias']} ({selected[address]['device_type']})"
        elif address in plan["vfio_devices"]:
            verdict = "vfio"
            reason = reasons.get(address, "another function of a passed card")
        else:
            verdict, reason = "host", reasons.get(address, "")
        rows.append({"address": address, "model": model, "group": dev.get("iommu_group") or "-",
                     "driver": dev.get("driver") or "-", "window": window_text(dev), "reset": reset_text(dev),
                     "verdict": verdict, "reason": reason})
    return rows


def plan_report(plan, facts):
    """A readable fixed-width table of ``plan_table`` rows plus the plan's key decisions (one string)."""
    rows = plan_table(plan, facts)
    headers = ("address", "model", "group", "driver", "window", "reset", "verdict", "reason")
    widths = [max([len(h)] + [len(str(r[h])) for r in rows]) for h in headers[:-1]]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers[:-1], widths)) + "  REASON"]
    for row in rows:
        lines.append("  ".join(str(row[h]).ljust(w) for h, w in zip(headers[:-1], widths)) + "  " + row["reason"])
    lines.append(f"offered to Nova: {len(plan['selected'])} GPU(s)"
                 + (f" as {', '.join(a['name'] + ' (' + a['device_type'] + ')' for a in plan['aliases'])}" if plan["aliases"] else ""))
    if plan.get("guest_phys_bits_needed") is not None:
        lines.append(f"guest physical address bits needed: {plan['guest_phys_bits_needed']}"
                     + (f" ({plan['ovmf_phys_bits_needed']} under UEFI: hw:maxphysaddr_bits)"
                        if plan.get("ovmf_phys_bits_needed") is not None else ""))
    no_reset = [s["address"] for s in plan["selected"] if s.get("resettable") is False]
    if no_reset:
        lines.append(f"offered without a usable reset: {' '.join(no_reset)}")
    lines.append(f"kernel args: {' '.join(plan['kernel_args']) or '-'}")
    if plan["bind_by_address"]:
        lines.append(f"bound by address: {' '.join(plan['bind_by_address'])}")
    blocked = plan.get("blocked_by") or []
    lines.append(f"reboot required: {'yes' if plan['reboot_required'] else 'no'}"
                 + (" (no reboot can help: the host phase leaves this host as it is)" if blocked else ""))
    lines.extend(f"  blocked by {b['cause']}: {b['reason']}; first, {b['fix']}" for b in blocked)
    lines.extend(f"  pending: {p}" for p in plan["pending"])
    lines.extend(f"note: {n}" for n in plan["notes"])
    return "\n".join(lines)
