# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Is this host as planned? One pure function, ``verify(facts, plan) -> problems``.

The host role's verification after the reboot (``roles/passthrough_host/tasks/verify.yml``) and the
day-2 health check (``plugins/filter/gpu_health.py``) both ask it; YAML asserts its answer and never
restates a rule. Bridges, display devices and slots are told apart by the planner's own rules
(``plugins/module_utils/passthrough/rules.py``).

``facts`` are ``ansible_facts.pci_passthrough`` read now; ``plan`` is the plan the host was configured
from (the plan file, or the plan the run applied). Each problem is a dict::

    {cause: device_missing, host: seed, address: "0000:c3:00.0", message: "seed: GPU 0000:c3:00.0 ..."}

with ``group`` and ``driver`` where they apply, and a ``message`` that names the host and the fix.
The causes, in the order they are reported:

``iommu_inactive``
    the kernel shows no IOMMU groups. vfio-pci cannot bind without an IOMMU, so the binding and group
    checks are left out then (they would only repeat it).
``device_missing``
    a device of the plan (selected for Nova, or to bind to vfio-pci) is not on the PCI bus.
``not_on_vfio``
    a device of the plan is on the bus but not bound to vfio-pci (a host driver, or none).
``group_member_on_host_driver``
    another endpoint of a selected GPU's IOMMU group uses a host driver: no VM can start with the GPU.
    PCI bridges need nothing; a device already reported as ``not_on_vfio`` is not repeated.
``nothing_selected``, ``plan_changed``
    only with ``fresh`` (the plan made again from these facts, ``passthrough_plan(facts, policy)``) and
    only when nothing above is wrong (those would change the plan too): the fresh plan selects nothing,
    or it differs from ``plan`` (something still pending, another selection when ``plan`` was made with
    the IOMMU on, or other devices, IDs, kernel arguments or blacklist).
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import rules, settle

__all__ = ["CAUSES", "COMPARED_KEYS", "VerifyError", "verify"]

CAUSES = ("iommu_inactive", "device_missing", "not_on_vfio", "group_member_on_host_driver", "nothing_selected",
          "plan_changed")
# What a configured host is built from: when the fresh plan differs here, the configuration is stale.
COMPARED_KEYS = ("vfio_ids", "bind_by_address", "vfio_devices", "kernel_args", "blacklist_modules")


class VerifyError(ValueError):
    """Input that is not facts or a plan, worded for the operator (the host, what to pass)."""


def _fail(host, message):
    raise VerifyError(f"passthrough_verify: host {host or '?'}: {message}")


def _check_plan(plan, host, name):
    if not isinstance(plan, dict):
        _fail(host, f"{name} must be a passthrough plan (a dict from the passthrough_plan filter or a plan file), "
                    f"got {type(plan).__name__}; run ansible-playbook playbooks/plan.yml --limit {host or '<host>'}")
    for key in ("selected", "vfio_devices"):
        if not isinstance(plan.get(key), list):
            _fail(host, f"{name} has no list {key!r}: it is not a passthrough plan; write it again with "
                        f"ansible-playbook playbooks/plan.yml --limit {host or '<host>'}")
    for entry in plan["selected"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            _fail(host, f"{name}.selected has {entry!r}, which is not a selected device (a dict with its address)")
    for address in plan["vfio_devices"]:
        if not isinstance(address, str):
            _fail(host, f"{name}.vfio_devices has {address!r}, which is not a PCI address string")


def _check_input(facts, plan, host, fresh):
    if not isinstance(facts, dict) or not isinstance(facts.get("devices"), list) or "iommu_enabled" not in facts:
        _fail(host, "facts must be the pci_passthrough facts (a dict with devices and iommu_enabled); run "
                    "pci_passthrough_facts on the host and pass ansible_facts.pci_passthrough")
    for dev in facts["devices"]:
        if not isinstance(dev, dict) or not isinstance(dev.get("address"), str):
            _fail(host, f"malformed device entry {dev!r} in the facts: each needs its address")
    _check_plan(plan, host, "plan")
    if fresh is not None:
        _check_plan(fresh, host, "fresh")


def _problem(cause, host, message, **fields):
    out = {"cause": cause, "host": host}
    out.update((k, v) for k, v in fields.items() if v is not None)
    out["message"] = message
    return out


def _unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# What a virtual machine without an IOMMU is told (the facts' ``hypervisor``: the CPU's hypervisor flag): no firmware
# setup of its own switches one on. Also the host role's preflight (plugins/filter/passthrough_host_checks.py).
VM_IOMMU_FIX = ("This host is itself a virtual machine (the hypervisor flag in /proc/cpuinfo): its IOMMU can only be "
                "a virtual one that its hypervisor offers. Give the VM a virtual IOMMU there, or use a bare-metal host "
                "for gpu_hosts (remove this one from the group), then run this play again.")


def verify(facts, plan, host=None, fresh=None):
    """The problems of a host against its plan, as a list of dicts (empty when the host is as planned).

    :param facts: ``ansible_facts.pci_passthrough`` read now.
    :param plan: the plan the host was configured from.
    :param host: the inventory name (default ``plan["host"]``), named in every message.
    :param fresh: optional plan made again from ``facts`` with the host's policy: also check the plan holds.
    :raises VerifyError: facts or plans that are not what the filters produce, naming the host.
    """
    host = host or (plan.get("host") if isinstance(plan, dict) else None)
    _check_input(facts, plan, host, fresh)
    now = {d["address"]: d for d in facts["devices"]}
    models = {s["address"]: s.get("model") or f"{s.get('vendor_id')}:{s.get('product_id')}" for s in plan["selected"]}
    selected = _unique([s["address"] for s in plan["selected"]]
                       + [s["address"] for s in (fresh or {}).get("selected", [])])
    expected = _unique(selected + list(plan["vfio_devices"]))

    def what(address):
        if address in models:
            return f"GPU {address} ({models[address]})"
        return f"GPU {address}" if address in selected else f"device {address}"

    problems = []
    iommu = bool(facts["iommu_enabled"])
    if not iommu:
        cmdline = " ".join(facts.get("kernel_cmdline") or [])
        # What no reboot can change is settle.py's rule (the planner's): a bare-metal host whose firmware shows no
        # DMAR/IVRS table is told so.
        tables = next((" (" + b["reason"].split(": ", 1)[1] + ")" for b in settle.reboot_blockers(facts)
                       if b["cause"] == "iommu_off_in_firmware" and facts.get("iommu_firmware") == "none"), "")
        problems.append(_problem(
            "iommu_inactive", host,
            f'{host}: the IOMMU is still inactive after booting with "{cmdline}" (no /sys/kernel/iommu_groups)'
            + (". " + VM_IOMMU_FIX if facts.get("hypervisor") is True else
               f"{tables}: enable AMD-Vi/IOMMU or VT-d in the firmware setup (passthrough_host_bmc_address can do it through "
               "the BMC), reboot, and run this play again.")))
    args = " ".join(plan.get("kernel_args") or []) or "-"
    not_vfio = set()
    for address in expected:
        dev = now.get(address)
        for_nova = address in selected
        if dev is None:
            problems.append(_problem(
                "device_missing", host,
                f"{host}: {what(address)} is gone from the PCI bus (fallen off the bus?); it is in the passthrough "
                f"plan{' and Nova counts on it' if for_nova else ''}. Check the kernel log (Xid/AER errors), then "
                "reseat the card or power-cycle the host", address=address))
        elif iommu and dev.get("driver") != "vfio-pci":
            not_vfio.add(address)
            driver = dev.get("driver")
            problems.append(_problem(
                "not_on_vfio", host,
                f"{host}: {what(address)} is bound to {driver or 'no driver'}, not vfio-pci: a VM cannot use it"
                f"{'' if for_nova else ' nor its IOMMU group'}; check the vfio-pci options and the initramfs the host "
                f"phase wrote and that the running kernel command line carries {args}, then run the host phase "
                "again (it reboots when needed)", address=address, group=dev.get("iommu_group"), driver=driver))
    if iommu:
        groups = _unique(str(now[a]["iommu_group"]) for a in selected
                         if a in now and now[a].get("iommu_group") is not None)
        for dev in sorted(facts["devices"], key=lambda d: d["address"]):
            group = dev.get("iommu_group")
            if group is None or str(group) not in groups or rules.is_bridge(dev) or dev["address"] in not_vfio:
                continue
            driver = dev.get("driver")
            if driver and driver != "vfio-pci":
                problems.append(_problem(
                    "group_member_on_host_driver", host,
                    f"{host}: {dev['address']} (group {group}) is on {driver}: a VM cannot start while a device of its "
                    "group uses a host driver. Bind it to vfio-pci (make the plan again: ansible-playbook "
                    f"playbooks/plan.yml --limit {host}; it should list it in vfio_devices).",
                    address=dev["address"], group=str(group), driver=driver))
    if problems or fresh is None:
        return problems
    return _plan_holds(plan, fresh, host)


def _plan_holds(plan, fresh, host):
    """nothing_selected / plan_changed: the fresh plan against the one the host was configured from."""
    problems = []
    now = [s["address"] for s in fresh["selected"]]
    before = [s["address"] for s in plan["selected"]]
    if not now:
        why = "; ".join(list(fresh.get("notes") or []) + [e.get("reason", "") for e in fresh.get("excluded") or []])
        problems.append(_problem(
            "nothing_selected", host,
            f"{host}: the plan from the fresh facts selects no device for Nova ({why or 'no display device found'}). "
            f"The IOMMU groups may have changed with the reboot: look at the plan (ansible-playbook playbooks/plan.yml "
            f"--limit {host}) and run this play again."))
    changed = [key for key in COMPARED_KEYS if fresh.get(key) != plan.get(key)]
    if plan.get("iommu_enabled") and now != before:
        changed.insert(0, "selected")
    pending = list(fresh.get("pending") or [])
    if pending:
        changed.insert(0, "pending")
    if changed:
        notes = "; ".join(fresh.get("notes") or [])
        problems.append(_problem(
            "plan_changed", host,
            f"{host}: the plan from the fresh facts differs from the one this run applied (still pending: "
            f"{'; '.join(pending) or 'nothing'}; selected now: {', '.join(now) or 'none'}, before: "
            f"{', '.join(before) or 'none'}{'; ' + notes if notes else ''}). The IOMMU groups may have changed with "
            "the reboot: run this play again to apply the new plan.", changed=changed))
    return problems
