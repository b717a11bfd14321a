# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Draining a nova-compute host before a reboot, and enabling it again after (library/os_compute_drain.py).

Pure parts (no API call): ``validate``, ``server_view``, ``classify`` (which servers keep the host busy, which
a drain may shelve, which their metadata exempts: the rule of ``server_exemption``), ``service_action``. The
API parts take a ``CloudModule`` (module_utils/openstack_cloud.py) and use its public API only.

PCI-passthrough instances cannot be live-migrated: a reboot of their host kills them. So a drain disables the
service (nothing new lands), then waits until no instance runs there, shelving them first when asked.
"""

from __future__ import annotations

import datetime
import time

from ansible.module_utils.openstack_cloud import sdk_message
from ansible.module_utils.server_exemption import exemption, iso, parse_time

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
        errors.append("reason %r must start with owner_prefix %r, or the enabling run would not recognise the "
                      "service as disabled by this module" % (params.get("reason"), prefix))
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
    return ", ".join("%s (%s, %s%s)" % (s["name"], s["id"], s["status"],
                                        ", task %s" % s["task_state"] if s.get("task_state") else "")
                     for s in servers)


# --------------------------------------------------------------------------- API

def find_service(cm, host, binary):
    """The host's service (an SDK Service), or None when the host is not (yet) a Nova compute."""
    try:
        found = [s for s in cm.conn.compute.services(host=host, binary=binary) if s.host == host and s.binary == binary]
    except Exception as exc:  # pylint: disable=broad-except  # the first call to Nova: any failure means unreachable
        cm.fail("cannot list the compute services of %s: Nova's API %s (%s: %s); nothing was disabled. Check that "
                "nova-api runs and that the cloud's catalog (or its compute endpoint override) points at it"
                % (host, "refused the call" if _api_error(exc) else "cannot be reached", type(exc).__name__,
                   sdk_message(exc)), host=host)
    if len(found) > 1:
        cm.fail("Nova lists %d %s services on host %s (%s): name the right one, or remove the stale ones with "
                "'openstack compute service delete'" % (len(found), binary, host,
                                                         ", ".join(str(s.id) for s in found)), host=host)
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


def drain(cm, params, now):
    host, mode = params["host"], params["mode"]
    result = dict(host=host, mode=mode, is_compute=False, outcome="not_compute", blocking=[], shelved=[],
                  would_shelve=[], exempt=[], waited_s=0.0, service=None)
    service = find_service(cm, host, params["binary"])
    if service is None:
        return False, result
    result.update(is_compute=True, service=service_view(service))
    action = service_action(service.status, service.disabled_reason, "drained", params["owner_prefix"])
    servers = classify(host_servers(cm, host), mode, now, params["exempt_key"], params["expires_key"])
    result.update(blocking=servers["blocking"], exempt=servers["exempt"], would_shelve=servers["to_shelve"])
    if action == "foreign":
        result["foreign_reason"] = service.disabled_reason
    if mode == "skip" and servers["blocking"]:
        result["outcome"] = "skipped"
        return False, result
    changed = action == "disable" or bool(servers["to_shelve"])
    if cm.check_mode:
        result["outcome"] = "would_drain" if servers["blocking"] else "drained"
        return changed, result
    if action == "disable":
        cm.call("disabling", f"{params['binary']} on {host}", cm.conn.compute.disable_service, service,
                host, params["binary"], disabled_reason=params["reason"])
        cm.record("disabled", host)
        result["service"].update(status="disabled", disabled_reason=params["reason"])
        if mode == "skip":
            # A server may have landed between the first look and the disable: look again.
            again = classify(host_servers(cm, host), mode, now, params["exempt_key"], params["expires_key"])
            if again["blocking"]:
                cm.call("enabling", f"{params['binary']} on {host}", cm.conn.compute.enable_service, service,
                        host, params["binary"])
                result["service"].update(status="enabled", disabled_reason=None)
                result.update(outcome="skipped", blocking=again["blocking"])
                return True, result
    for server in servers["to_shelve"]:
        cm.call("shelving server", f"{server['name']} ({server['id']}) on {host}",
                cm.conn.compute.shelve_server, server["id"])
        cm.record("updated", f"{server['name']} (shelved)")
        result["shelved"].append(server)
    result["waited_s"] = wait_idle(cm, params, now, servers["blocking"])
    result["outcome"] = "drained"
    return changed, result


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
            cm.fail("%s: still running on it after %s s: %s. The %s service stays disabled (reason %r) so nothing new "
                    "lands there; nothing was rebooted. Wait for them to end (or ask their owners), %s then run again"
                    % (host, params["timeout"], describe(blocking), params["binary"], params["reason"],
                       "note that %s %s exempt from shelving by metadata;" % (
                           describe(exempt), "is" if len(exempt) == 1 else "are") if exempt and params["mode"] == "shelve"
                       else "or choose mode shelve (shelves them) or skip (leaves the host out);"),
                    host=host, blocking=blocking)
        time.sleep(min(delay, max(0.1, deadline - time.time())))
        delay = min(delay * 1.5, 10.0)
        blocking = classify(host_servers(cm, host), "wait", now)["blocking"]
    return round(time.time() - started, 1)


def enable(cm, params):
    host = params["host"]
    result = dict(host=host, is_compute=False, outcome="not_compute", service=None)
    service = find_service(cm, host, params["binary"])
    if service is None:
        return False, result
    result.update(is_compute=True, service=service_view(service))
    action = service_action(service.status, service.disabled_reason, "enabled", params["owner_prefix"])
    if action is None:
        result["outcome"] = "enabled"
        return False, result
    if action == "foreign":
        result.update(outcome="left_disabled", foreign_reason=service.disabled_reason)
        return False, result
    if not cm.check_mode:
        cm.call("enabling", f"{params['binary']} on {host}", cm.conn.compute.enable_service, service, host,
                params["binary"])
        cm.record("enabled", host)
        result["service"].update(status="enabled", disabled_reason=None)
    result["outcome"] = "enabled"
    return True, result


def run(cm):
    """The module's whole run: validate (nothing read), then drain or enable."""
    errors, now = validate(cm.params)
    if errors:
        cm.fail("invalid parameters, nothing was read or changed: " + "; ".join(errors), errors=errors)
    if cm.params["state"] == "enabled":
        changed, result = enable(cm, cm.params)
    else:
        changed, result = drain(cm, cm.params, now)
    cm.exit(changed, **result)
