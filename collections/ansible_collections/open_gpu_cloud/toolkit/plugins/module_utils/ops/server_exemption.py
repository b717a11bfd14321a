# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""When server metadata keeps a server from being shelved: the one rule os_server_lifetimes (instance
lifetimes) and os_compute_drain (draining a GPU host before a reboot) both apply.

* ``exemption(metadata, now, exempt_key, expires_key)``: ('exempt', why), ('expires', datetime),
  ('invalid', why) or (None, None).
* ``parse_time(text)``: ISO 8601 date or date-time -> aware UTC datetime.

Modules import it as ``from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops.server_exemption import ...``.
"""

from __future__ import annotations

import datetime

TRUE_WORDS = ("true", "yes", "1", "on")


def parse_time(text):
    """ISO 8601 date or date-time -> aware UTC datetime (naive means UTC). ValueError when unparsable."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty")
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    if len(value) == 10:  # a date alone: the start of that day, UTC
        parsed = datetime.datetime.strptime(value, "%Y-%m-%d")
    else:
        parsed = datetime.datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.astimezone(datetime.timezone.utc)


def iso(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exemption(metadata, now, exempt_key, expires_key):
    """(kind, detail) for a server's metadata: ('exempt', why), ('expires', datetime), ('invalid', why) or
    (None, None) when the metadata says nothing."""
    metadata = metadata or {}
    flag = metadata.get(exempt_key)
    if flag is not None and str(flag).strip().lower() in TRUE_WORDS:
        return "exempt", f"metadata {exempt_key}={flag}"
    expires = metadata.get(expires_key)
    if expires is not None:
        try:
            return "expires", parse_time(str(expires))
        except ValueError:
            return "invalid", f"metadata {expires_key}={expires!r} is not an ISO 8601 date or date-time (e.g. " \
                              "2026-12-24 or 2026-12-24T18:00:00Z)"
    return None, None
