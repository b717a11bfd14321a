# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Readable reports of the day-2 operations (pure functions).

* ``result | lifetime_report(check_mode=False)``: one line per server from an os_server_lifetimes result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

LIFETIME_KEYS = ("would_act", "exempt", "skipped", "invalid_metadata")


def _server(entry):
    age = entry.get("age_hours")
    return "%s (%s, project %s, %s, age %s h)" % (
        entry.get("name"), entry.get("id"), entry.get("project"), entry.get("status"),
        "?" if age is None else "%g" % age)


def lifetime_report(result, check_mode=False):
    """Lines describing an os_server_lifetimes result: what was (or would be) done, exempt, skipped."""
    if not isinstance(result, dict) or any(k not in result for k in LIFETIME_KEYS):
        raise AnsibleFilterError("lifetime_report expects the result of os_server_lifetimes (keys %s), got %r"
                                 % (", ".join(LIFETIME_KEYS), result if not isinstance(result, dict)
                                    else sorted(result)))
    lines = ["checked %s server(s) at %s" % (result.get("checked", 0), result.get("now", "?"))]
    verb = {"shelve": ("would shelve" if check_mode else "shelved"),
            "delete": ("would delete" if check_mode else "deleted")}
    for entry in result["would_act"]:
        lines.append("%s %s: %s" % (verb.get(entry.get("action"), entry.get("action")), _server(entry),
                                    entry.get("reason")))
    for key, word in (("exempt", "exempt"), ("skipped", "skipped"), ("invalid_metadata", "bad metadata")):
        for entry in result[key]:
            lines.append("%s %s: %s" % (word, _server(entry), entry.get("reason")))
    if len(lines) == 1:
        lines.append("nothing past its maximum age")
    return lines


class FilterModule:
    """Reports of the day-2 operations."""

    def filters(self):
        return {"lifetime_report": lifetime_report}
