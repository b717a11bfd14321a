# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Which kolla-ansible steps a run takes, from what the last successful runs recorded, host by host.

A run of the deploy phase compares what kolla-ansible would act on now (``now``: the mode, kolla-ansible's version,
a digest of the inventory's kolla groups, a digest of the configuration it reads) with what each host it targets
got last (the state file, ``{"format": 2, "hosts": {host: {mode, version, hosts, config}}}``):

* a host never deployed, deployed in another mode or version, or deployed with another set of hosts (a host added
  or removed) takes the whole deployment (``steps``: bootstrap-servers, prechecks, deploy, post-deploy);
* otherwise a host whose configuration changed takes a reconfigure (``reconfigure_steps``);
* otherwise nothing runs. In ``genconfig`` mode ``steps`` (kolla-ansible genconfig alone) run on any difference.

A run limited to some hosts (``targets``, from a ``--limit`` that keeps the control host: module_utils/common/
run_scope.py) compares and records those hosts only: a second run of the same command does nothing, and the hosts it
left alone take their step in the next run that targets them (an unlimited run targets every kolla host). A state file
of the first format (one record for the whole cloud) stands for every host. Pure.
"""

from __future__ import annotations

__all__ = ["FORMAT", "plan_steps"]

FORMAT = 2
_KEYS = ("mode", "version", "hosts", "config")
# kolla-ansible steps that act on no inventory host: they take no --limit (post-deploy runs on localhost, which a
# limit of inventory hosts would skip: no admin clouds.yaml).
UNLIMITED_STEPS = ("install-deps", "post-deploy")
NO_HOST = "*"


def _records(last, every_host):
    if not isinstance(last, dict) or not last:
        return {}
    if last.get("format") == FORMAT:
        hosts = last.get("hosts")
        return dict(hosts) if isinstance(hosts, dict) else {}
    # The first format: one record of the whole cloud's last run.
    record = {key: last.get(key, "") for key in _KEYS}
    return {host: record for host in every_host}


def plan_steps(last, now, every_host, targets, steps, reconfigure_steps, force=False):
    """``{steps, limit, unlimited_steps, state}``: the kolla-ansible steps to run, the hosts to limit them to ([] for
    the whole inventory; ``unlimited_steps`` never take a limit), and the state to record once they succeed.

    ``last``: the recorded state ({} when none); ``now``: ``{mode, version, hosts, config}``; ``every_host``: every
    host of kolla's inventory; ``targets``: the hosts this run deploys ([] or None: every host).
    """
    if not isinstance(now, dict) or not all(key in now for key in _KEYS):
        raise ValueError(f"kolla deploy state: now must hold {', '.join(_KEYS)}, got {now!r}")
    # An inventory with no kolla host at all is recorded under one key of its own.
    every_host = list(every_host or []) or [NO_HOST]
    limit = [h for h in (targets or []) if h in every_host]
    chosen = (limit or [NO_HOST]) if targets else every_host
    records = _records(last, every_host)
    current = {key: now[key] for key in _KEYS}
    if now["mode"] == "genconfig":
        todo = list(steps) if force or any(records.get(h) != current for h in chosen) else []
    elif force or any(records.get(h, {}).get("mode") != "full" or records.get(h, {}).get("version") != now["version"]
                      or records.get(h, {}).get("hosts") != now["hosts"] for h in chosen):
        todo = list(steps)
    elif any(records.get(h, {}).get("config") != now["config"] for h in chosen):
        todo = list(reconfigure_steps)
    else:
        todo = []
    state = {"format": FORMAT, "hosts": {h: r for h, r in records.items() if h in every_host or h in chosen}}
    for host in chosen:
        state["hosts"][host] = current
    return {"steps": todo, "limit": limit if targets else [], "unlimited_steps": list(UNLIMITED_STEPS), "state": state}
