# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""A declared flavor's PCI request against the plans: the rule os_flavors and os_cloud apply (``flavors.py``) and
site.yml asks right after the plan phase (the filter ``cloud_flavor_alias_errors``). Pure, and free of the
OpenStack client: a filter imports it."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias

__all__ = ["ALIAS_KEY", "spec_value", "alias_errors", "declared_alias_errors", "hosts_words"]

ALIAS_KEY = pci_alias.FLAVOR_SPEC


def spec_value(value):
    """Extra-spec values as Nova stores them: strings, booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def alias_errors(label, text, known_aliases, retired_aliases=None):
    """The problems of one flavor's ``pci_passthrough:alias`` extra spec (``label`` names the flavor): malformed, or
    asking for an alias no GPU host provides (``known_aliases``; None: not checked), or one only retired hosts
    offered (``retired_aliases``, ``{alias: [hosts]}``), each naming those hosts."""
    key = ALIAS_KEY
    try:
        aliases = pci_alias.parse_request(text)
    except ValueError as exc:
        return [f"{label}: extra spec {key}='{text}' is malformed: {exc} (expected ALIAS:COUNT with COUNT a positive "
                "integer, several separated by commas, e.g. tesla-v100:1)"]
    if known_aliases is None:
        return []
    errors = []
    retired_aliases = retired_aliases or {}
    for alias, _count in aliases:
        if alias in known_aliases:
            continue
        offered = ', '.join(sorted(known_aliases)) or 'none'
        hosts = retired_aliases.get(alias)
        if hosts:
            errors.append(
                f"{label}: extra spec {key} asks for PCI alias '{alias}', which no GPU host provides any more: "
                f"{hosts_words(hosts)} offered it before their GPUs were replaced by another model (aliases in the "
                f"passthrough plans now: {offered}); ask for one of those in the flavor, or remove the flavor from "
                "cloud_flavors (servers already running keep their flavor)")
        else:
            errors.append(
                f"{label}: extra spec {key} asks for PCI alias '{alias}', which no GPU host provides (aliases in the "
                f"passthrough plans: {offered}); fix the flavor or the hosts' alias policy")
    return errors


def declared_alias_errors(flavors, known_aliases, retired_aliases=None):
    """The alias problems (``alias_errors``) of the declared flavors as the inventory gives them (``cloud_flavors``,
    before the module's argument spec has checked their types: an entry that is not a mapping, or whose extra specs
    are not one, is left to it). Makes no API call: site.yml asks it before any host or Nova file is written."""
    errors = []
    for index, flavor in enumerate(flavors if isinstance(flavors, (list, tuple)) else []):
        if not isinstance(flavor, Mapping) or not isinstance(flavor.get("extra_specs"), Mapping):
            continue
        label = f"flavors[{index}] ({flavor.get('name') or 'no name'})"
        for key, value in flavor["extra_specs"].items():
            if str(key) == ALIAS_KEY:
                errors += alias_errors(label, spec_value(value), known_aliases, retired_aliases)
    return errors


def hosts_words(hosts):
    """'host gpu-002' or 'hosts gpu-002, gpu-005'."""
    return ("host " if len(hosts) == 1 else "hosts ") + ", ".join(hosts)
