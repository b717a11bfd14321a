# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Nova PCI alias names: the one rule that says which names Nova accepts, and the names we derive.

Nova's rule, from its own code (2026.1):

* ``[pci] alias`` is validated against ``nova.pci.request._ALIAS_SCHEMA``: ``name`` is a string of
  1 to 256 characters; ``_get_alias_from_config`` then strips it.
* A flavor asks for devices with ``pci_passthrough:alias = <name>:<count>[,<name>:<count>...]``
  (``nova.api.validation.extra_specs.pci_passthrough``: ``[^:]+:\\d+(?:\\s*,\\s*[^:]+:\\d+)*``), and
  ``_translate_alias_to_requests`` splits the value on ``,`` and then on ``:`` and strips the name.

So a usable name has 1 to 256 characters, no ``:`` and no ``,``, and no leading or trailing space
(Nova would strip it, and the name in a flavor would no longer be the one written). Every caller
(the planner, the inventory-wide alias list, the policy check) uses :func:`alias_name_error`; a flavor's request
is read by :func:`parse_request`.

Derived names: a model the project's table does not name gets a stable alias from its PCI ID
database name (:func:`alias_from_model_name`): the marketing name (the bracketed part), lowercased,
every run of other characters than ``a-z`` and ``0-9`` turned into one ``-``, at most 64 characters
(``GA104GL [RTX A4000]`` -> ``rtx-a4000``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LENGTH = 256
DERIVED_MAX_LENGTH = 64
_NON_SLUG = re.compile(r"[^a-z0-9]+")
# The flavor extra spec that asks for PCI devices by alias.
FLAVOR_SPEC = "pci_passthrough:alias"
REQUEST_ITEM = re.compile(r"^([^:,\s]+):(\d+)$")  # one "<name>:<count>" of a flavor's pci_passthrough:alias


def alias_name_error(name) -> str | None:
    """Why Nova cannot use ``name`` as a PCI alias, or None when it can."""
    if not isinstance(name, str):
        return f"an alias name must be a string, got {type(name).__name__}"
    if not name.strip():
        return "an alias name must not be empty"
    if len(name) > MAX_LENGTH:
        return f"an alias name has at most {MAX_LENGTH} characters (Nova's [pci] alias schema), this has {len(name)}"
    for char, why in ((":", "separates the name from the count"), (",", "separates two aliases")):
        if char in name:
            return f"an alias name cannot contain '{char}': in a flavor's pci_passthrough:alias it {why}"
    if name != name.strip():
        return "an alias name cannot start or end with a space: Nova strips it, so a flavor would not match"
    return None


def alias_from_model_name(model_name) -> str | None:
    """A stable alias from a model name (see the module docstring); None when nothing usable is left."""
    if not isinstance(model_name, str):
        return None
    slug = _NON_SLUG.sub("-", model_name.lower()).strip("-")
    if len(slug) > DERIVED_MAX_LENGTH:
        slug = slug[:DERIVED_MAX_LENGTH].rstrip("-")
    return slug or None


def parse_request(value):
    """A flavor's ``pci_passthrough:alias`` value, ``'a:1, b:2'`` -> ``[('a', 1), ('b', 2)]``; ValueError with the
    reason in words (the flavors' validation in the cloud phase and Placement's candidate bounds both read it so)."""
    items = []
    for raw in str(value).split(","):
        item = raw.strip()
        match = REQUEST_ITEM.match(item)
        if not match:
            raise ValueError(f"'{item}' is not ALIAS:COUNT")
        count = int(match.group(2))
        if count < 1:
            raise ValueError(f"'{item}' asks for {count} devices; COUNT must be a positive integer")
        items.append((match.group(1), count))
    return items


def flavor_request(flavor):
    """``[(alias, count), ...]`` a declared flavor (an item of ``cloud_flavors``) asks for with ``FLAVOR_SPEC``;
    ``[]`` for a flavor without one, and for one the cloud phase refuses (not a mapping, extra specs not a mapping,
    a malformed value): that phase names it, the rules that read requests count it for nothing."""
    if not isinstance(flavor, Mapping) or not isinstance(flavor.get("extra_specs"), Mapping):
        return []
    value = flavor["extra_specs"].get(FLAVOR_SPEC)
    if value is None:
        return []
    try:
        return parse_request(value)
    except ValueError:
        return []
