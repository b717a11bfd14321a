# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Draining a nova-compute host before a reboot, and enabling it again after (plugins/modules/os_compute_drain.py).

Pure parts (no API call): ``validate``, ``server_view``, ``classify`` (which servers keep the host busy, which
a drain may shelve, which their metadata exempts: the rule of ``server_exemption``), ``service_action``. The
API parts take a ``CloudModule`` (plugins/module_utils/cloud/openstack.py) and use its public API only.

PCI-passthrough instances cannot be live-migrated: a reboot of their host kills them. So a drain disables the
service (nothing new lands), then waits until no instance runs there, shelving them first when asked.
"""

from __future__ import annotations

import datetime
import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import sdk_message
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops.server_exemption import exemption, iso, parse_time

MODES = ("wait", "shelve", "skip")
STATES = ("drained", "enabled")
# States in which an instance runs nothing on its host (a reboot costs it nothing).
IDLE = ("SHUTOFF", "SHELVED", "SHELVED_OFFLOADED", "DELETED", "SOFT_DELETED")
# States Nova can shelve from (the ones os_server_lifetimes shelves as well).
SHELVABLE = ("ACTIVE", "PAUSED", "SUSPENDED")

ARGUMENT_SPEC = dict(
    host=dict(type="str", required=True),
    state=dict(type="str", default="drained", choices=list(STATES)),
    mode=dict(type="str", default="wait", choices=list(MODES)),
    reason=dict(type="str", default="open-gpu-cloud: host reboot"),
    owner_prefix=dict(type="str", default="open-gpu-cloud:"),
    binary=dict(type="str", default="nova-compute"),
    timeout=dict(type="int", default=1800),
    exempt_key=dict(type="str", default="ogc:exempt", no_log=False),
    expires_key=dict(type="str", default="ogc:expires", no_log=False),
    now=dict(type="str"),
)


# --------------------------------------------------------------------------- pure parts

def validate(params):
    """(errors, now) for the module's parameters; no API call."""
    errors = []
    if not str(params.get("host") or "").strip():
        errors.append("host must be the compute host's name as Nova knows it (openstack compute service list)")
    prefix = params.get("owner_prefix") or ""
    if not prefix.strip():
        errors.append("owner_prefix must not be empty: it is how a later run recognises a service this module "
                      "disabled")
    elif not str(params.get("reason") or "").startswith(prefix):
        errors.append(f"reason {params.get('reason')!r} must start with owner_prefix {prefix!r}, or the enabling run "
                      "would not recognise the service as disabled by this module")
    if params.get("timeout") is None or params["timeout"] <= 0:
        errors.append(f"timeout={params.get('timeout')} must be a positive number of seconds")
    now = datetime.datetime.now(datetime.timezone.utc)
    if params.get("now") is not None:
        try:
            now = parse_time(params["now"])
        except ValueError:
            errors.append(f"now={params['now']!r} is not an ISO 8601 date-time (e.g. 2026-11-21T18:00:00Z)")
    return errors, now


def server_view(server):
    """A server (SDK resource or dict) as the plain dict the decisions use."""
    get = server.get if isinstance(server, dict) else lambda k, d=None: getattr(server, k, d)
    return dict(id=get("id"), name=get("name"), project_id=get("project_id"),
                status=(get("status") or "").upper(), task_state=get("task_state"),
                metadata=dict(get("metadata") or {}))


def classify(servers, mode, now, exempt_key="ogc:exempt", expires_key="ogc:expires"):
    """Sort the servers of a host: {blocking, to_shelve, exempt, idle}, lists of server dicts.

    blocking: servers that run something (any state but IDLE, or a task in progress): the reboot waits for
    them. In shelve mode, to_shelve are the blocking ones Nova can shelve now and whose metadata does not
    exempt them (the os_server_lifetimes rule: ogc:exempt=true, or an ogc:expires date still ahead); exempt
    lists the ones it keeps, with the reason. Exempt and not-shelvable servers still block.
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    out = dict(blocking=[], to_shelve=[], exempt=[], idle=[])
    for server in servers:
        if server["status"] in IDLE and not server.get("task_state"):
            out["idle"].append(server)
            continue
        out["blocking"].append(server)
        if mode != "shelve":
            continue
        kind, detail = exemption(server.get("metadata"), now, exempt_key, expires_key)
        if kind == "exempt":
            out["exempt"].append(dict(server, reason=detail))
        elif kind == "expires" and now < detail:
            out["exempt"].append(dict(server, reason=f"metadata {expires_key}: kept until {iso(detail)}"))
        elif server["status"] in SHELVABLE and not server.get("task_state"):
            out["to_shelve"].append(server)
    return out


def service_action(status, disabled_reason, state, owner_prefix):
    """What to do with the service: 'disable', 'enable', None (nothing), or 'foreign' (disabled by someone
    else, for another reason: left as it is).

    status: 'enabled' / 'disabled'. A drain disables an enabled service, and keeps a disabled one as it is; the
    enabling run enables only a service whose disabled reason starts with owner_prefix (this module's).
    """
    disabled = (status or "").lower() == "disabled"
    ours = disabled and (disabled_reason or "").startswith(owner_prefix)
    if state == "drained":
        if not disabled:
            return "disable"
        return None if ours else "foreign"
    if not disabled:
        return None
    return "enable" if ours else "foreign"


def describe(servers):
    """'name (id, STATUS), ...' for messages."""
    parts = []
    for s in servers:
        task = f", task {s['task_state']}" if s.get("task_state") else ""
        parts.append(f"{s['name']} ({s['id']}, {s['status']}{task})")
    return ", ".join(parts)


# --------------------------------------------------------------------------- API

def find_service(cm, host, binary):
    """The host's service (an SDK Service), or None when the host is not (yet) a Nova compute."""
    try:
        found = [s for s in cm.conn.compute.services(host=host, binary=binary) if s.host == host and s.binary == binary]
    except Exception as exc:  # pylint: disable=broad-except  # the first call to Nova: any failure means unreachable
        cm.fail(f"cannot list the compute services of {host}: Nova's API "
                f"{'refused the call' if _api_error(exc) else 'cannot be reached'} ({type(exc).__name__}: "
                f"{sdk_message(exc)}); nothing was disabled. Check that nova-api runs and that the cloud's catalog (or "
                "its compute endpoint override) points at it", host=host)
    if len(found) > 1:
        cm.fail(f"Nova lists {len(found)} {binary} services on host {host} ({', '.join(str(s.id) for s in found)}): "
                "name the right one, or remove the stale ones with 'openstack compute service delete'", host=host)
    return found[0] if found else None


def _api_error(exc):
    """True when Nova answered (an HTTP error), False when it could not be reached or the SDK broke."""
    return getattr(exc, "status_code", None) is not None or getattr(exc, "http_status", None) is not None


def host_servers(cm, host):
    listed = cm.call("listing", f"servers on host {host}",
                     lambda: list(cm.conn.compute.servers(details=True, all_projects=True, compute_host=host)))
    return [server_view(s) for s in listed]


def service_view(service):
    return dict(id=service.id, host=service.host, binary=service.binary, status=service.status,
                state=getattr(service, "state", None), disabled_reason=service.disabled_reason)


# --------------------------------------------------------------------------- the resource protocol
# (plugins/module_utils/cloud/openstack.py: prepare -> read -> make_plan -> apply -> finish -> report, run by
# run_module(); converge() alone knows check mode.)

def prepare(params):
    """(declared, problem): every parameter checked before any API call; declared holds the time to judge by."""
    errors, now = validate(params)
    if errors:
        return None, dict(msg="invalid parameters, nothing was read or changed: " + "; ".join(errors), errors=errors)
    return dict(now=now), None


def read(cm, params, declared):
    """The host's service and, for a drain, its servers sorted by classify(); GETs only."""
    service = find_service(cm, params["host"], params["binary"])
    servers = None
    if service is not None and params["state"] == "drained":
        servers = classify(host_servers(cm, params["host"]), params["mode"], declared["now"], params["exempt_key"],
                           params["expires_key"])
    return dict(service=service, servers=servers, now=declared["now"])


def make_plan(params, _declared, state):
    """What the run does to the service and the servers (pure). details: the outcome a check run reports and
    the first look at the servers."""
    host, service = params["host"], state["service"]
    if service is None:
        return Plan(details=dict(outcome="not_compute"))
    action = service_action(service.status, service.disabled_reason, params["state"], params["owner_prefix"])
    details = dict(foreign_reason=service.disabled_reason) if action == "foreign" else {}
    if params["state"] == "enabled":
        details["outcome"] = "left_disabled" if action == "foreign" else "enabled"
        return Plan([Action("enabled", host)] if action == "enable" else [], details=details)
    servers = state["servers"]
    if params["mode"] == "skip" and servers["blocking"]:
        return Plan(details=dict(details, outcome="skipped"))
    actions = [Action("disabled", host)] if action == "disable" else []
    actions += [Action("updated", f"{server['name']} (shelved)", server) for server in servers["to_shelve"]]
    details["outcome"] = "would_drain" if servers["blocking"] else "drained"
    return Plan(actions, details=details)


def apply(cm, params, state, action, applied):
    """Disable the service, or enable it, or shelve one server. In skip mode a server that landed between the
    first look and the disable makes the run enable the service again and skip the host."""
    host, binary, service = params["host"], params["binary"], state["service"]
    if action.done == "enabled":
        cm.call("enabling", f"{binary} on {host}", cm.conn.compute.enable_service, service, host, binary)
        applied["service"] = dict(status="enabled", disabled_reason=None)
    elif action.done == "disabled":
        cm.call("disabling", f"{binary} on {host}", cm.conn.compute.disable_service, service, host, binary,
                disabled_reason=params["reason"])
        applied["service"] = dict(status="disabled", disabled_reason=params["reason"])
        if params["mode"] == "skip":
            again = classify(host_servers(cm, host), "skip", state["now"], params["exempt_key"],
                             params["expires_key"])
            if again["blocking"]:
                cm.call("enabling", f"{binary} on {host}", cm.conn.compute.enable_service, service, host, binary)
                applied["service"] = dict(status="enabled", disabled_reason=None)
                applied["skipped"] = again["blocking"]
    else:
        server = action.data
        cm.call("shelving server", f"{server['name']} ({server['id']}) on {host}", cm.conn.compute.shelve_server,
                server["id"])
        applied.setdefault("shelved", []).append(server)


def finish(cm, params, state, applied):
    """A real drain ends when no server runs on the host any more (bounded by params['timeout'])."""
    if params["state"] != "drained" or state["service"] is None or "skipped" in applied:
        return
    servers = state["servers"]
    if params["mode"] == "skip" and servers["blocking"]:
        return
    applied["waited_s"] = wait_idle(cm, params, state["now"], servers["blocking"])


def report(params, _declared, state, plan, applied, _progress):
    """The module result: the service as it is after the run, the servers, the outcome."""
    host, service = params["host"], state["service"]
    result = dict(host=host, is_compute=service is not None, service=None)
    if params["state"] == "drained":
        result.update(mode=params["mode"], blocking=[], shelved=[], would_shelve=[], exempt=[], waited_s=0.0)
    if service is None:
        result["outcome"] = "not_compute"
        return result
    result["service"] = dict(service_view(service), **applied.get("service", {}))
    result.update((key, value) for key, value in plan.details.items())
    if params["state"] == "drained":
        servers = state["servers"]
        result.update(blocking=servers["blocking"], exempt=servers["exempt"], would_shelve=servers["to_shelve"],
                      shelved=applied.get("shelved", []), waited_s=applied.get("waited_s", 0.0))
        if "skipped" in applied:
            result.update(outcome="skipped", blocking=applied["skipped"])
        elif "waited_s" in applied:
            result["outcome"] = "drained"
    return result


def wait_idle(cm, params, now, blocking):
    """Poll the host's servers until none blocks, up to params['timeout'] (bounded). Returns the seconds waited."""
    host = params["host"]
    started = time.time()
    deadline = started + params["timeout"]
    delay = 1.0
    while blocking:
        if time.time() >= deadline:
            exempt = [s for s in blocking if s["id"] in set(e["id"] for e in classify(
                blocking, "shelve", now, params["exempt_key"], params["expires_key"])["exempt"])]
            if exempt and params["mode"] == "shelve":
                verb = "is" if len(exempt) == 1 else "are"
                advice = f"note that {describe(exempt)} {verb} exempt from shelving by metadata;"
            else:
                advice = "or choose mode shelve (shelves them) or skip (leaves the host out);"
            cm.fail(f"{host}: still running on it after {params['timeout']} s: {describe(blocking)}. The "
                    f"{params['binary']} service stays disabled (reason {params['reason']!r}) so nothing new lands "
                    f"there; nothing was rebooted. Wait for them to end (or ask their owners), {advice} then run again",
                    host=host, blocking=blocking)
        time.sleep(min(delay, max(0.1, deadline - time.time())))
        delay = min(delay * 1.5, 10.0)
        blocking = classify(host_servers(cm, host), "wait", now)["blocking"]
    return round(time.time() - started, 1)
