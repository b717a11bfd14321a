# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Returning one-time-use GPUs to Nova (playbooks/return_gpus.yml, plugins/modules/os_pci_return.py).

Nova (2026.1) reserves a one-time-use device's inventory in Placement (``reserved`` = ``total``) once a server got
it, and leaves it reserved after the server is gone (os_pci_inventory's state ``waiting_return``); an operator
returns it by setting ``reserved`` back to 0. Nova never does.

os_pci_return, on the resource protocol of openstack_cloud: prepare (validate) -> read (each provider's inventory of
the class, its traits and allocations) -> make_plan (``judge``, pure: return, unchanged, or refuse a device that is
not one-time-use or is allocated) -> apply (PUT the inventory back with ``reserved`` 0 and the generation read; a
generation conflict reads again and judges again, a bounded number of times) -> report.

The playbook's pure steps (plugins/filter/return_gpus.py): ``address_errors`` (its input), ``waiting_by_host``
(which waiting device belongs to which inventory host), ``to_return`` (which devices the hosts' resets let go back),
``summary`` (what the run did, in lines).
"""

from __future__ import annotations

import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova.placement_api import FAIL, placement_get
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova.pci_inventory import ONE_TIME_USE  # the trait Nova puts on a one-time-use device
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.reset import BLOCKED, NO_RESET, return_command

# 1.26: an inventory's reserved may equal its total (what Nova writes); 1.23: errors carry a code, so a generation
# conflict (placement.concurrent_update) is told from another 409.
PLACEMENT_MICROVERSION = "1.26"
CONCURRENT_UPDATE = "placement.concurrent_update"
INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")
CONFLICT_PAUSE = 0.5  # seconds before the first new try after a generation conflict; each next waits longer
MAX_CONFLICT_RETRIES = 10

ARGUMENT_SPEC = dict(
    devices=dict(type="list", elements="dict", required=True, options=dict(
        uuid=dict(type="str", required=True),
        resource_class=dict(type="str", required=True),
        name=dict(type="str"),
    )),
    conflict_retries=dict(type="int", default=3),
)


# --------------------------------------------------------------------------- pure parts of os_pci_return

def judge(name, view):
    """Return this device, or not: (``return`` | ``unchanged`` | ``refuse``, reason).

    view: {inventory: {reserved, ...}, traits: [...], consumers: [uuid], used: n} as read from Placement. A device
    without the trait HW_PCI_ONE_TIME_USE is refused (its reservation is an operator's, not Nova's after a use), and
    so is one allocated to a consumer (it is in use); one whose ``reserved`` is 0 already is unchanged."""
    if ONE_TIME_USE not in (view.get("traits") or []):
        return "refuse", (f"{name} is not a one-time-use device (its provider has no trait {ONE_TIME_USE}): its "
                          "reservation is an operator's, not Nova's after a use, and os_pci_return leaves it; if it "
                          f"should go back, `{return_command(view.get('uuid'), view.get('resource_class'))}`")
    consumers = view.get("consumers") or []
    if consumers or int(view.get("used") or 0) > 0:
        held = ", ".join(consumers) if consumers else f"usage {view.get('used')}"
        return "refuse", (f"{name} is allocated ({held}): it is in use, not waiting to be returned; once its server is "
                          "gone Nova keeps it reserved and it waits for a return (os_pci_inventory state "
                          "waiting_return)")
    if int((view.get("inventory") or {}).get("reserved") or 0) == 0:
        return "unchanged", ""
    return "return", ""


def inventory_with_reserved(inventory, reserved):
    """The body of a PUT that sets a device's ``reserved`` (returning it: 0; fencing it: its total): the inventory
    read, with that ``reserved`` and the generation read, so that a change by Nova meanwhile is a conflict."""
    body = dict((key, inventory[key]) for key in INVENTORY_FIELDS if key in inventory)
    body.update(reserved=reserved, resource_provider_generation=inventory["resource_provider_generation"])
    return body


def returned_inventory(inventory):
    """The body of the PUT that returns a device: reserved 0."""
    return inventory_with_reserved(inventory, 0)


def _key(device):
    return f"{device['uuid']}/{device['resource_class']}"


# --------------------------------------------------------------------------- the protocol's steps

def prepare(params):
    """The devices named once each, the retries bounded; no API call."""
    errors, declared, seen = [], [], set()
    for index, item in enumerate(params["devices"]):
        uuid, rc = str(item.get("uuid") or "").strip(), str(item.get("resource_class") or "").strip()
        if not uuid or not rc:
            errors.append(f"devices[{index}] needs its provider's uuid and its resource_class")
            continue
        device = dict(uuid=uuid, resource_class=rc, name=item.get("name") or f"provider {uuid} ({rc})")
        if _key(device) in seen:
            errors.append(f"devices[{index}]: {device['name']} is named twice")
        seen.add(_key(device))
        declared.append(device)
    retries = params.get("conflict_retries")
    if retries is None or not 0 <= retries <= MAX_CONFLICT_RETRIES:
        errors.append(f"conflict_retries={retries} must be 0 to {MAX_CONFLICT_RETRIES}")
    if errors:
        return None, dict(msg="invalid parameters, nothing was read or returned: " + "; ".join(errors), errors=errors)
    return declared, None


def _get(cm, path, key=None, missing=None):
    """One GET of Placement: the body (its ``key``), or ``missing`` on a 404 when that is given."""
    return placement_get(cm, path, PLACEMENT_MICROVERSION, key, FAIL if missing is None else missing)


def read_device(cm, device):
    """A device's inventory of its class, traits and allocations (GETs only): its view for judge()."""
    base = f"/resource_providers/{device['uuid']}"
    if _get(cm, base, missing=False) is False:
        cm.fail(f"{device['name']}: Placement has no resource provider {device['uuid']} (the device or its host left "
                "Nova): nothing to return; read Placement again (playbooks/return_gpus.yml does)",
                failed_item=device["name"])
    inventory = _get(cm, f"{base}/inventories/{device['resource_class']}", missing=False)
    if inventory is False:
        cm.fail(f"{device['name']}: provider {device['uuid']} has no inventory of {device['resource_class']}: "
                "nothing to return; read Placement again", failed_item=device["name"])
    allocations = _get(cm, f"{base}/allocations", "allocations")
    consumers = sorted(c for c, entry in allocations.items()
                       if int(((entry or {}).get("resources") or {}).get(device["resource_class"], 0)) > 0)
    usages = _get(cm, f"{base}/usages", "usages")
    return dict(uuid=device["uuid"], resource_class=device["resource_class"], inventory=inventory,
                traits=sorted(_get(cm, f"{base}/traits", "traits")), consumers=consumers,
                used=int(usages.get(device["resource_class"], 0)))


def read(cm, _params, declared):
    """Every device's view, before any write."""
    return dict(views=dict((_key(device), read_device(cm, device)) for device in declared),
                devices=dict((_key(device), device) for device in declared))


def make_plan(_params, declared, state):
    """Pure: ``updated`` (returned) or ``unchanged`` per device; any refusal stops the run before a write, naming
    every refused device. The diff shows each returned device's ``reserved`` going to 0."""
    actions, refused, before, after = [], [], {}, {}
    for device in declared:
        view = state["views"][_key(device)]
        verdict, reason = judge(device["name"], view)
        if verdict == "refuse":
            refused.append(dict(name=device["name"], uuid=device["uuid"], reason=reason))
        elif verdict == "unchanged":
            actions.append(Action("unchanged", device["name"], _key(device)))
        else:
            actions.append(Action("updated", device["name"], _key(device)))
            before[device["name"]] = dict(reserved=int(view["inventory"]["reserved"]))
            after[device["name"]] = dict(reserved=0)
    if refused:
        return Plan(problem=dict(msg="refusing to return: " + "; ".join(r["reason"] for r in refused)
                                 + "; nothing was returned", refused=refused))
    return Plan(actions, before=before, after=after)


def apply(cm, params, state, action, applied):
    """PUT the inventory back with reserved 0 and the generation read. A generation conflict (Nova's periodic
    update wrote the provider meanwhile) reads the device again and judges it again, at most conflict_retries
    times; a device returned meanwhile by someone else is then ``unchanged``."""
    key = action.data
    device, view = state["devices"][key], state["views"][key]
    path = f"/resource_providers/{device['uuid']}/inventories/{device['resource_class']}"
    for attempt in range(params["conflict_retries"] + 1):
        response = cm.call("returning", device["name"], cm.conn.placement.put, path,
                           json=returned_inventory(view["inventory"]), microversion=PLACEMENT_MICROVERSION,
                           raise_exc=False)
        if response.status_code < 400:
            applied[device["name"]] = dict(before=int(view["inventory"]["reserved"]), after=0)
            return None
        if response.status_code != 409 or CONCURRENT_UPDATE not in response.text:
            cm.fail(f"returning {device['name']} failed: HTTP {response.status_code}: {response.text[:300]}",
                    failed_item=device["name"])
        if attempt == params["conflict_retries"]:
            break
        time.sleep(CONFLICT_PAUSE * (attempt + 1))
        view = state["views"][key] = read_device(cm, device)
        verdict, reason = judge(device["name"], view)
        if verdict == "refuse":
            cm.fail(f"refusing to return: {reason} (it changed while this run returned it)",
                    failed_item=device["name"])
        if verdict == "unchanged":
            return Action("unchanged", device["name"], key, diff=None)
    cm.fail(f"returning {device['name']} failed: the provider's generation changed {params['conflict_retries'] + 1} "
            "times while this run wrote it (HTTP 409 placement.concurrent_update: Nova's periodic update writes the "
            "provider too); run again", failed_item=device["name"])
    return None  # pragma: no cover - cm.fail exits


def report(_params, declared, state, _plan, applied, progress):
    """The module result: the devices returned (in check mode, to be returned) and those already returned, each
    device's reserved before and after."""
    devices = []
    returned = set(progress.get("updated") or [])
    for device in declared:
        reserved = int(state["views"][_key(device)]["inventory"].get("reserved") or 0)
        after = 0 if device["name"] in returned else reserved
        devices.append(dict(name=device["name"], uuid=device["uuid"], resource_class=device["resource_class"],
                            reserved_before=applied.get(device["name"], {}).get("before", reserved),
                            reserved_after=after))
    return dict(returned=list(progress.get("updated") or []), unchanged=list(progress.get("unchanged") or []),
                devices=devices)


# --------------------------------------------------------------------------- the playbook's pure steps

def address_errors(addresses):
    """Why return_gpus_addresses is not a list of PCI addresses (each error names the item), or []."""
    if addresses is None:
        return []
    if not isinstance(addresses, (list, tuple)):
        return [f"return_gpus_addresses must be a list of PCI addresses like 0000:27:00.0, got {addresses!r}"]
    return [f"return_gpus_addresses[{index}] {item!r} is not a PCI address like 0000:27:00.0"
            for index, item in enumerate(addresses) if pci_address.normalise_address(item) is None]


def _entry(device, host):
    return dict(host=host, hypervisor=device.get("host"), address=device.get("address"), name=device.get("name"),
                uuid=device.get("uuid"), resource_class=device.get("resource_class"))


def waiting_by_host(devices, hypervisor_names, addresses=None, fences=None):
    """Pure: the one-time-use devices waiting to be returned (os_pci_inventory's ``devices``, state
    ``waiting_return``), limited to ``addresses`` when given, each put with the inventory host whose hypervisor
    name (``hypervisor_names``: {host: name}) is its provider's host.

    Returns {by_host: {host: [device]}, requests: {host: [{address, provider, resource_class}]} (pci_device_reset's
    devices), left: [device + reason] (no host of these, or several, is that hypervisor), not_waiting: [{address,
    reason}] (an address asked for that waits nowhere), count: waiting devices}; a device is {host, hypervisor,
    address, name, uuid, resource_class}."""
    errors = address_errors(addresses)
    if errors:
        raise ValueError("; ".join(errors))
    # A fenced device (os_pci_fence's records, {host: [entry]}) is never returned: it failed (module_utils/ops/pci_fence.py).
    fenced = dict((f.get("provider"), dict(f, host=host)) for host, entries in sorted((fences or {}).items())
                  for f in entries or [])
    wanted = [pci_address.normalise_address(a) for a in addresses or []]
    hosts_of = {}
    for host, name in sorted((hypervisor_names or {}).items()):
        hosts_of.setdefault(name, []).append(host)
    by_host, left, seen = {}, [], set()
    for device in sorted(devices or [], key=lambda d: (str(d.get("host")), str(d.get("address")), str(d.get("name")))):
        if device.get("state") != "waiting_return" or (wanted and device.get("address") not in wanted):
            continue
        seen.add(device.get("address"))
        hosts = hosts_of.get(device.get("host"), [])
        fence = fenced.get(device.get("uuid"))
        if fence is not None:
            entry = _entry(device, hosts[0] if len(hosts) == 1 else None)
            entry.update(fenced=True, reason=(
                f"{fence['host']}: GPU {device.get('address')} (provider {device.get('uuid')}) is fenced since "
                f"{fence.get('since')} ({fence.get('cause')}: {fence.get('reason')}): a fenced GPU is never returned; "
                "repair it, then lift the fence (docs/ops.md, \"Fencing a failed GPU\")"))
            left.append(entry)
            continue
        if len(hosts) == 1:
            by_host.setdefault(hosts[0], []).append(_entry(device, hosts[0]))
            continue
        entry = _entry(device, None)
        if hosts:
            entry["reason"] = (f"hypervisor {device.get('host')}: GPU {device.get('address')} waits to be returned, "
                               f"but several hosts of return_gpus_hosts ({', '.join(hosts)}) have that hypervisor "
                               "name: set nova_hypervisor_hostname on each to its own name in Nova")
        else:
            entry["reason"] = (f"hypervisor {device.get('host')}: GPU {device.get('address')} waits to be returned, "
                               "but no host of return_gpus_hosts has that hypervisor name (nova_hypervisor_hostname, "
                               "else health_nova_host, else the inventory name): add the host, or set its name, and "
                               "run again")
        left.append(entry)
    not_waiting = []
    states = {}
    for device in devices or []:
        states.setdefault(device.get("address"), []).append(f"{device.get('state')} on {device.get('host')}")
    for address in wanted:
        if address not in seen:
            found = states.get(address)
            not_waiting.append(dict(address=address, reason=(
                f"{address} is not waiting to be returned ({', '.join(sorted(found))})" if found else
                f"{address} is no device Nova reports to Placement")))
    count = sum(len(v) for v in by_host.values()) + len(left)
    requests = dict((host, [dict(address=d["address"], provider=d["uuid"], resource_class=d["resource_class"])
                            for d in devices]) for host, devices in by_host.items())
    return dict(by_host=by_host, requests=requests, left=left, not_waiting=not_waiting, count=count)


def to_return(waiting, resets, without_reset=False):
    """Pure: which waiting devices go back to Nova, after each host's resets.

    waiting: waiting_by_host()'s answer; resets: {host: pci_device_reset's result, or {"error": message} when the
    host could not run it}; a host missing from it did not answer. A device goes back when its host reset it (in
    check mode, would), or, with ``without_reset`` (the operator's explicit choice), when it was skipped for want of
    a reset only (kind no_reset); never when it was blocked. Returns {devices: [device + reset (bool)], requests:
    [{name, uuid, resource_class}] (os_pci_return's devices), skipped: [device + kind + reason], errors: [message]}."""
    out = dict(devices=[], skipped=[dict(d, kind=BLOCKED) for d in waiting.get("left") or []], errors=[])
    for host, devices in sorted((waiting.get("by_host") or {}).items()):
        result = (resets or {}).get(host)
        if not isinstance(result, dict) or not isinstance(result.get("devices"), list):
            why = (result.get("error") or result.get("msg")) if isinstance(result, dict) else None
            why = why or "no answer: unreachable, or its play stopped"
            message = (f"{host}: the host did not reset its GPUs ({why}): "
                       f"{', '.join(d['address'] for d in devices)} not reset, not returned; fix it and run again")
            out["errors"].append(message)
            out["skipped"].extend(dict(d, kind=BLOCKED, reason=message) for d in devices)
            continue
        outcomes = dict((r.get("address"), r) for r in result["devices"])
        for device in devices:
            done = outcomes.get(device["address"])
            if done is None:
                message = f"{host}: GPU {device['address']}: the reset module did not report it; run again"
                out["errors"].append(message)
                out["skipped"].append(dict(device, kind=BLOCKED, reason=message))
            elif done.get("outcome") in ("reset", "would_reset"):
                out["devices"].append(dict(device, reset=True))
            elif done.get("outcome") == "failed":
                out["errors"].append(done.get("reason"))
                out["skipped"].append(dict(device, kind=BLOCKED, reason=done.get("reason"), reset_failed=True))
            elif without_reset and done.get("kind") == NO_RESET:
                out["devices"].append(dict(device, reset=False, note=done.get("reason")))
            else:
                out["skipped"].append(dict(device, kind=done.get("kind"), reason=done.get("reason")))
    out["requests"] = [dict(name=d["name"], uuid=d["uuid"], resource_class=d["resource_class"]) for d in out["devices"]]
    return out


def summary(waiting, chosen, returned=None, check_mode=False, fenced=None):
    """Pure: what the run did, as {returned, unchanged, skipped, errors, not_waiting, waiting (addresses seen
    waiting, by host), nothing_waiting, fenced, lines}. chosen: to_return()'s answer; returned: os_pci_return's result
    (None or a skipped task's when it did not run; a failed one's message is an error); fenced: os_pci_fence's result
    for the GPUs whose reset failed (None or skipped: not run; one without records failed: an error)."""
    returned = returned or {}
    errors = list(chosen.get("errors") or [])
    if returned.get("failed"):
        errors.append(f"returning to Nova failed: {returned.get('msg')}")
    # A failed os_pci_return reports what it did before the failure under its progress key (``updated``).
    names_returned = set(returned.get("returned") or returned.get("updated") or [])
    names_unchanged = set(returned.get("unchanged") or [])
    before = dict((d.get("name"), d.get("reserved_before")) for d in returned.get("devices") or [])
    verb = "would return" if check_mode else "returned"
    lines, done, unchanged = [], [], []
    for device in chosen.get("devices") or []:
        label = (f"{device['host']}: GPU {device['address']} (hypervisor {device['hypervisor']}, provider "
                 f"{device['uuid']})")
        how = "reset first" if device.get("reset") else "WITHOUT a reset (return_gpus_without_reset)"
        if device["name"] in names_returned:
            done.append(device)
            lines.append(f"{label}: {verb} to Nova, {how}: reserved {before.get(device['name'], '?')} -> 0")
        elif device["name"] in names_unchanged:
            unchanged.append(device)
            lines.append(f"{label}: already returned meanwhile (reserved 0), nothing to do")
    for device in chosen.get("skipped") or []:
        if device.get("reason") not in errors:  # an error is printed once, below
            lines.append(f"skipped: {device['reason']}")
    for item in waiting.get("not_waiting") or []:
        lines.append(f"not waiting: {item['reason']}")
    fenced = fenced if isinstance(fenced, dict) and not fenced.get("skipped") else {}
    if fenced and (fenced.get("failed") or "records" not in fenced):
        errors.append(f"fencing the GPUs whose reset failed failed: {fenced.get('msg') or '?'}; they may be returned "
                      "by a later run: fix it and run again")
    fenced_names = list(fenced.get("fenced") or []) + list(fenced.get("unchanged") or [])
    for name in fenced_names:
        lines.append(f"{name}: {'would be ' if check_mode else ''}fenced (its reset failed): never returned until "
                     "an operator lifts the fence (docs/ops.md, \"Fencing a failed GPU\")")
    nothing = not waiting.get("count")
    if nothing:
        lines.insert(0, "Nothing waits to be returned: no one-time-use GPU is in state waiting_return"
                        + (" among return_gpus_addresses" if waiting.get("not_waiting") else ""))
    else:
        lines.insert(0, f"{waiting['count']} one-time-use GPU(s) waiting to be returned: {len(done)} {verb}, "
                        f"{len(chosen.get('skipped') or [])} skipped" + (" (check mode: nothing was written)"
                                                                         if check_mode else ""))
    for error in errors:
        lines.append(f"ERROR {error}")
    seen = dict((host, [d["address"] for d in devices]) for host, devices in (waiting.get("by_host") or {}).items())
    skipped = [dict(_short(d), kind=d.get("kind"), reason=d.get("reason")) for d in chosen.get("skipped") or []]
    return dict(returned=[_short(d) for d in done], unchanged=[_short(d) for d in unchanged], skipped=skipped,
                errors=errors, not_waiting=list(waiting.get("not_waiting") or []), fenced=fenced_names,
                waiting=seen, nothing_waiting=nothing, lines=lines)


def _short(device):
    return dict(host=device.get("host"), hypervisor=device.get("hypervisor"), address=device.get("address"),
                uuid=device.get("uuid"), resource_class=device.get("resource_class"),
                reset=device.get("reset"))


def reset_failed_fences(chosen):
    """Pure: os_pci_fence's devices for the GPUs whose reset failed (to_return()'s skipped with reset_failed): each
    fenced with cause reset_failed and the reset's message as the reason, so no later run returns it before an
    operator has looked at it (module_utils/ops/pci_fence.py; health does not lift that cause)."""
    return [dict(host=d["host"], address=d["address"], uuid=d["uuid"], resource_class=d["resource_class"],
                 name=d.get("name") or d["address"], state="fenced", cause="reset_failed",
                 reason=d.get("reason") or f"{d['host']}: GPU {d['address']}: its reset failed")
            for d in chosen.get("skipped") or [] if d.get("reset_failed") and d.get("host") and d.get("uuid")]
