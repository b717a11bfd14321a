# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Reading a kolla-ansible override file (an INI file oslo.config reads) as oslo.config would, with this project's
marked block told apart from the operator's lines. Used by the Nova override check (``filter/nova_pci.py``) and by
Placement's candidate bounds (``nova/placement_limits.py``): one reader for every override file the project edits.
"""

from __future__ import annotations


def oslo_group_name(section):
    """The option group a section header names, as oslo.config decides it
    (``oslo_config.cfg._normalize_group_name``): ``DEFAULT`` as written, any other name lowercased,
    so ``[PCI]`` is the ``pci`` group Nova reads. The header's text is taken between the brackets
    without stripping, as ``oslo_config.iniparser`` does."""
    return section if section == "DEFAULT" else section.lower()


def split_key_value(line):
    """Key and value of an assignment the way ``oslo_config.iniparser`` splits it: at the first
    ``=`` or ``:``, whichever comes first; None when the line has neither."""
    colon, equal = line.find(":"), line.find("=")
    if colon < 0 and equal < 0:
        return None
    at = equal if colon < 0 or (0 <= equal < colon) else colon
    return line[:at], line[at + 1:]


def parse_override(text, begin, end):
    """Split an override file into (operator settings, our block's settings).

    Each is a list of ``(section, key, value, line_number)``, the section being the oslo.config
    group (see ``oslo_group_name``). Comment lines, Jinja statement lines and continuation lines
    are skipped. The lines between ``begin`` and ``end`` markers (ours) go to the second list.
    """
    operator, ours = [], []
    section = "DEFAULT"
    inside = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line == begin:
            inside = True
            continue
        if line == end:
            inside = False
            continue
        if not line or line[0] in "#;" or line.startswith("{%") or line.startswith("{#"):
            continue
        if raw[:1] in (" ", "\t"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = oslo_group_name(raw.rstrip()[1:-1])
            continue
        pair = split_key_value(line)
        if pair is None:
            continue
        key, value = pair
        item = (section, key.strip().lower(), value.strip(), number)
        (ours if inside else operator).append(item)
    return operator, ours
