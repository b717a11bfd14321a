# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""What PCI NUMA affinity a GPU flavor can get, from where the plans put each host's GPUs.

Nova's rule, read in Nova 33 (2026.1) and unchanged in this respect since 23.0.0 (Wallaby, the ``socket`` policy):

* The policy of a PCI request is the flavor's ``hw:pci_numa_affinity_policy`` (or the image's
  ``hw_pci_numa_affinity_policy``; Ussuri and later), else the alias's ``numa_policy`` (default ``legacy``):
  ``nova/pci/request.py`` ``_translate_alias_to_requests`` takes ``affinity_policy or numa_policy``.
* It applies only to a guest with a NUMA topology (``nova/pci/stats.py`` ``_filter_pools_for_numa_cells`` returns
  every pool when the instance has no NUMA cells): one asked for by ``hw:numa_nodes``, or implied by
  ``hw:cpu_policy`` ``dedicated``/``mixed``, ``resources:PCPU``, ``hw:mem_page_size`` or ``hw:pmem``
  (``nova/virt/hardware.py`` ``numa_get_constraints``: one node unless ``hw:numa_nodes`` says more).
* ``required``: only devices on the host NUMA nodes the guest's K nodes landed on; a device whose NUMA node the
  kernel does not know (``numa_node`` -1, ``None`` in the plan) never qualifies. ``legacy``: the same, and devices
  of unknown node qualify. ``socket``: devices on any node of the sockets those nodes are on; unknown ones never
  qualify. ``preferred``: any device, local ones first. The same filtering runs when PCI devices are scheduled in
  Placement (the NUMATopologyFilter over Placement's candidates).

So a flavor of N GPUs whose guest has K NUMA nodes can get ``required`` only where some host holds N of those GPUs
on K of its nodes; ``socket`` never where the devices' nodes are unknown (the plans do not record sockets, so that
is all that is checked for it). ``flavor_problems`` names every flavor that asks for more, with the arithmetic.

Pure functions; the filter ``cloud_flavor_numa_errors`` (plugins/filter/cloud_flavors.py) is its adapter.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias

__all__ = ["POLICIES", "POLICY_SPEC", "DEFAULT_ALIAS_POLICY", "guest_numa_nodes", "gpu_nodes", "flavor_problems",
           "declared_problems"]

# nova.objects.fields.PCINUMAAffinityPolicy.ALL
POLICIES = ("required", "legacy", "preferred", "socket")
POLICY_SPEC = "hw:pci_numa_affinity_policy"
# Nova's own default for an alias without numa_policy (nova/pci/request.py).
DEFAULT_ALIAS_POLICY = "legacy"


def guest_numa_nodes(extra_specs):
    """``(K, why)``: the NUMA nodes a guest of these flavor extra specs gets and the spec that gives them, or
    ``(None, None)`` when the guest has no NUMA topology (Nova then applies no PCI NUMA policy)."""
    specs = {str(k): str(v).strip() for k, v in (extra_specs or {}).items()}
    nodes = specs.get("hw:numa_nodes")
    if nodes is not None:
        try:
            count = int(nodes)
        except ValueError:
            count = 0
        if count >= 1:
            return count, f"hw:numa_nodes={nodes}"
    if specs.get("hw:cpu_policy", "").lower() in ("dedicated", "mixed"):
        return 1, f"hw:cpu_policy={specs['hw:cpu_policy']}"
    for key in ("resources:PCPU", "hw:mem_page_size", "hw:pmem"):
        if specs.get(key):
            return 1, f"{key}={specs[key]}"
    return None, None


def gpu_nodes(plans):
    """``{alias: {host: {node: count}}}``: where each host's GPUs offered to Nova sit, by alias (the plans'
    ``selected`` devices; node None where the kernel does not know it). ``plans`` is ``{host: {facts, plan}}``."""
    out = {}
    for host, data in sorted((plans or {}).items()):
        plan = data.get("plan") if isinstance(data, Mapping) else None
        for device in (plan or {}).get("selected") or []:
            alias = device.get("alias")
            if not alias:
                continue
            nodes = out.setdefault(alias, {}).setdefault(host, {})
            node = device.get("numa_node")
            node = node if isinstance(node, int) and not isinstance(node, bool) and node >= 0 else None
            nodes[node] = nodes.get(node, 0) + 1
    return out


def _fits(request, nodes_by_alias, guest_nodes, policy):
    """Whether one host holds every (alias, count) of REQUEST on GUEST_NODES of its NUMA nodes under POLICY."""
    if policy == "socket":  # any node of the guest's sockets: the plans hold no sockets; unknown nodes never qualify
        return all(sum(c for n, c in nodes_by_alias.get(alias, {}).items() if n is not None) >= count
                   for alias, count in request)
    known = sorted({n for alias, _count in request for n in nodes_by_alias.get(alias, {}) if n is not None})
    unknown_ok = policy == "legacy"
    choices = itertools.combinations(known, min(guest_nodes, len(known))) if known else [()]
    for chosen in choices:
        if all(sum(nodes_by_alias.get(alias, {}).get(n, 0) for n in chosen)
               + (nodes_by_alias.get(alias, {}).get(None, 0) if unknown_ok else 0) >= count
               for alias, count in request):
            return True
    return False


def _where(request, capacity):
    """'seed-v100 has tesla-v100 on node 0 x2, node 1 x2' for each host offering the request's aliases."""
    hosts = sorted({host for alias, _count in request for host in capacity.get(alias, {})})
    parts = []
    for host in hosts:
        placed = []
        for alias, _count in request:
            nodes = capacity.get(alias, {}).get(host, {})
            if nodes:
                placed.append(f"{alias} " + ", ".join(
                    f"{'node ' + str(n) if n is not None else 'no known node'} x{c}"
                    for n, c in sorted(nodes.items(), key=lambda item: (item[0] is None, item[0] or 0))))
        parts.append(f"{host} has {'; '.join(placed)}")
    return "; ".join(parts) or "no GPU host offers them"


def flavor_problems(flavors, capacity, alias_policies=None, default_policy=DEFAULT_ALIAS_POLICY):
    """One message for each declared flavor whose PCI NUMA affinity no GPU host can give (empty when all can).

    :param flavors: the declared flavors (``cloud_flavors``); entries of another shape are left to other checks.
    :param capacity: ``gpu_nodes(plans)``.
    :param alias_policies: ``{alias: numa_policy}`` as rendered into Nova's aliases; an alias missing from it has
        ``default_policy``.
    """
    problems = []
    alias_policies = alias_policies or {}
    for index, flavor in enumerate(flavors if isinstance(flavors, (list, tuple)) else []):
        request = pci_alias.flavor_request(flavor)
        if not request or any(alias not in capacity for alias, _count in request):
            continue  # no GPUs, a malformed request or an alias no host offers: the alias check names it
        specs = {str(k): str(v).strip() for k, v in flavor["extra_specs"].items()}
        guest_nodes, why = guest_numa_nodes(specs)
        if guest_nodes is None:
            continue  # no NUMA topology: Nova applies no PCI NUMA policy
        own = specs.get(POLICY_SPEC, "").lower()
        policies = {own} if own else {alias_policies.get(alias, default_policy) for alias, _count in request}
        policy = next((p for p in ("required", "socket", "legacy") if p in policies), "preferred")
        if policy == "preferred":
            continue
        hosts = sorted({host for alias, _count in request for host in capacity[alias]})
        by_host = {host: {alias: capacity[alias].get(host, {}) for alias, _count in request} for host in hosts}
        if any(_fits(request, by_host[host], guest_nodes, policy) for host in hosts):
            continue
        label = f"flavors[{index}] ({flavor.get('name') or 'no name'})"
        source = f"its {POLICY_SPEC}" if own else "the numa_policy of its alias in Nova's [pci] alias"
        asked = " and ".join(f"{count} x {alias}" for alias, count in request)
        rule = ("devices on the sockets of those nodes, never one of unknown node" if policy == "socket" else
                "devices on those nodes" + (" or of unknown node" if policy == "legacy" else
                                            ", never one of unknown node"))
        problems.append(
            f"{label}: asks for {asked} with PCI NUMA affinity policy '{policy}' ({source}) on a guest of "
            f"{guest_nodes} NUMA node(s) ({why}), which takes {rule}; no GPU host holds that: {_where(request, capacity)}. "
            f"Nova would never schedule it. Give the flavor {POLICY_SPEC}=preferred, or hw:numa_nodes with as many "
            "nodes as the GPUs span, or ask for fewer GPUs")
    return problems


def declared_problems(flavors, plans, alias_policy=None):
    """``flavor_problems`` of the declared flavors over the plans' GPU nodes, every alias with ALIAS_POLICY (the
    numa_policy Nova's aliases carry; None where none is written: Nova's legacy)."""
    return flavor_problems(flavors, gpu_nodes(plans), default_policy=alias_policy or DEFAULT_ALIAS_POLICY)
