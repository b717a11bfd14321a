# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""PCI identifiers, one rule each: a function's address, a vendor or product id, a vendor:product model id.

Discovery (plugins/modules/pci_passthrough_facts.py), the planner (plugins/filter/passthrough_plan.py), the Nova
filter (plugins/filter/nova_pci.py) and the fixture builder (scripts/mock_sysfs.py) all use these, so an
address means the same thing everywhere. Pure, no Ansible imports (the fixture builder imports it as a
plain module). Alias names have their own rule, Nova's: plugins/module_utils/pci/alias.py.

The canonical form is the kernel's: lowercase hex, ``dddd:bb:dd.f`` (``0000:27:00.0``), as sysfs names
``/sys/bus/pci/devices/*`` and Nova's ``device_spec`` addresses are compared.
"""

from __future__ import annotations

import re

ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
SHORT_ADDRESS = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
MODEL_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
ID = re.compile(r"^[0-9a-f]{4}$")


def is_address(value) -> bool:
    """True for a full address in canonical form (``0000:27:00.0``); anything else, other types included, is not."""
    return isinstance(value, str) and ADDRESS.match(value) is not None


def normalise_address(value) -> str | None:
    """The canonical form of an address an operator wrote (``27:00.0``, ``0000:27:00.0``, upper case,
    spaces around), or None when it is not one. Only strings are addresses: YAML's numbers are not."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if SHORT_ADDRESS.match(text):
        text = "0000:" + text
    return text if ADDRESS.match(text) else None


def is_model_id(value) -> bool:
    """True for ``vendor:product`` in lowercase hex (``10de:1db4``)."""
    return isinstance(value, str) and MODEL_ID.match(value) is not None


def is_id(value) -> bool:
    """True for a vendor or product id: 4 lowercase hex digits (``10de``, ``1db4``)."""
    return isinstance(value, str) and ID.match(value) is not None
