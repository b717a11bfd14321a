# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Placement's bounds on allocation candidates, for GPU hosts that offer several devices of one model.

With PCI in Placement every GPU is a child provider of its compute node with one unit of its model's resource class,
and Nova asks for a flavor's N GPUs as N request groups of one unit each (``nova/objects/request_spec.py``: "we need
to generate one RequestGroup per requested device", group_policy none). Placement builds every combination of
children for those groups before it applies the ``limit`` Nova sends (``[scheduler] max_placement_results``, 1000):
a host with n GPUs of a model gives n!/(n-k)! candidates for a flavor of k, and its generation time grows faster than
that (a published 12 s for 8 of 8; larger never finish). The facts, from openstack/placement's option help, by tag:

* ``[placement] max_allocation_candidates`` (default -1, unbounded) and
  ``[placement] allocation_candidates_generation_strategy`` (``depth-first`` default, ``breadth-first``): in 13.0.0
  (2025.1) and every release after it; backported as a fix to 10.0.1 (2023.2), 11.0.1 (2024.1) and 12.0.1 (2024.2).
  For "wide and symmetric provider trees, i.e. there are multiple children providers under the same root having
  inventory from the same resource class (e.g. in case of nova's mdev GPU or PCI in Placement features)" the help
  recommends a limit ("a good initial value could be around 100000") and breadth-first: depth-first with a limit,
  or with Nova's own limit of 1000, can fill the answer from the first hosts alone.
* ``[workarounds] optimize_for_wide_provider_trees`` (default false): in 15.0.0 (2026.1); backported to 12.0.2
  (2024.2) and to the 2025.1 and 2025.2 stable branches (releases of those after October 2025). "When to enable: if
  you have at least 8 child resource providers within a tree providing inventory of the same resource class. And
  you are trying to support VMs with more than 4 such resources"; then ``max_allocation_candidates`` "not more than
  1000" and breadth-first.
* A Placement whose release does not register an option ignores it in its file (oslo.config reads only registered
  options): a point release before a backport runs as before.

The rule (``candidate_limits``): nothing unless the computes report their GPUs to Placement; a host with at least
two GPUs of one resource class (a wide, symmetric tree) gets breadth-first and a limit of 100000 from 2023.2 on; a
host with at least eight and a flavor asking more than four of that class (or, flavors unknown, the host's own count)
gets the workaround and a limit of 1000 from 2024.2 on. Pure; the nova_pci_config role renders the result into
kolla-ansible's ``placement.conf`` override.
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import override_ini, placement
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias

LIMITS_SINCE = (2023, 2)
WIDE_TREES_SINCE = (2024, 2)
WIDE_MIN_DEVICES = 2          # "multiple children providers under the same root" of one resource class
WIDE_TREE_MIN_DEVICES = 8     # "at least 8 child resource providers within a tree"
WIDE_TREE_MIN_REQUEST = 5     # "VMs with more than 4 such resources"
MAX_CANDIDATES = 100000       # "a good initial value could be around 100000"
MAX_CANDIDATES_WIDE_TREES = 1000  # with the workaround: "not more than 1000"
STRATEGY = "breadth-first"
OPTIONS = (("placement", "max_allocation_candidates"), ("placement", "allocation_candidates_generation_strategy"),
           ("workarounds", "optimize_for_wide_provider_trees"))


def widest(host_classes):
    """(host, resource class, devices) of the host offering the most devices of one class (ties: the first by
    name); None when no host offers any."""
    best = None
    for host in sorted(host_classes):
        for resource_class, count in sorted((host_classes[host] or {}).items()):
            if best is None or count > best[2]:
                best = (host, resource_class, count)
    return best


def largest_requests(flavor_aliases):
    """{resource class: the most devices of it one flavor asks}, from {flavor: [(alias, count), ...]}."""
    out = {}
    for requested in flavor_aliases.values():
        per_class = {}
        for alias_name, count in requested:
            resource_class = placement.resource_class(alias_name)
            per_class[resource_class] = per_class.get(resource_class, 0) + count
        for resource_class, count in per_class.items():
            out[resource_class] = max(out.get(resource_class, 0), count)
    return out


def candidate_limits(release, in_placement, host_classes, requests=None):
    """What placement.conf needs for these hosts: dict(options={section: {option: value}}, wide=bool, reasons=[...]);
    wide: some host offers two or more GPUs of one resource class in Placement.

    release: kolla's openstack_release (ValueError when unknown); in_placement: whether the computes report their
    GPUs to Placement; host_classes: {host: {resource class: devices}}; requests: {resource class: the most one
    flavor asks}, or None when the flavors are not known here (then a flavor is taken to ask for a whole host).
    """
    got = placement.series(release)
    if not in_placement:
        return dict(options={}, wide=False,
                    reasons=["the computes do not report their GPUs to Placement: no candidates to bound"])
    wide = widest(host_classes)
    if wide is None or wide[2] < WIDE_MIN_DEVICES:
        return dict(options={}, wide=False,
                    reasons=["no host offers two or more GPUs of one model: Placement's defaults hold"])
    host, resource_class, count = wide
    if got < LIMITS_SINCE:
        return dict(options={}, wide=True, reasons=[
            f"{host} offers {count} GPUs of {resource_class}, but Placement of {release} has no candidate limit "
            "(from 2023.2: max_allocation_candidates, allocation_candidates_generation_strategy)"])
    options = {"placement": {"max_allocation_candidates": MAX_CANDIDATES,
                             "allocation_candidates_generation_strategy": STRATEGY}}
    reasons = [f"{host} offers {count} GPUs of {resource_class}: candidates visited breadth-first (every host "
               "gets its turn before Nova's limit)"]
    trees = [(h, rc, n) for h in sorted(host_classes) for rc, n in sorted((host_classes[h] or {}).items())
             if n >= WIDE_TREE_MIN_DEVICES and (n if requests is None else requests.get(rc, 0)) >= WIDE_TREE_MIN_REQUEST]
    if trees:
        tree_host, tree_class, tree_count = trees[0]
        ask = tree_count if requests is None else requests[tree_class]
        why = (f"{tree_host} offers {tree_count} GPUs of {tree_class} and "
               + (f"a flavor asks {ask} of them" if requests is not None else "a flavor may ask for all of them"))
        if got >= WIDE_TREES_SINCE:
            options["placement"]["max_allocation_candidates"] = MAX_CANDIDATES_WIDE_TREES
            options["workarounds"] = {"optimize_for_wide_provider_trees": True}
            reasons.append(f"{why}: Placement's wide-tree optimisation on (15.0.0, 2026.1; 12.0.2 for 2024.2, and "
                           f"the 2025.1 and 2025.2 releases since October 2025) with at most "
                           f"{MAX_CANDIDATES_WIDE_TREES} candidates")
        else:
            reasons.append(f"{why}: Placement of {release} has no wide-tree optimisation (from 2024.2), so such a "
                           "request may take long to schedule")
    elif requests is not None and count >= WIDE_TREE_MIN_DEVICES:
        reasons.append(f"no flavor asks more than {WIDE_TREE_MIN_REQUEST - 1} GPUs of one model from a host with "
                       f"{WIDE_TREE_MIN_DEVICES} or more: the wide-tree optimisation stays off")
    reasons[0] += f", at most {options['placement']['max_allocation_candidates']} generated per request"
    return dict(options=options, wide=True, reasons=reasons)


def render(options):
    """The INI lines of ``options`` ({section: {option: value}}), sections and options in a fixed order."""
    lines = []
    for section in sorted(options):
        lines.append(f"[{section}]")
        for name in sorted(options[section]):
            value = options[section][name]
            lines.append(f"{name} = {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines)


def host_classes_of(specs_by_host):
    """{host: {resource class: devices}} from the device_spec entries per host (nova_pci_device_spec with Placement:
    each entry carries its ``resource_class``; entries without one, pools only, count for nothing)."""
    out = {}
    for host, specs in (specs_by_host or {}).items():
        for spec in specs or []:
            resource_class = spec.get("resource_class")
            if resource_class:
                out.setdefault(host, {})
                out[host][resource_class] = out[host].get(resource_class, 0) + 1
    return out


def flavor_aliases(flavors):
    """{flavor name: [(alias, count), ...]} of the declared flavors (cloud_flavors) that ask for PCI aliases; a value
    the cloud phase would refuse is left to that phase (it names the flavor there) and counts for nothing here."""
    requests = {str(flavor.get("name")): pci_alias.flavor_request(flavor) for flavor in flavors or []
                if pci_alias.flavor_request(flavor)}
    return requests


def for_deployment(specs_by_host, release, in_placement, flavors=None):
    """What the nova_pci_config role renders into kolla-ansible's placement.conf: candidate_limits() for the hosts'
    device_spec entries and the declared flavors (None: not known here), with ``text``, the block's INI lines."""
    requests = None if flavors is None else largest_requests(flavor_aliases(flavors))
    got = candidate_limits(release, in_placement, host_classes_of(specs_by_host), requests)
    return dict(got, text=render(got["options"]))


def operator_settings(files, begin, end):
    """["<file>: [section] option", ...] for each of Placement's candidate options that an override file sets outside
    this project's marked block (files: {path relative to node_custom_config: text}; read as oslo.config reads them,
    ``nova/override_ini.py``): such a setting is the operator's, and the role does not write its own beside it."""
    wanted = set(OPTIONS)
    found = []
    for path in sorted(files):
        operator, _ours = override_ini.parse_override(files[path], begin, end)
        found += [f"{path}: [{section}] {key}" for section, key, _value, _line in operator if (section, key) in wanted]
    return found
