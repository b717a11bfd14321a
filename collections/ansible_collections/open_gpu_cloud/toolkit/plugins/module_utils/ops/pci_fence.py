# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Fencing failed GPUs in Placement (playbooks/health.yml, plugins/modules/os_pci_fence.py).

A GPU that fails (gone from the PCI bus, no longer on vfio-pci, a reset that failed) stays schedulable: Nova keeps
offering its device provider. A fence stops that without touching a running server: the provider's inventory gets
``reserved`` = ``total`` (Nova 2026.1 never overrides an inventory's reserved: "the operator controls reserved",
``nova/compute/pci_placement_translator.py``), and the reason goes into a fence record this project owns on the
control host (Nova rewrites a provider's traits, so no reason can live in a trait).

The fence record, one file per inventory host, ``<records_dir>/<host>.json`` (mode 0644, written atomically)::

    {"format": 1, "host": "gpu01",
     "fences": [{"address": "0000:44:00.0", "provider": "<uuid>", "name": "gpu01_0000:44:00.0",
                 "resource_class": "CUSTOM_GPU_TESLA_V100", "cause": "gone_from_bus",
                 "reason": "gpu01: GPU 0000:44:00.0 ... is gone from the PCI bus ...",
                 "since": "2026-11-28T06:40:00Z", "reserved_by_fence": true, "reserved_before": 0}]}

``reserved_by_fence`` says whether the fence wrote ``reserved``: false when the device was reserved already (an
operator's reservation, or a one-time-use device Nova reserved after use): lifting such a fence only drops the
record and leaves Placement as the fence found it. ``reserved_before`` is what the fence found (0 for a free GPU):
lifting a fence that wrote ``reserved`` puts that back.

The rules, pure: ``judge_fence`` (fence, record only, leave, or defer a device a server holds: a fence never frees or
disturbs an allocated device) and ``judge_unfence`` (lift only what a record of ours says we fenced, and only for
the causes the caller may lift). os_pci_fence runs them on the resource protocol of openstack_cloud as os_pci_return
does (read each provider's inventory, traits, allocations and usages; PUT with the generation read; a generation
conflict reads again and judges again). ``requests`` turns the health summary into the module's devices;
``summary`` the module's result into alerts, lines and the counts of the metrics.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova.placement_api import placement_get
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops.pci_return import (
    CONCURRENT_UPDATE, CONFLICT_PAUSE, MAX_CONFLICT_RETRIES, PLACEMENT_MICROVERSION, inventory_with_reserved)

FORMAT = 1
RECORD_MODE = 0o644
# Why a device is fenced; health lifts the first two once the device is back on the bus and on vfio-pci. A failed
# reset is not seen on the bus: its fence is lifted by hand (docs/ops.md, "Fencing a failed GPU").
CAUSES = ("gone_from_bus", "not_on_vfio", "reset_failed")
HEALTH_LIFTS = ("gone_from_bus", "not_on_vfio")
GUIDE = 'docs/ops.md, "Fencing a failed GPU"'  # where an operator reads what a fence is and how to lift one
_HOST = re.compile(r"^[A-Za-z0-9_.-]+$")
_SINCE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")

ARGUMENT_SPEC = dict(
    records_dir=dict(type="path", required=True),
    devices=dict(type="list", elements="dict", default=[], options=dict(
        host=dict(type="str", required=True),
        address=dict(type="str", required=True),
        uuid=dict(type="str", required=True),
        resource_class=dict(type="str", required=True),
        name=dict(type="str"),
        state=dict(type="str", required=True, choices=["fenced", "unfenced"]),
        cause=dict(type="str", choices=list(CAUSES)),
        reason=dict(type="str"),
    )),
    lift_causes=dict(type="list", elements="str", default=list(HEALTH_LIFTS)),
    conflict_retries=dict(type="int", default=3),
)


class RecordError(ValueError):
    """A fence record that is not one this project wrote; the message names the file and the fix."""


# --------------------------------------------------------------------------- the record

def record_path(records_dir, host):
    """``<records_dir>/<host>.json``; ValueError for a host name that is no file name."""
    if not isinstance(host, str) or not _HOST.match(host):
        raise ValueError(f"host {host!r} is not an inventory host name usable as a file name")
    return os.path.join(records_dir, f"{host}.json")


def entry(device, since, reserved_by_fence, reserved_before=0):
    """The record's entry for one fenced device."""
    return dict(address=device["address"], provider=device["uuid"], name=device["name"],
                resource_class=device["resource_class"], cause=device["cause"], reason=device["reason"],
                since=since, reserved_by_fence=bool(reserved_by_fence), reserved_before=int(reserved_before))


def validate_record(record, where):
    """The record's fences ([entry]); RecordError naming ``where`` and the fix when it is not ours."""
    fix = (f"{where} is not a fence record this project wrote: restore it from a backup, or remove it once every "
           "device it fenced is checked (docs/ops.md, \"Fencing a failed GPU\")")
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("fences"), list):
        raise RecordError(f"{fix} (expected {{\"format\": {FORMAT}, \"host\": ..., \"fences\": [...]}})")
    for index, item in enumerate(record["fences"]):
        ok = isinstance(item, dict) and pci_address.is_address(item.get("address")) and all(
            isinstance(item.get(key), str) and item.get(key) for key in ("provider", "resource_class", "reason"))
        ok = ok and item.get("cause") in CAUSES and isinstance(item.get("reserved_by_fence"), bool)
        ok = ok and isinstance(item.get("since"), str) and bool(_SINCE.match(item["since"]))
        before = item.get("reserved_before", 0)
        ok = ok and isinstance(before, int) and not isinstance(before, bool) and before >= 0
        if not ok:
            raise RecordError(f"{fix} (fences[{index}] lacks address, provider, resource_class, cause, reason, since, "
                              "reserved_by_fence or reserved_before)")
    return record["fences"]


def render_record(host, fences):
    """The file's text: sorted by address, stable (a run that changes nothing writes the same bytes)."""
    return json.dumps(dict(format=FORMAT, host=host, fences=sorted(fences, key=lambda f: f["address"])),
                      indent=1, sort_keys=True) + "\n"


def read_records(records_dir, hosts=None):
    """{host: [entry]} of the records in ``records_dir`` (every ``*.json``, or those of ``hosts``); a missing
    directory is no record. RecordError for a file that cannot be read or is not ours."""
    if not os.path.isdir(records_dir):
        return {}
    names = sorted(n[:-5] for n in os.listdir(records_dir) if n.endswith(".json") and not n.startswith("."))
    out = {}
    for host in names if hosts is None else [h for h in names if h in set(hosts)]:
        path = os.path.join(records_dir, f"{host}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError) as exc:
            raise RecordError(f"fence record {path} cannot be read ({exc}): fix its permissions or content, or "
                              "remove it once every device it fenced is checked") from None
        out[host] = validate_record(record, f"fence record {path}")
    return out


def write_record(records_dir, host, fences):
    """Write (or, with no fence left, remove) the host's record atomically, mode 0644; the directory is made."""
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host.files import plain_move, replace_file

    path = record_path(records_dir, host)
    if not fences:
        if os.path.exists(path):
            os.unlink(path)
        return
    os.makedirs(records_dir, mode=0o755, exist_ok=True)
    replace_file(path, render_record(host, fences), RECORD_MODE, plain_move)


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- the rules (pure)

def allocated(view):
    return bool(view.get("consumers")) or int(view.get("used") or 0) > 0


def judge_fence(name, view, record):
    """Fence this failed device, or not: (verdict, reason).

    view: {inventory: {total, reserved, ...}, consumers: [uuid], used: n} as read from Placement, or None when
    Placement has no such provider; record: our fence record's entry for it, or None. Verdicts:

    * ``absent``: Placement has no provider: Nova offers it to no one, nothing to fence;
    * ``unchanged``: fenced already (a record, and reserved = total where the fence wrote it);
    * ``defer``: allocated to a server (or a migration): a fence never frees or disturbs it; it is fenced once its
      server is gone (the next health run);
    * ``record``: reserved already by someone else (an operator, or Nova after a one-time-use): the record only,
      Placement untouched (``reserved_by_fence`` false);
    * ``fence``: reserved = total in Placement, and the record (``reserved_by_fence`` true)."""
    if view is None:
        return "absent", f"{name}: Placement has no provider of it: Nova offers it to no server, nothing to fence"
    inventory = view.get("inventory") or {}
    total, reserved = int(inventory.get("total") or 0), int(inventory.get("reserved") or 0)
    if record is not None and (not record.get("reserved_by_fence") or reserved >= total):
        return "unchanged", ""
    if allocated(view):
        held = ", ".join(view.get("consumers") or []) or f"usage {view.get('used')}"
        return "defer", (f"{name} is allocated ({held}): not fenced now, so its server keeps it untouched; it is "
                         "fenced once its server is gone (the next health run)")
    if reserved >= total and record is None:
        return "record", ""
    return "fence", ""


def judge_unfence(name, view, record, lift_causes=HEALTH_LIFTS):
    """Lift the fence of this repaired device, or not: (verdict, reason). Only what a record of ours says we
    fenced, and only for a cause in ``lift_causes``; never a device without a record (an operator's reservation, a
    one-time-use device waiting to be returned). Verdicts:

    * ``unchanged``: no record of ours: nothing to lift;
    * ``keep``: fenced for a cause the caller may not lift (a failed reset is lifted by hand);
    * ``forget``: the record only (the fence did not write reserved, or reserved is 0 already, or the provider is
      gone): Placement untouched;
    * ``unfence``: reserved back to what the fence found (``reserved_before``, 0 for a free GPU) and the record
      removed."""
    if record is None:
        return "unchanged", ""
    if record.get("cause") not in lift_causes:
        return "keep", (f"{name} is fenced for {record.get('cause')} ({record.get('reason')}): this run does not lift "
                        "that cause; lift it by hand once the device is repaired (docs/ops.md, \"Fencing a failed "
                        "GPU\")")
    if view is None or not record.get("reserved_by_fence"):
        return "forget", ""
    if int((view.get("inventory") or {}).get("reserved") or 0) <= int(record.get("reserved_before") or 0):
        return "forget", ""
    return "unfence", ""


def _key(device):
    return f"{device['host']}/{device['address']}"


# --------------------------------------------------------------------------- the protocol's steps

def prepare(params):
    """Each device named once, with a cause and a reason to fence it; the retries bounded; no API call."""
    errors, declared, seen = [], [], set()
    for index, item in enumerate(params["devices"]):
        where = f"devices[{index}]"
        address = pci_address.normalise_address(item.get("address"))
        if address is None:
            errors.append(f"{where}: address {item.get('address')!r} is not a PCI address like 0000:27:00.0")
            continue
        if not _HOST.match(str(item.get("host") or "")):
            errors.append(f"{where}: host {item.get('host')!r} is not an inventory host name")
            continue
        device = dict(item, address=address, name=item.get("name") or f"{item['host']} GPU {address}")
        if device["state"] == "fenced" and not (device.get("cause") and (device.get("reason") or "").strip()):
            errors.append(f"{where}: {device['name']}: a fence needs its cause ({', '.join(CAUSES)}) and a reason "
                          "an operator can read")
        if _key(device) in seen:
            errors.append(f"{where}: {device['name']} is named twice")
        seen.add(_key(device))
        declared.append(device)
    bad = [c for c in params["lift_causes"] if c not in CAUSES]
    if bad:
        errors.append(f"lift_causes: {', '.join(map(repr, bad))} not one of {', '.join(CAUSES)}")
    retries = params.get("conflict_retries")
    if retries is None or not 0 <= retries <= MAX_CONFLICT_RETRIES:
        errors.append(f"conflict_retries={retries} must be 0 to {MAX_CONFLICT_RETRIES}")
    if not os.path.isabs(params["records_dir"]):
        errors.append(f"records_dir {params['records_dir']!r} must be an absolute path on the control host, e.g. "
                      "/var/lib/open-gpu-cloud/fences")
    if errors:
        return None, dict(msg="invalid parameters, nothing was read or fenced: " + "; ".join(errors), errors=errors)
    return declared, None


def _get(cm, path, key=None):
    """One GET of Placement: the body (its ``key``), or None on a 404."""
    return placement_get(cm, path, PLACEMENT_MICROVERSION, key, missing=None)


def read_device(cm, device):
    """The device's inventory of its class, allocations and usage; None when Placement has no such provider (or it
    has no inventory of the class)."""
    base = f"/resource_providers/{device['uuid']}"
    inventory = _get(cm, f"{base}/inventories/{device['resource_class']}")
    if inventory is None:
        return None
    allocations = _get(cm, f"{base}/allocations", "allocations") or {}
    consumers = sorted(c for c, e in allocations.items()
                       if int(((e or {}).get("resources") or {}).get(device["resource_class"], 0)) > 0)
    usages = _get(cm, f"{base}/usages", "usages") or {}
    return dict(inventory=inventory, consumers=consumers, used=int(usages.get(device["resource_class"], 0)))


def read(cm, params, declared):
    """The records first (a bad one stops the run before any API call), then every device's view."""
    try:
        records = read_records(params["records_dir"])
    except RecordError as exc:
        cm.fail(str(exc))
    views = {}
    for device in declared:
        record = _record_of(records, device)
        if device["state"] == "unfenced" and record is None:
            views[_key(device)] = None  # nothing of ours: Placement is not even read
            continue
        views[_key(device)] = read_device(cm, device)
    return dict(records=records, views=views, devices=dict((_key(d), d) for d in declared), now=now_utc())


def _record_of(records, device):
    return next((f for f in records.get(device["host"]) or [] if f["address"] == device["address"]), None)


def judge(params, device, view, record):
    """(verdict, reason) of one device by its state."""
    if device["state"] == "fenced":
        return judge_fence(device["name"], view, record)
    return judge_unfence(device["name"], view, record, params["lift_causes"])


def make_plan(params, declared, state):
    """Pure: per device ``fenced``, ``unfenced`` (writes) or ``unchanged`` / ``deferred`` / ``kept`` / ``absent``;
    the diff shows each written device's ``reserved`` and record before and after."""
    actions, before, after, notes = [], {}, {}, {}
    for device in declared:
        key = _key(device)
        view, record = state["views"][key], _record_of(state["records"], device)
        verdict, reason = judge(params, device, view, record)
        reserved = int(((view or {}).get("inventory") or {}).get("reserved") or 0)
        total = int(((view or {}).get("inventory") or {}).get("total") or 0)
        if verdict in ("fence", "record"):
            actions.append(Action("fenced", device["name"], dict(key=key, verdict=verdict)))
            before[device["name"]] = dict(reserved=reserved, fence=None)
            after[device["name"]] = dict(reserved=total if verdict == "fence" else reserved,
                                         fence=dict(cause=device["cause"], reason=device["reason"]))
        elif verdict in ("unfence", "forget"):
            actions.append(Action("unfenced", device["name"], dict(key=key, verdict=verdict)))
            before[device["name"]] = dict(reserved=reserved, fence=dict(cause=record["cause"], reason=record["reason"]))
            after[device["name"]] = dict(reserved=int(record.get("reserved_before") or 0) if verdict == "unfence"
                                         else reserved, fence=None)
        else:
            done = dict(defer="deferred", keep="kept", absent="absent").get(verdict, "unchanged")
            actions.append(Action(done, device["name"], dict(key=key, verdict=verdict)))
            if reason:
                notes[device["name"]] = reason
    return Plan(actions, before=before, after=after, details=dict(notes=notes))


def _put_reserved(cm, params, state, device, wanted_verdicts, value):
    """PUT the inventory with ``reserved`` = value(view); on a generation conflict read and judge again. Returns the
    verdict finally applied (one of wanted_verdicts), or the new verdict when the device changed meanwhile."""
    key = _key(device)
    path = f"/resource_providers/{device['uuid']}/inventories/{device['resource_class']}"
    record = _record_of(state["records"], device)
    for attempt in range(params["conflict_retries"] + 1):
        view = state["views"][key]
        response = cm.call("writing", device["name"], cm.conn.placement.put, path,
                           json=inventory_with_reserved(view["inventory"], value(view)), microversion=PLACEMENT_MICROVERSION,
                           raise_exc=False)
        if response.status_code < 400:
            return None
        if response.status_code != 409 or CONCURRENT_UPDATE not in response.text:
            cm.fail(f"writing reserved of {device['name']} (provider {device['uuid']}) failed: HTTP "
                    f"{response.status_code}: {response.text[:300]}", failed_item=device["name"])
        if attempt == params["conflict_retries"]:
            break
        time.sleep(CONFLICT_PAUSE * (attempt + 1))
        view = state["views"][key] = read_device(cm, device)
        verdict, _reason = judge(params, device, view, record)
        if verdict not in wanted_verdicts:
            return verdict
    cm.fail(f"writing reserved of {device['name']} failed: the provider's generation changed "
            f"{params['conflict_retries'] + 1} times while this run wrote it (HTTP 409 placement.concurrent_update: "
            "Nova's periodic update writes the provider too); run again", failed_item=device["name"])
    return None  # pragma: no cover - cm.fail exits


def _write(cm, params, state, host):
    try:
        write_record(params["records_dir"], host, state["records"].get(host) or [])
    except OSError as exc:
        cm.fail(f"writing the fence record {record_path(params['records_dir'], host)} failed: {exc}: make "
                f"records_dir {params['records_dir']} writable on the control host", failed_item=host)


def apply(cm, params, state, action, applied):
    """A fence writes the record first, then reserved = total (a run cut between the two fences again next time);
    a lift writes reserved 0 first, then drops the record (a run cut between the two finds reserved 0 and only drops
    the record next time)."""
    device = state["devices"][action.data["key"]]
    host, verdict = device["host"], action.data["verdict"]
    fences = state["records"].setdefault(host, [])
    if action.done == "fenced":
        fences[:] = [f for f in fences if f["address"] != device["address"]]
        view = state["views"][action.data["key"]]
        fences.append(entry(device, state["now"], verdict == "fence", int(view["inventory"].get("reserved") or 0)))
        _write(cm, params, state, host)
        if verdict == "fence":
            changed = _put_reserved(cm, params, state, device, ("fence",),
                                    lambda view: int(view["inventory"]["total"]))
            if changed is not None:  # allocated meanwhile, or gone: take the record back
                fences[:] = [f for f in fences if f["address"] != device["address"]]
                _write(cm, params, state, host)
                return Action("deferred" if changed == "defer" else "unchanged", device["name"], action.data, diff=None)
        applied[device["name"]] = verdict
        return None
    if verdict == "unfence":
        before = int(_record_of(state["records"], device).get("reserved_before") or 0)
        changed = _put_reserved(cm, params, state, device, ("unfence",), lambda _view: before)
        if changed not in (None, "forget"):
            return Action("unchanged", device["name"], action.data, diff=None)
    fences[:] = [f for f in fences if f["address"] != device["address"]]
    _write(cm, params, state, host)
    applied[device["name"]] = verdict
    return None


def report(params, declared, state, plan, applied, progress):
    """The module result: fenced, unfenced, unchanged, deferred (with the reason), kept, absent; devices (reserved
    before and after); records (every host's fences after the run: in check mode, as they would be)."""
    notes = plan.details.get("notes") or {}
    records = dict((h, list(f)) for h, f in state["records"].items())
    devices = []
    by_name = dict((d["name"], d) for d in declared)
    fenced, unfenced = list(progress.get("fenced") or []), list(progress.get("unfenced") or [])
    for name in fenced + unfenced:
        device = by_name[name]
        view = state["views"][_key(device)] or {}
        reserved = int((view.get("inventory") or {}).get("reserved") or 0)
        after = (plan.after or {}).get(name, {}).get("reserved", reserved)
        devices.append(dict(name=name, host=device["host"], address=device["address"], uuid=device["uuid"],
                            resource_class=device["resource_class"], reserved_before=reserved, reserved_after=after,
                            action="fence" if name in fenced else "unfence"))
        # Check mode: the records as the run would leave them.
        own = records.setdefault(device["host"], [])
        if name in fenced and not any(f["address"] == device["address"] for f in own):
            verdict = next((a.data["verdict"] for a in plan.actions if a.item == name), "fence")
            view = state["views"][_key(device)] or {}
            own.append(entry(device, state["now"], verdict == "fence",
                             int((view.get("inventory") or {}).get("reserved") or 0)))
        if name in unfenced:
            own[:] = [f for f in own if f["address"] != device["address"]]
    records = dict((h, sorted(f, key=lambda x: x["address"])) for h, f in records.items() if f)
    return dict(fenced=fenced, unfenced=unfenced, unchanged=list(progress.get("unchanged") or []),
                deferred=[dict(name=n, host=by_name[n]["host"], address=by_name[n]["address"], reason=notes.get(n, ""))
                          for n in progress.get("deferred") or []],
                kept=[dict(name=n, host=by_name[n]["host"], address=by_name[n]["address"], reason=notes.get(n, ""))
                      for n in progress.get("kept") or []],
                absent=list(progress.get("absent") or []), devices=devices, records=records,
                records_dir=params["records_dir"])


# --------------------------------------------------------------------------- the health play's pure steps

PROBLEM_CAUSES = {"device_missing": "gone_from_bus", "not_on_vfio": "not_on_vfio"}


def requests(reports):
    """Pure: os_pci_fence's devices from the health reports (gpu_health_nova's, with ``nova_devices``): every
    device the passthrough plan gives Nova that has a provider in Placement, ``fenced`` when health found it gone
    from the bus or off vfio-pci (its cause, and the alert's words as the reason), ``unfenced`` when it is on the
    bus and on vfio-pci (the module lifts only fences of ours). A device the plan does not give Nova is never
    listed, and nothing of a host Nova's view lacks."""
    out = []
    for report in reports or []:
        if not isinstance(report, dict) or not isinstance(report.get("nova"), dict):
            continue
        failed = {}
        for problem in report.get("problems") or []:
            cause = PROBLEM_CAUSES.get(problem.get("cause"))
            if cause and problem.get("address") and problem["address"] not in failed:
                failed[problem["address"]] = (cause, problem.get("message") or cause)
        gpus = dict((g.get("address"), g) for g in report.get("gpus") or [] if g.get("for_nova"))
        for device in report.get("nova_devices") or []:
            address = device.get("address")
            if not device.get("uuid") or address not in gpus:
                continue
            item = dict(host=report["host"], address=address, uuid=device["uuid"],
                        resource_class=device.get("resource_class"), name=device.get("provider") or address)
            if address in failed:
                out.append(dict(item, state="fenced", cause=failed[address][0], reason=failed[address][1]))
            elif gpus[address].get("present") and gpus[address].get("driver") == "vfio-pci":
                out.append(dict(item, state="unfenced"))
    return out


def host_findings(result, host, check_mode=False):
    """Pure: what os_pci_fence's ``result`` says of ``host``: {fenced: [record entry] (as the run leaves them; in
    check mode, would), new: [address] (fenced by this run), lifted: [address], deferred: [{address, reason}],
    kept: [{address, reason}], error: message or None}. ``result`` None (not run) gives nothing."""
    out = dict(fenced=[], new=[], lifted=[], deferred=[], kept=[], error=None, check_mode=bool(check_mode))
    if not isinstance(result, dict) or result.get("skipped"):
        return out
    # A task with failed_when false registers failed false: its error is a result without records.
    if result.get("failed") or "records" not in result:
        out["error"] = f"fencing failed GPUs in Placement failed: {result.get('msg') or '?'}"
        return out
    out["fenced"] = list((result.get("records") or {}).get(host) or [])
    mine = dict((d.get("name"), d) for d in result.get("devices") or [] if d.get("host") == host)
    out["new"] = sorted(mine[n]["address"] for n in result.get("fenced") or [] if n in mine)
    out["lifted"] = sorted(mine[n]["address"] for n in result.get("unfenced") or [] if n in mine)
    out["deferred"] = [dict(address=d["address"], reason=d.get("reason")) for d in result.get("deferred") or []
                       if d.get("host") == host]
    out["kept"] = [dict(address=d["address"], reason=d.get("reason")) for d in result.get("kept") or []
                   if d.get("host") == host]
    return out


def alerts_and_lines(host, hypervisor, findings, records_dir=None):
    """Pure: the health alerts (a fenced device, a failed device a server holds) and summary lines (fences set or lifted by this run) of one host."""
    alerts, lines = [], []
    would = bool(findings.get("check_mode"))
    where = f" {records_dir}/{host}.json" if records_dir else ""
    for item in findings["fenced"]:
        how = (f"{item['resource_class']} reserved = total" if item.get("reserved_by_fence") else
               "already reserved, the record only")
        state = "would be fenced" if would and item["address"] in findings["new"] else "is fenced"
        alerts.append(f"{host}: GPU {item['address']} {state} in Placement (provider {item['provider']} on "
                      f"{hypervisor}, {how}) since {item['since']}: {item['reason']}. Nova places no new server on it "
                      f"and running servers are untouched; repair it (back on the bus, on vfio-pci) and the next "
                      f"health run lifts the fence (fence record{where}; {GUIDE})")
    for item in findings["deferred"]:
        alerts.append(f"{host}: GPU {item['address']} failed but is not fenced: {item['reason']}")
    for item in findings["kept"]:
        lines.append(f"{host}: {item['reason']}")
    for address in findings["lifted"]:
        lines.append(f"{host}: GPU {address} repaired (on the bus, on vfio-pci): its fence "
                     f"{'would be ' if findings.get('check_mode') else ''}lifted (reserved back to 0 where the fence "
                     "set it, record removed)")
    return alerts, lines
