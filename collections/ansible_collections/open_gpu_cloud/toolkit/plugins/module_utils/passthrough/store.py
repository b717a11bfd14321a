# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The plan file, ``<passthrough_plan_dir>/<host>.json``: the record the plan phase writes, its parser and
the one loader every later phase reads plans through (a missing, corrupt, foreign or stale file is refused,
naming the host, the file and the command that writes it again)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.policy import policy_fingerprint


# The plan file's layout (<passthrough_plan_dir>/<host>.json). A plan written with another format is stale.
PLAN_FORMAT = 1


def plan_fix(host):
    """The command that writes a host's plan file again (in every plan-file error)."""
    return f"ansible-playbook playbooks/plan.yml -i inventory/<env> --limit {host or '<host>'}"


def plan_record(plan, facts, policy, previous=None):
    """What the plan role writes to ``<passthrough_plan_dir>/<host>.json``: the plan, the facts it was
    made from, the format and the fingerprint of the policy (``passthrough_plan_load`` checks both), and the
    aliases the host's earlier plans offered that this one does not (``retired_aliases``, when there are any).

    :param previous: the text of the host's plan file before this plan (None when it has none): its aliases,
        and those it had retired, that this plan no longer offers are kept as retired (see ``retired_aliases``).
    """
    if not isinstance(plan, Mapping) or not isinstance(facts, Mapping):
        raise PlanError("passthrough_plan_record: the plan and the facts must be mappings (the "
                        "passthrough_plan filter's result and ansible_facts.pci_passthrough)")
    record = {"format": PLAN_FORMAT, "policy_fingerprint": policy_fingerprint(policy), "facts": dict(facts),
              "plan": dict(plan)}
    retired = retired_aliases(plan, previous)
    if retired:
        record["retired_aliases"] = retired
    return record


def _alias_names(plan):
    """The alias names a plan offers (its ``aliases``: ``[{"name": ...}, ...]``); an unreadable entry offers none."""
    aliases = plan.get("aliases") if isinstance(plan, Mapping) else None
    if not isinstance(aliases, list):
        return set()
    return {alias.get("name") for alias in aliases if isinstance(alias, Mapping) and isinstance(alias.get("name"), str)}


def retired_aliases(plan, previous):
    """The aliases a host no longer offers, that its earlier plans did: a card replaced by another model (the
    cloud phase names these hosts when a flavor still asks for such an alias). Sorted names: those of the previous
    plan file, and those it had retired already, less the aliases ``plan`` offers (a model put back is offered
    again, not retired). A previous file that is missing, unreadable or no plan record has no history to keep.

    :param plan: the host's new plan (``passthrough_plan``'s result).
    :param previous: the previous plan file's text (or its parsed content), or None.
    """
    if isinstance(previous, Mapping):
        content = previous
    elif isinstance(previous, str) and previous.strip():
        try:
            content = json.loads(previous)
        except ValueError:
            return []
    else:
        return []
    if not isinstance(content, Mapping) or not isinstance(content.get("plan"), Mapping):
        return []
    earlier = _alias_names(content["plan"])
    kept = content.get("retired_aliases")
    if isinstance(kept, list):
        earlier |= {name for name in kept if isinstance(name, str)}
    return sorted(earlier - _alias_names(plan))


def retired_alias_hosts(loaded):
    """``{alias: [hosts]}``: each alias that some host's plan retired (``retired_aliases``) and no host of
    ``loaded`` offers now, with the hosts that used to offer it (sorted). ``loaded``: the one loader's plans
    ``{host: {"facts", "plan", "retired_aliases"?}}`` (``passthrough_plans``).

    :raises PlanError: anything else than the loader's shape, naming the host.
    """
    plans = plans_only(loaded)
    offered = set()
    for plan in plans.values():
        offered |= _alias_names(plan)
    hosts = {}
    for host, data in loaded.items():
        retired = data.get("retired_aliases") or []
        if not isinstance(retired, list) or not all(isinstance(name, str) for name in retired):
            raise PlanError(f"passthrough_retired_alias_hosts: host {host}: retired_aliases {retired!r} is not a list "
                            f"of alias names; write its plan file again with: {plan_fix(host)}")
        for name in retired:
            if name not in offered:
                hosts.setdefault(name, []).append(host)
    return {name: sorted(found) for name, found in sorted(hosts.items())}


def _read_plan_file(data, path, host):
    """The parsed content of a plan file (a dict with a ``plan`` object), or PlanError. ``data`` is the file's
    text, ``ansible.builtin.slurp``'s result on it, or a record as ``plan_record`` makes it (this run's plan)."""
    if isinstance(data, Mapping) and "content" not in data:
        content = dict(data)
        if not isinstance(content.get("plan"), Mapping):
            raise PlanError(f"passthrough_plan_file: the record of host {host} is not a plan record (no 'plan' "
                            f"object): write it again with: {plan_fix(host)}")
        return content
    if isinstance(data, dict) and "content" in data:
        path = path or data.get("source")
        host = host or data.get("item")
        try:
            text = base64.b64decode(data["content"], validate=True).decode("utf-8")
        except (ValueError, TypeError, UnicodeDecodeError):
            text = None
    else:
        text = data if isinstance(data, str) else None
    fix = f"write it again with: {plan_fix(host)} (passthrough_plan_dir set), or delete it"
    where = f"plan file {path or '(unnamed)'}" + (f" of host {host}" if host else "")
    if text is None:
        raise PlanError(f"passthrough_plan_file: {where} is not text: {fix}")
    if not text.strip():
        raise PlanError(f"passthrough_plan_file: {where} is empty: {fix}")
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"passthrough_plan_file: {where} is not valid JSON (line {exc.lineno}, "
                        f"column {exc.colno}: {exc.msg}): {fix}") from None
    if not isinstance(content, dict) or not isinstance(content.get("plan"), dict):
        raise PlanError(f"passthrough_plan_file: {where} is JSON but not a plan file (no 'plan' "
                        f"object): {fix}")
    return content


def plan_file(data, path=None, host=None):
    """Parse a plan file written by the plan phase (``<passthrough_plan_dir>/<host>.json``) and return
    its ``plan``. Consumers load plans through ``passthrough_plan_load`` (roles/passthrough/tasks/load.yml),
    which uses this and also refuses a missing or stale file.

    :param data: the file's text (``lookup('file', ...)``), or the result of ``ansible.builtin.slurp``
        on it (its ``source`` names the file and its loop ``item`` the host when not given).
    :raises PlanError: an empty, corrupt or foreign file, naming the file, the host and the
        command that writes it again.
    """
    return _read_plan_file(data, path, host)["plan"]


def plan_load(text, plan_dir, host, policy):
    """The one loader of stored plans: the content of ``<plan_dir>/<host>.json`` checked against the
    host's current ``passthrough_policy``. Returns ``{"facts": ..., "plan": ...}``, with ``"retired_aliases"``
    when the record has some (``plan_record``).

    :param text: the file's text, or None when the file does not exist; or this run's record (the mapping
        ``plan_record`` made), checked the same way without a file.
    :param plan_dir: the host's ``passthrough_plan_dir`` (empty: not set).
    :param policy: the host's current ``passthrough_policy``.
    :raises PlanError: no plan directory, a missing, corrupt, foreign or stale file (made with
        another plan format or another policy), naming the host, the file and the command to run.
    """
    if not isinstance(host, str) or not host:
        raise PlanError(f"passthrough_plan_load: the host must be an inventory name, got {host!r}")
    problem = locations.host_name_problem(host)
    if problem:
        raise PlanError(f"passthrough_plan_load: {problem}")
    fix = f"run: {plan_fix(host)}"
    if not isinstance(plan_dir, str) or not plan_dir:
        raise PlanError(
            f"passthrough_plan_load: host {host}: passthrough_plan_dir is not set, so it has no plan file: set "
            f"passthrough_plan_dir (an absolute directory on the control host, e.g. /var/lib/open-gpu-cloud/plans) "
            f"in inventory/<env>/group_vars, then {fix}")
    problem = locations.path_problem("passthrough_plan_dir", plan_dir)
    if problem:
        raise PlanError(f"passthrough_plan_load: host {host}: {problem}; {fix} with it absolute")
    path = f"{plan_dir.rstrip('/')}/{host}.json"
    if text is None:
        raise PlanError(f"passthrough_plan_load: host {host}: no plan file {path}: the plan phase has not "
                        f"run for it with this passthrough_plan_dir; {fix}")
    content = _checked_plan_file(text, path, host)
    if content.get("policy_fingerprint") != policy_fingerprint(policy):
        raise PlanError(f"passthrough_plan_load: host {host}: plan file {path} is stale: it was made with "
                        f"another passthrough_policy than the host's current one (fingerprint "
                        f"{content.get('policy_fingerprint')}, now {policy_fingerprint(policy)}); {fix}")
    return _loaded(content)


def _loaded(content):
    """What the loader hands on of a checked plan record: its facts and plan, and its retired aliases if any."""
    loaded = {"facts": content["facts"], "plan": content["plan"]}
    if content.get("retired_aliases"):
        loaded["retired_aliases"] = content["retired_aliases"]
    return loaded


def load_plans(hosts, host_vars, read, missing_ok=False):
    """The one loader's whole work for ``hosts`` (the ``passthrough_plans`` lookup calls it; roles/passthrough
    tasks/load.yml): each host's plan is this run's record when the plan role made it earlier in this run (its
    ``_passthrough_plan_record``), else its plan file ``<passthrough_plan_dir>/<host>.json``, both checked by
    ``plan_load`` against the host's ``passthrough_policy``. A file is read only inside its plan directory: a host
    name that is no file name, or a directory that is not absolute, is refused by ``plan_load`` before any read.

    :param hosts: the inventory names, in order.
    :param host_vars: ``{host: {variable: value}}`` (Ansible's ``hostvars``): each host's ``passthrough_plan_dir``,
        ``passthrough_policy`` and, when the plan role ran for it in this run, ``_passthrough_plan_record``.
    :param read: ``read(path)`` -> the file's text (or its bytes when they are no UTF-8), None when there is no
        such file.
    :param missing_ok: a host with neither a record nor a plan file is noted in ``missing`` instead of refused.
    :returns: ``{"plans": {host: {"facts", "plan"}}, "sources": {host: "run" | "file"}, "missing": {host: path}}``.
    :raises PlanError: every other problem, as ``plan_load`` words it.
    """
    loaded = {"plans": {}, "sources": {}, "missing": {}}
    for host in hosts:
        values = host_vars.get(host) if isinstance(host, str) else None
        if values is None:
            raise PlanError(f"passthrough_plan_load: {host!r} is not a host of the inventory: load the plans of "
                            "inventory hosts (passthrough_load_hosts)")
        plan_dir = values.get("passthrough_plan_dir", "")
        policy = values.get("passthrough_policy", {})
        record = values.get("_passthrough_plan_record")
        if record is not None:
            loaded["plans"][host] = plan_load(record, plan_dir, host, policy)
            loaded["sources"][host] = "run"
            continue
        readable = locations.host_name_problem(host) is None and isinstance(plan_dir, str) and \
            plan_dir.startswith("/")
        path = f"{plan_dir.rstrip('/')}/{host}.json" if readable else None
        text = read(path) if readable else None
        if missing_ok and readable and text is None:
            loaded["missing"][host] = path
            continue
        loaded["plans"][host] = plan_load(text, plan_dir, host, policy)
        loaded["sources"][host] = "file"
    return loaded


def _checked_plan_file(text, path, host):
    """A plan file's content when it is a plan of this format for this host, else PlanError."""
    fix = f"run: {plan_fix(host)}"
    content = _read_plan_file(text, path, host)
    if content.get("format") != PLAN_FORMAT:
        raise PlanError(f"passthrough_plan_load: host {host}: plan file {path} is stale: it has plan format "
                        f"{content.get('format')!r}, this version reads format {PLAN_FORMAT}; {fix}")
    if content["plan"].get("host") not in (None, host):
        raise PlanError(f"passthrough_plan_load: host {host}: plan file {path} is the plan of host "
                        f"{content['plan'].get('host')}, not of {host}; {fix}")
    if not isinstance(content.get("facts"), dict):
        raise PlanError(f"passthrough_plan_file: plan file {path} of host {host} has no 'facts' object: "
                        f"write it again with: {plan_fix(host)}")
    return content


def plan_file_host(path):
    """The host a plan file is of: its name less ``.json`` (``<passthrough_plan_dir>/<host>.json``), or None for
    a path that is no plan file. Whether that name is a host name is the loader's check, not this one's."""
    if not isinstance(path, str) or not path.endswith(".json"):
        return None
    return path.rsplit("/", 1)[-1][:-len(".json")]


def fleet(plan_files, inventory_hosts, trusted=None):
    """The fleet as the plan directory records it: one ``<host>.json`` per GPU host, shared by every AWX job slice
    (roles/passthrough/tasks/fleet.yml finds the files). A host with a plan file that this inventory does not
    hold is another slice's, or a host that left the fleet. Returns ``{"plan_files", "hosts", "others",
    "other_plan_files"}``: the files (sorted), their hosts (sorted, once each), the hosts of those this inventory
    does not hold (sorted, once each) and those hosts' files (sorted).

    The plan files are what Nova's device specs and aliases, the report and the fleet a percentage reboot batch is
    of are made from: a file another user could have written is refused, never counted (``untrusted_plan_files``).

    :param plan_files: the plan files found: their paths, or ansible.builtin.find's results (``path``, ``uid``,
        ``mode``, ``pw_name``), whose owner and mode are then checked against ``trusted`` (a path alone is not).
    :param inventory_hosts: the inventory's hosts (``groups['all']``).
    :param trusted: the owners a plan file may have, ``{uid: name}`` (this user and root); None checks none.
    :raises PlanError: a path that is no plan file (<host>.json); a plan file another user could have written.
    """
    if not isinstance(plan_files, (list, tuple)) or not isinstance(inventory_hosts, (list, tuple)):
        raise PlanError(f"passthrough_fleet: the plan files and the inventory's hosts must be lists, got "
                        f"{plan_files!r} and {inventory_hosts!r}")
    found = [entry if isinstance(entry, Mapping) else {"path": entry} for entry in plan_files]
    if trusted is not None:
        untrusted = untrusted_plan_files([entry for entry in plan_files if isinstance(entry, Mapping)], trusted)
        if untrusted:
            raise PlanError("passthrough_fleet: " + " ".join(untrusted) + " The plan directory is the fleet's record "
                            "(Nova's device specs and aliases, the report, the fleet a percentage reboot batch is "
                            "of): nothing was read from it. Remove a file that is not a plan of this project's, or "
                            "make it this user's alone as the message says; then run again.")
    plan_files = sorted(str(entry.get("path")) for entry in found)
    hosts = {}
    for path in plan_files:
        hosts[path] = plan_file_host(path)
        if hosts[path] is None:
            raise PlanError(f"passthrough_fleet: {path!r} is not a plan file (<host>.json)")
    inventory = set(inventory_hosts)
    others = [path for path in plan_files if hosts[path] not in inventory]
    return {"plan_files": plan_files, "hosts": sorted(set(hosts.values())),
            "others": sorted({hosts[path] for path in others}), "other_plan_files": others}


def untrusted_plan_files(found, trusted):
    """One sentence for each plan file found (``{path, uid, mode, pw_name}``, ansible.builtin.find's) that another
    user than the trusted ones (``{uid: name}``: this user, root) owns, or that group or others may write (a file the plan role
    writes is this user's, mode 0644), naming its owner, its mode and the commands that make it this user's alone;
    a file whose owner or mode is unknown is named too. Empty when every file is trusted."""
    problems = []
    for entry in sorted(found, key=lambda e: str(e.get("path"))):
        path, uid, mode = entry.get("path"), entry.get("uid"), entry.get("mode")
        try:
            bits = int(str(mode), 8)
        except ValueError:
            bits = None
        if isinstance(uid, bool) or not isinstance(uid, int) or bits is None:
            problems.append(f"The plan file {path}: its owner and mode are unknown ({uid!r}, {mode!r}).")
            continue
        me = trusted[max(trusted)] if trusted else "root"  # this user (root's uid is the least)
        fixes = ([f"chown {me} {path}"] if uid not in trusted else []) + \
            ([f"chmod go-w {path}"] if bits & 0o022 else [])
        if fixes:
            problems.append(f"The plan file {path} is owned by {entry.get('pw_name') or 'uid ' + str(uid)}, mode "
                            f"{bits:04o}: another user than this one could have written it ({' && '.join(fixes)}).")
    return problems


def fleet_plan_load(text, path):
    """A plan file of a GPU host that this inventory does not hold: the plan of another AWX job slice's host (the
    plan directory is the fleet's, shared by every slice), or of a host that left the fleet. Returns
    ``{"facts": ..., "plan": ...}`` like ``passthrough_plan_load``, checked the same way except against the
    host's policy, which only the inventory holding the host knows (its own runs refuse the plan when stale).

    :param text: the file's text.
    :param path: the file, ``<passthrough_plan_dir>/<host>.json``; its name names the host.
    :raises PlanError: a file name that is no host name, a corrupt or foreign file, another plan format.
    """
    host = plan_file_host(path)
    if host is None:
        raise PlanError(f"passthrough_fleet_plan_load: {path!r} is not a plan file (<host>.json)")
    problem = locations.host_name_problem(host)
    if problem:
        raise PlanError(f"passthrough_fleet_plan_load: plan file {path}: {problem}; move the file out "
                        "of the plan directory")
    content = _checked_plan_file(text, path, host)
    return _loaded(content)


def plans_only(loaded):
    """``{host: plan}`` of the loaded plans ``{host: {"facts": ..., "plan": ...}}`` (``passthrough_plans`` or
    ``passthrough_other_plans`` of the one loader), in their order.

    :raises PlanError: anything else than the loader's shape, naming the host.
    """
    if not isinstance(loaded, Mapping):
        raise PlanError("passthrough_plans_only: the plans must be the loaded plans {host: {facts, plan}} "
                        f"(passthrough_plans of roles/passthrough tasks/load.yml), got {type(loaded).__name__}")
    plans = {}
    for host, data in loaded.items():
        if not isinstance(data, Mapping) or not isinstance(data.get("plan"), Mapping):
            raise PlanError(f"passthrough_plans_only: host {host}: {data!r} is not a loaded plan {{facts, plan}} "
                            "(roles/passthrough tasks/load.yml)")
        plans[host] = data["plan"]
    return plans
