# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Which hosts a run acts on, and whether the phases on the control host can do their part for them.

The phases that run on the control host (nova, deploy, cloud, the health check's Nova view, the summary, the report)
are plays on ``localhost``. ``ansible-playbook --limit <host>`` limits ``localhost`` away too (Ansible's implicit
localhost is matched only by a pattern that names it): each of those plays then runs on no host, silently, and the
run ends green with the new host's GPUs never given to Nova. ``run_scope`` decides, from the hosts Ansible itself
kept for a play on ``all:localhost`` (the limit as Ansible evaluates it, ``@file`` limits included), which GPU hosts
the run acts on and whether the control host is among them; when it is not, the run is refused before anything is
written, naming the limit that keeps the control host.

With the control host in a limited run, the control phases act on exactly the run's GPU hosts (``gpu_hosts``: the
Nova overrides of those hosts, kolla-ansible limited to them and the control group, ``kolla_hosts``); the global
files stay the fleet's, from every plan file (as for a job slice, docs/operator-guide.md).
"""

from __future__ import annotations

__all__ = ["CONTROL_HOST", "run_scope", "limit_with_control_host"]

# The host the control phases' plays run on: Ansible's implicit localhost (or an inventory's own).
CONTROL_HOST = "localhost"
# The groups kolla_deploy gives kolla-ansible (its kolla_deploy_groups: control, network, compute from gpu_hosts,
# monitoring, storage): a limited run's hosts outside them are not kolla's.
KOLLA_GROUPS = ("control", "network", "gpu_hosts", "monitoring", "storage")


def _names(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"run_scope: {what} must be a list of host names, got {value!r}")
    return list(value)


def limit_with_control_host(limit, patterns, run_hosts):
    """The ``--limit`` value that keeps what ``limit`` keeps and adds the control host.

    ``patterns`` is ``limit`` split as Ansible splits it (``ansible.inventory.manager.split_host_pattern``);
    ``run_hosts`` the hosts it kept. Ansible applies every ``&`` intersection to the whole union, ``localhost``
    included, so a limit with one is given as the explicit list of the hosts it kept; a limit of exclusions only
    (``!gpu-007``, which Ansible reads as ``all:!gpu-007``) needs ``all`` spelled out once another pattern stands
    beside it. The parts are joined with commas (Ansible splits on ``:`` only a pattern without a comma).
    """
    patterns = [p for p in patterns if p]
    if limit.startswith("@") or any(p.startswith("&") for p in patterns):
        return ",".join([h for h in run_hosts if h != CONTROL_HOST] + [CONTROL_HOST])
    if all(p.startswith("!") for p in patterns):
        return ",".join(["all", CONTROL_HOST] + patterns)
    # Rejoined with commas: Ansible splits a pattern on ':' only when it holds no comma.
    return ",".join(patterns + [CONTROL_HOST])


def run_scope(play_hosts, groups, limit=None, patterns=None, playbook="site.yml", inventories=(),
              needs_gpu_hosts=True, needs_control_host=True):
    """What a run acts on: ``{limited, control_host, gpu_hosts, kolla_hosts, errors}``.

    * ``play_hosts``: the hosts Ansible kept for a play on ``all:localhost`` (its ``ansible_play_hosts_all``);
    * ``groups``: the inventory's groups (Ansible's ``groups``);
    * ``limit``: the ``--limit`` value (``ansible_limit``), None or empty when the run has none; ``patterns`` the
      same split as Ansible splits it;
    * ``playbook`` and ``inventories`` (``ansible_inventory_sources``) name the command in a refusal;
    * ``needs_gpu_hosts``: the playbook does nothing useful without a host in ``gpu_hosts``;
    * ``needs_control_host``: the playbook has plays on the control host (a limit must keep it).

    ``gpu_hosts`` are the GPU hosts the run acts on, in inventory order (every one without a limit); ``kolla_hosts``
    the hosts a limited run deploys with kolla-ansible (its GPU hosts and other hosts, and the ``control`` group,
    whose nova-api reads the aliases), empty when the run is not limited: kolla-ansible then runs on the whole
    inventory. ``errors`` says why the run cannot go on, naming the command that does what was asked. Pure.
    """
    play_hosts = _names(play_hosts, "play_hosts")
    if not isinstance(groups, dict):
        raise ValueError(f"run_scope: groups must be a mapping of group to hosts, got {type(groups).__name__}")
    all_gpu = _names(groups.get("gpu_hosts", []) or [], "groups['gpu_hosts']")
    limited = isinstance(limit, str) and limit != ""
    kept = set(play_hosts)
    gpu_hosts = [h for h in all_gpu if h in kept] if limited else all_gpu
    control_host = CONTROL_HOST in kept or not limited
    errors = []
    sources = " ".join(f"-i {source}" for source in inventories or ()) or "-i inventory/<env>"
    if needs_gpu_hosts and not all_gpu:
        errors.append(
            f"the inventory ({', '.join(inventories or ()) or 'the one given'}) has no host in the group gpu_hosts: "
            f"every phase of {playbook} would run on no GPU host and the run would end green having done nothing. "
            "Put the GPU servers in gpu_hosts (docs/operator-guide.md, section 1).")
    if needs_control_host and limited and not control_host:
        wanted = limit_with_control_host(limit, patterns if patterns is not None else [limit], play_hosts)
        gpu_named = ", ".join(gpu_hosts) or "no GPU host"
        errors.append(
            f"the limit '{limit}' leaves out the control host ({CONTROL_HOST}), where the nova, deploy, cloud, "
            f"health, summary and report phases run: they would run on no host for {gpu_named} and the run would "
            f"end green without giving Nova their GPUs. Nothing was changed. Keep the control host in the limit: "
            f"ansible-playbook {playbook} {sources} --limit '{wanted}'")
    kolla_hosts = []
    if limited and control_host:
        control = _names(groups.get("control", []) or [], "groups['control']")
        chosen = set(h for h in play_hosts if h != CONTROL_HOST) | set(control)
        order = []
        for group in KOLLA_GROUPS:
            for host in groups.get(group, []) or []:
                if host in chosen and host not in order:
                    order.append(host)
        kolla_hosts = order
    return {"limited": limited, "control_host": control_host, "gpu_hosts": gpu_hosts, "kolla_hosts": kolla_hosts,
            "errors": errors}
