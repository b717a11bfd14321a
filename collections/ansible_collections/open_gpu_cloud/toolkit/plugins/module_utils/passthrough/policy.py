# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The operator's ``passthrough_policy``: its validation (the messages name the host, the key and the fix),
the retired policy variables, and the fingerprint a plan file records."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.alias import alias_name_error
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.rules import DEFAULT_VENDORS, plan_error as _err


def normalise_address(value, host=None, where="address") -> str:
    """Return the full lowercase form of a PCI address (``27:00.0`` -> ``0000:27:00.0``)."""
    text = pci_address.normalise_address(str(value))
    if text is None:
        raise _err(host, f"{where} {value!r} is not a PCI address; write it as 0000:27:00.0 (or 27:00.0)")
    return text


POLICY_KEYS = ("alias_names", "allow_unsafe_interrupts", "amd_iommu_on", "exclude", "keep_on_host", "vendors")
POLICY_BOOLEANS = ("allow_unsafe_interrupts", "amd_iommu_on")


def _policy_text(value, host, where, example):
    """An ID or address from the policy must be a string: YAML turns unquoted 0x10de or 27:00.0 into numbers."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise _err(host, f"{where} {value!r} is a number, not a string (YAML reads an unquoted 0x10de as the integer "
                         f"4318 and 27:00.0 as a sexagesimal number): quote it, e.g. {example!r}")
    raise _err(host, f"{where} {value!r} is a {type(value).__name__}, not a string: write it as e.g. {example!r}")


def _policy_bool(policy, key, host):
    """Ansible's boolean rules (true/false, yes/no, on/off, 1/0), strictly: anything else is refused."""
    value = policy.get(key, False)
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise _err(host, f"passthrough_policy.{key} is {value!r}, which is not a boolean: write true or false "
                         "(Ansible also reads yes/no, on/off, 1/0)") from None


# One policy variable (passthrough_policy) plans the host, configures it, renders Nova's device_spec and checks its
# health; the names the host and health roles had are refused, so no host is configured from one policy and
# offered to Nova from another.
RETIRED_POLICY_VARS = ("passthrough_host_policy", "gpu_health_policy")


def retired_vars_errors(hosts, hostvars):
    """The refusals of the retired policy variables the given hosts still set (empty when none does).

    :param hosts: inventory hostnames, each named in its message with the fix.
    :param hostvars: Ansible's ``hostvars`` (only the variables' names are looked at).
    """
    errors = []
    for host in hosts:
        retired = [name for name in RETIRED_POLICY_VARS if name in hostvars[host]]
        if retired:
            names = " and ".join(retired)
            errors.append(
                f"Host {host}: {names} {'is' if len(retired) == 1 else 'are'} no longer read: the plan, the host "
                f"configuration, Nova and the health check all use passthrough_policy. Rename {names} to "
                f"passthrough_policy in the inventory (one policy per host), then run: ansible-playbook "
                f"playbooks/plan.yml -i inventory/<env> --limit {host}")
    return errors


def policy_errors(policy, host=None):
    """The problems of a passthrough_policy that show without the host's facts (types, keys, formats),
    as a list of messages naming the host and the key; empty when the policy is well formed. The role's
    preflight asserts this; the planner raises the same messages."""
    try:
        check_policy(policy, None, host)
    except PlanError as exc:
        return [str(exc)]
    return []


def check_policy(policy, by_addr, host):
    """Validate and normalise the policy. ``by_addr`` None skips the checks that need the host's devices."""
    if policy is None:
        policy = {}
    if not isinstance(policy, dict):
        raise _err(host, f"the policy must be a dict (passthrough_policy), got {type(policy).__name__}")
    unknown = sorted(str(k) for k in set(policy) - set(POLICY_KEYS))
    if unknown:
        raise _err(host, f"unknown passthrough_policy key(s) {', '.join(unknown)}; known keys: {', '.join(POLICY_KEYS)}")
    flags = {key: _policy_bool(policy, key, host) for key in POLICY_BOOLEANS}

    vendors = policy.get("vendors", list(DEFAULT_VENDORS))
    if vendors is None or vendors == []:
        raise _err(host, "passthrough_policy.vendors is empty: no GPU vendor would be considered (an empty list does "
                         "not mean the default vendors). Remove the key for the default (NVIDIA 10de and AMD 1002), or "
                         "list the vendor ids, e.g. ['10de']")
    if not isinstance(vendors, list):
        raise _err(host, "passthrough_policy.vendors must be a list of 4-hex-digit vendor ids, e.g. ['10de']")
    vendors_out = []
    for vendor in vendors:
        text = _policy_text(vendor, host, "passthrough_policy.vendors entry", "10de").lower().removeprefix("0x")
        if not pci_address.is_id(text):
            raise _err(host, f"passthrough_policy.vendors has {vendor!r}: write vendor ids as 4 hex digits, e.g. '10de'")
        vendors_out.append(text)

    alias_names = {}
    raw_aliases = policy.get("alias_names") or {}
    if not isinstance(raw_aliases, dict):
        raise _err(host, "passthrough_policy.alias_names must map 'vendor:product' to an alias name")
    for model_id, name in raw_aliases.items():
        key = _policy_text(model_id, host, "passthrough_policy.alias_names key", "10de:1db4").lower()
        if not pci_address.is_model_id(key):
            raise _err(host, f"passthrough_policy.alias_names key {model_id!r} is not a 'vendor:product' id "
                             "in hex like '10de:1db4'")
        problem = alias_name_error(name)
        if problem:
            raise _err(host, f"passthrough_policy.alias_names[{model_id!r}] = {name!r} is not a valid alias name: "
                             f"{problem}")
        alias_names[key] = name

    def addresses(key):
        values = policy.get(key) or []
        if not isinstance(values, list):
            raise _err(host, f"passthrough_policy.{key} must be a list of PCI addresses")
        out = []
        for value in values:
            _policy_text(value, host, f"passthrough_policy.{key} entry", "0000:27:00.0")
            address = normalise_address(value, host, f"passthrough_policy.{key} entry")
            if by_addr is not None and address not in by_addr:
                raise _err(host, f"passthrough_policy.{key} names {address}, which does not exist on this host; "
                                 "check the address with lspci -D or remove it from the policy")
            out.append(address)
        return set(out)

    return {
        "vendors": vendors_out,
        "alias_names": alias_names,
        "exclude": addresses("exclude"),
        "keep_on_host": addresses("keep_on_host"),
        "allow_unsafe_interrupts": flags["allow_unsafe_interrupts"],
        "amd_iommu_on": flags["amd_iommu_on"],
    }


def policy_fingerprint(policy):
    """A short, stable digest of an operator policy (``passthrough_policy``): the plan file records the
    fingerprint of the policy it was made with, and a plan made with another policy is stale.

    :raises PlanError: the policy is not a mapping.
    """
    if policy is None:
        policy = {}
    if not isinstance(policy, Mapping):
        raise PlanError(f"passthrough_policy_fingerprint: passthrough_policy must be a mapping, got "
                        f"{type(policy).__name__} {policy!r}")
    text = json.dumps(policy, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
