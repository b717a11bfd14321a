# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""GPU health of a host: its PCI devices now (pci_passthrough facts) against its passthrough plan.

``facts | open_gpu_cloud.toolkit.gpu_health(plan, expected=None, host=None, reference='plan file')`` -> report::

    host: seed-v100
    reference: plan file            # where the plan came from (the plan file, or the current tree)
    expected: 4                     # GPUs Nova should have (health_expected_gpus, default len(plan.selected))
    found: 3                        # of the plan's selected GPUs, how many are on the bus now
    gpus: [{address, model, driver, present, for_nova, alias, vendor_id, product_id}]   # every selected /
                                    # vfio-bound device of the plan (alias and ids: null unless for_nova)
    problems: [{cause, host, address?, group?, driver?, message}]   # passthrough_verify(facts, plan)
    missing: ["0000:c3:00.0"]       # device_missing problems: in the plan, gone from the bus
    not_vfio: [{address, driver}]   # not_on_vfio problems: present, but not bound to vfio-pci
    alerts: ["seed-v100: GPU 0000:c3:00.0 (Tesla V100 PCIe 16GB) is gone from the PCI bus ..."]   # the
                                    # problems' messages, then the expected-count alert
    notes: [...]
    ok: false

``reports | open_gpu_cloud.toolkit.gpu_health_nova(nova, hosts_map)`` adds Nova's view (placement inventories of the PCI
resource classes, from os_pci_inventory) to the per-host reports, compares it with the plan both ways
(``nova_missing``: planned GPUs on the bus that Nova does not offer; ``nova_extra``: devices Nova offers
that the plan does not), then device by device with each provider's reservation and allocations
(``nova_devices``, one state each; ``nova_reserved``: reserved by an operator, an alert; ``nova_orphaned``:
allocated to a consumer that is neither a server nor a migration in progress, an alert;
``nova_waiting_return``: one-time-use devices waiting to be returned, a summary line), and returns the
summary lines and alerts.
Pure functions; every error names the host and what to fix.
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify as passthrough_verify
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.reset import RETURN_COMMAND
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_fence

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""


def _fail(host, message):
    raise AnsibleFilterError(f"gpu_health ({host or '?'}): {message}")


def gpu_health(facts, plan, expected=None, host=None, reference="plan file"):
    """Compare the devices on the bus now with the plan; see the module docstring for the result.

    What is wrong with the devices is ``passthrough_verify``'s answer (plugins/module_utils/passthrough/verify.py,
    the same function the host role's verification asks): its problems are the alerts, ``missing`` and
    ``not_vfio`` list its ``device_missing`` and ``not_on_vfio`` problems. Health adds only what is its own:
    the inventory of planned devices and the count against ``health_expected_gpus``.
    """
    if not isinstance(facts, dict) or not isinstance(facts.get("devices"), list):
        _fail(host, "facts must be the pci_passthrough facts (a dict with 'devices'); run pci_passthrough_facts on "
                    "the host first")
    if not isinstance(plan, dict) or not isinstance(plan.get("selected"), list):
        _fail(host, "plan must be a passthrough plan (a dict with 'selected'); run the plan phase (playbooks/plan.yml) "
                    "while the host is healthy, or let the health play plan from the current tree")
    host = host or plan.get("host") or "?"
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int) or expected < 0):
        _fail(host, f"health_expected_gpus must be a whole number >= 0, got {expected!r}")
    try:
        problems = passthrough_verify.verify(facts, plan, host=host)
    except passthrough_verify.VerifyError as exc:
        _fail(host, str(exc))
    now = dict((d.get("address"), d) for d in facts["devices"])
    selected = [s["address"] for s in plan["selected"]]
    models = dict((s["address"], s.get("model") or f"{s.get('vendor_id')}:{s.get('product_id')}")
                  for s in plan["selected"])
    ids = dict((s["address"], s) for s in plan["selected"])
    vfio = list(plan.get("vfio_devices") or [])
    report = dict(host=host, reference=reference, expected=len(selected) if expected is None else expected,
                  gpus=[], problems=problems, alerts=[p["message"] for p in problems], notes=[],
                  missing=[p["address"] for p in problems if p["cause"] == "device_missing"],
                  not_vfio=[dict(address=p["address"], driver=p.get("driver"))
                            for p in problems if p["cause"] == "not_on_vfio"])
    for address in selected + [a for a in vfio if a not in selected]:
        dev = now.get(address)
        report["gpus"].append(dict(address=address, model=models.get(address), present=dev is not None,
                                   driver=dev.get("driver") if dev else None, for_nova=address in selected,
                                   alias=ids.get(address, {}).get("alias"),
                                   vendor_id=ids.get(address, {}).get("vendor_id"),
                                   product_id=ids.get(address, {}).get("product_id")))
    report["found"] = sum(1 for a in selected if a in now)
    if report["found"] < report["expected"]:
        report["alerts"].append(f"{host}: {report['found']} of {report['expected']} expected GPUs for Nova are on the "
                                f"bus{' (health_expected_gpus)' if expected is not None else ''}")
    elif expected is not None and len(selected) > expected:
        report["notes"].append(f"{host}: the plan gives Nova {len(selected)} GPUs, more than "
                               f"health_expected_gpus={expected}")
    if reference != "plan file":
        report["notes"].append(f"{host}: no plan file: compared with a plan of the current tree, which cannot show a "
                               "GPU that is already gone; write one with playbooks/plan.yml while the host is healthy")
    report["ok"] = not report["alerts"]
    return report


def _device_findings(report, name, devices, planned, offered, fenced=()):
    """Nova's devices of hypervisor ``name``, device by device: report keys ``nova_devices`` ([{address, planned,
    state, provider, uuid, resource_class, consumers}], every planned device and every device of the hypervisor,
    by address, one state each: ``missing`` (planned, no provider), ``fenced`` (reserved, with a fence record of
    ours: ``fenced``, its addresses) or os_pci_inventory's state), ``nova_reserved``,
    ``nova_waiting_return`` and ``nova_orphaned`` ([{address, consumer}]); returns (alerts, lines)."""
    host = report["host"]
    own = [d for d in devices if d.get("host") == name]
    named = {}
    for device in own:
        address = device.get("name", "")[len(name) + 1:].lower() if offered is not None and \
            device.get("name", "").startswith(name + "_") else None
        named[address or device.get("name")] = device
    entries = [dict(address=a, planned=True, state="missing", provider=None, uuid=None, resource_class=None,
                    consumers=[]) for a in planned if offered is not None and a not in offered]
    for label in sorted(named):
        device = named[label]
        state = device.get("state") or ("in_use" if device.get("used") else "free")
        if label in fenced and state in ("reserved", "waiting_return"):
            state = "fenced"  # our own reservation, with its reason in the fence record: not an operator's
        entries.append(dict(address=label, planned=label in planned, state=state, provider=device.get("name"),
                            uuid=device.get("uuid"), resource_class=device.get("resource_class"),
                            consumers=[c.get("uuid") for c in device.get("consumers") or []]))
    entries.sort(key=lambda e: e["address"])
    report["nova_devices"] = entries
    report["nova_reserved"] = [e["address"] for e in entries if e["state"] == "reserved"]
    report["nova_waiting_return"] = [e["address"] for e in entries if e["state"] == "waiting_return"]
    report["nova_orphaned"] = [dict(address=label, consumer=c["uuid"]) for label in sorted(named)
                               for c in named[label].get("consumers") or [] if c.get("kind") == "none"]
    alerts, lines = [], []
    for address in report["nova_reserved"]:
        device = named[address]
        alerts.append(
            f"{host}: Nova's device {address} on {name} is reserved in placement (provider {device.get('name')}, "
            f"{device.get('resource_class')} reserved={device.get('reserved')}) and is not a one-time-use device, so "
            "Nova gives it to no server: an operator's reservation; when it is no longer wanted, return it with "
            f"`{RETURN_COMMAND.format(uuid=device.get('uuid'), rc=device.get('resource_class'))}`")
    for orphan in report["nova_orphaned"]:
        device = named[orphan["address"]]
        consumer = orphan["consumer"]
        alerts.append(
            f"{host}: Nova's device {orphan['address']} on {name} is allocated in placement (provider "
            f"{device.get('name')}) to consumer {consumer}, which is neither a server nor a migration in progress "
            "(an allocation left behind by a failed delete or move), so Nova gives the device to no one: check with "
            f"`openstack server show {consumer}` and `openstack resource provider allocation show {consumer}`, then "
            f"remove its allocations with `openstack resource provider allocation delete {consumer}`")
    if report["nova_waiting_return"]:
        waiting = [named[a] for a in report["nova_waiting_return"]]
        lines.append(
            f"{host}: {len(waiting)} one-time-use device(s) on {name} used and waiting to be returned: "
            + ", ".join(f"{a} (provider {d.get('uuid')}, {d.get('resource_class')})"
                        for a, d in zip(report["nova_waiting_return"], waiting))
            + "; reset and return them with `ansible-playbook playbooks/return_gpus.yml -i inventory/<env>` (or, once "
            f"cleaned by hand, `{RETURN_COMMAND.format(uuid='<provider>', rc='<class>')}`)")
    return alerts, lines


def _nova_addresses(devices, hypervisor):
    """PCI addresses of a hypervisor's device providers in placement (Nova names them "<hypervisor>_<address>");
    None when none of its providers is named that way (e.g. vGPU classes on the compute node itself)."""
    prefix = hypervisor + "_"
    named = [d.get("name", "") for d in devices if d.get("host") == hypervisor]
    # Placement upper-cases the hex digits of the address in the provider's name.
    addresses = set(n[len(prefix):].lower() for n in named if n.startswith(prefix))
    return addresses if addresses else None


def gpu_health_nova(reports, nova, host_map=None, fences=None, check_mode=False):
    """Add Nova's view to the per-host reports; returns {reports, lines, alerts}.

    nova: the result of os_pci_inventory ({available, hosts: {hypervisor: {resource_class: {total, used, ...}}},
    devices: [{name, uuid, host, resource_class, total, reserved, used, free, consumers, state, ...}], note}).
    host_map: {inventory host: hypervisor name} (default the same name).

    Both sides are compared: a GPU the plan gives Nova that is on the bus but not in placement, and a device
    Nova offers that the plan does not give it, are alerts naming host and address (report keys
    ``nova_missing`` and ``nova_extra``); so is a host whose plan gives Nova GPUs but that placement does not
    know at all. Where placement's device providers are not named per address, the counts are compared.
    Device by device (os_pci_inventory's ``state``): a device reserved by an operator and one allocated to a
    consumer that is neither a server nor a migration in progress are alerts naming host, address (consumer)
    and the command that fixes it; one-time-use devices waiting to be returned get a summary line. ``nova``
    counts them too (``reserved``, ``waiting_return``, ``orphan_allocations``), for the metrics.

    fences: os_pci_fence's result (None: not run; check_mode: it ran in check mode). A device with a fence record
    of ours is ``fenced``, not an operator's reservation; each fenced device, and each failed device a server
    holds (not fenced, deferred), is an alert naming host, address, provider and the reason (report key
    ``nova_fenced``; ``nova.fenced`` [{address, cause}] and ``nova.fence_deferred`` [address], for the metrics).
    """
    if not isinstance(reports, list):
        raise AnsibleFilterError("gpu_health_nova: reports must be the list of per-host gpu_health reports")
    host_map = host_map or {}
    nova = nova or {}
    hosts = nova.get("hosts") or {}
    devices = nova.get("devices") or []
    out, lines, alerts = [], [], []
    for report in reports:
        report = dict(report)
        name = host_map.get(report["host"], report["host"])
        view = hosts.get(name)
        own_alerts = list(report.get("alerts", []))
        report_alerts = []  # Nova's side; listed before the host's own, as the summary reads
        line = f"{report['host']}: {report['found']}/{report['expected']} GPUs for Nova on the bus"
        planned = [g["address"] for g in report.get("gpus", []) if g.get("for_nova")]
        on_bus = [g["address"] for g in report.get("gpus", []) if g.get("for_nova") and g.get("present")]
        extra_lines = []
        if view is not None:
            total = sum(v.get("total", 0) for v in view.values())
            used = sum(v.get("used", 0) for v in view.values())
            free = sum(v.get("free", max(v.get("total", 0) - v.get("used", 0), 0)) for v in view.values())
            offered = _nova_addresses(devices, name)
            findings = pci_fence.host_findings(fences, report["host"], check_mode)
            device_alerts, extra_lines = _device_findings(report, name, devices, planned, offered,
                                                          set(f["address"] for f in findings["fenced"]))
            fence_alerts, fence_lines = pci_fence.alerts_and_lines(report["host"], name, findings,
                                                                   (fences or {}).get("records_dir"))
            device_alerts += fence_alerts
            extra_lines += fence_lines
            report["nova_fenced"] = [f["address"] for f in findings["fenced"]]
            report["nova"] = dict(hypervisor=name, total=total, used=used, free=free, classes=view,
                                  reserved=len(report["nova_reserved"]),
                                  waiting_return=len(report["nova_waiting_return"]),
                                  orphan_allocations=len(report["nova_orphaned"]),
                                  fenced=[dict(address=f["address"], cause=f["cause"]) for f in findings["fenced"]],
                                  fence_deferred=[d["address"] for d in findings["deferred"]])
            line += f"; Nova (placement, {', '.join(sorted(view))}): {total} total, {used} used, {free} free"
            if report["nova_waiting_return"]:
                line += f", {len(report['nova_waiting_return'])} waiting to be returned"
            if offered is not None:
                report["nova_missing"] = [a for a in on_bus if a not in offered]
                report["nova_extra"] = sorted(offered - set(planned))
                for address in report["nova_missing"]:
                    report_alerts.append(
                        f"{report['host']}: GPU {address} is on the bus and in the passthrough plan, but Nova does not "
                        f"offer it (no placement provider {name}_{address}): check [pci] device_spec in "
                        f"nova/{name}/nova.conf (playbooks/nova.yml, then kolla-ansible reconfigure) and restart "
                        "nova-compute")
                for address in report["nova_extra"]:
                    report_alerts.append(
                        f"{report['host']}: Nova offers device {address} on {name}, which the passthrough plan does "
                        "not give it (a device_spec wider than the plan, or a stale override): render the overrides "
                        "again (playbooks/nova.yml), reconfigure nova-compute there, and check no server uses it")
            elif total != report["found"]:
                report_alerts.append(f"{report['host']}: Nova counts {total} passthrough GPUs on {name} but "
                                     f"{report['found']} of the plan's are on the bus; restart nova-compute there "
                                     "after fixing the host so Nova's count is right")
            report_alerts += device_alerts
        elif nova.get("available"):
            line += f"; Nova: no PCI devices reported for hypervisor {name}"
            if planned:
                report["nova_missing"] = on_bus
                report_alerts.append(
                    f"{report['host']}: the plan gives Nova {len(planned)} GPU(s) but placement has no PCI device of "
                    f"hypervisor {name}: check that nova-compute runs there with the rendered [pci] device_spec and "
                    "report_in_placement, or set health_nova_host if its hypervisor name differs")
        report_alerts += own_alerts
        report["alerts"] = report_alerts
        report["ok"] = not report_alerts
        line += "; OK" if not report_alerts else f"; {len(report_alerts)} alert(s)"
        lines.append(line)
        lines.extend(extra_lines)
        alerts.extend(report_alerts)
        out.append(report)
    if nova.get("note"):
        lines.append(f"Nova: {nova['note']}")
    error = pci_fence.host_findings(fences, None)["error"]
    if error:
        alerts.append(f"{error}: failed GPUs may still take new servers; fix it and run the health check again")
    return dict(reports=out, lines=lines + ["ALERT " + a for a in alerts], alerts=alerts)


def gpu_fence_requests(summary):
    """os_pci_fence's devices from gpu_health_nova's answer (pci_fence.requests): the planned devices health found
    failed (fenced) or repaired (unfenced)."""
    if not isinstance(summary, dict) or not isinstance(summary.get("reports"), list):
        raise AnsibleFilterError("gpu_fence_requests: expects gpu_health_nova's answer ({reports, lines, alerts}), got "
                                 f"{type(summary).__name__}")
    return pci_fence.requests(summary["reports"])


class FilterModule:
    """GPU health filters."""

    def filters(self):
        return {"gpu_health": gpu_health, "gpu_health_nova": gpu_health_nova, "gpu_fence_requests": gpu_fence_requests}
