# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""File-mode rules shared by the roles: a mode never loosened past what the operator set."""

from __future__ import annotations

import re

try:  # Ansible is present when this runs as a filter; tests may import the logic without it.
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - exercised only outside Ansible
    class AnsibleFilterError(Exception):
        """Stand-in used when Ansible is not importable."""

_OCTAL = re.compile(r"^0?[0-7]{3,4}$")


def _mode(value, what):
    if isinstance(value, bool) or not isinstance(value, str) or not _OCTAL.match(value):
        raise AnsibleFilterError(f"mode_within: {what} {value!r} is not a file mode written as an octal string "
                                 "such as '0640' (quote it: YAML reads an unquoted 0640 as the number 416)")
    return int(value, 8)


def mode_within(current, ceiling):
    """The mode a file should get: ``current`` with every permission outside ``ceiling`` removed.

    An operator's tighter mode stays (``'0600'`` within ``'0640'`` is ``'0600'``); a looser one is
    brought down to the ceiling (``'0644'`` -> ``'0640'``). Both are octal strings as
    ``ansible.builtin.stat`` returns them (``stat.mode``); the result is a 4-digit octal string.
    """
    return f"{_mode(current, 'current mode') & _mode(ceiling, 'ceiling'):04o}"


class FilterModule:
    """File-mode filters."""

    def filters(self):
        return {"mode_within": mode_within}
