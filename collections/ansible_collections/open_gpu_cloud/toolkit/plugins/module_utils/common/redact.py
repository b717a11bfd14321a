# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Keeping secrets out of what the project stores and prints: the one place that says what a credential
looks like on a kernel command line (and in the files that give it one), and how a known secret is masked
in a message.

Credentials on a kernel command line (``redact``), each replaced by ``********`` (``MASK``), the rest of the
argument kept so the line still reads:

* a key whose name holds ``password``, ``passwd``, ``passphrase``, ``secret`` or ``token`` (dracut's
  ``rd.iscsi.password=``/``rd.iscsi.in.password=``, anaconda's ``inst.vncpassword=``): the whole value;
* the password of a URL's user information, ``scheme://user:password@host`` (dracut's
  ``netroot=cifs://user:password@server/share``, ``inst.ks=https://user:password@host/ks.cfg``);
* the passwords of an iSCSI root, ``iscsi:user:password[:reverse-user:reverse-password]@...`` (dracut's
  ``netroot=`` / ``root=iscsi:``; dracut.cmdline(7)).

User names, hosts and every other argument stay. The rules apply to a whole command line, one argument or
any text that quotes them (a GRUB file, a generated grub.cfg, a diff): the plan file, the facts, module
results and messages all go through ``redact``.

A known secret in a message (``mask_secret``) is masked where it stands as a token of its own - not where its
characters happen to appear inside another word, so a short password does not corrupt the message.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "SECRET_KEY_WORDS", "redact", "redact_all", "mask_secret"]

MASK = "********"
# Parts of a parameter name that mark its value as a credential.
SECRET_KEY_WORDS = ("password", "passwd", "passphrase", "secret", "token")

# key=value where the key names a credential: a whole argument in double quotes ("key=value with spaces", after a
# space or at the start), or a key starting a token (after a space, a quote or the start) whose value runs to the
# next space or quote (a quoted value, key="...", to its closing quote).
_WORDS = "|".join(SECRET_KEY_WORDS)
_SECRET_KEY_RE = re.compile(
    rf'(?P<qkey>(?<!\S)"[A-Za-z0-9_.\-]*(?:{_WORDS})[A-Za-z0-9_.\-]*=)(?P<qvalue>[^"]*)'
    rf'|(?P<key>(?<![^\s"\'])[A-Za-z0-9_.\-]*(?:{_WORDS})[A-Za-z0-9_.\-]*=)(?P<value>"[^"]*"|[^\s"\']*)', re.IGNORECASE)
# scheme://user:password@  (the password has no /, @ or space)
_URL_RE = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/@:\s\"']*:)(?P<password>[^/@\s\"']+)(?=@)")
# iscsi:<credentials>@ - user:password[:reverse-user:reverse-password] (every component but the user names masked)
_ISCSI_RE = re.compile(r"(?P<head>(?<![A-Za-z0-9_])iscsi:)(?P<creds>[^@\s\"'/]*:[^@\s\"'/]*)(?=@)")


def _mask_value(match):
    if match.group("qkey") is not None:
        return match.group("qkey") + (MASK if match.group("qvalue") else "")
    value = match.group("value")
    if not value or value == '""':
        return match.group(0)
    if value.startswith('"'):
        return match.group("key") + '"' + MASK + '"'
    return match.group("key") + MASK


def _mask_iscsi(match):
    parts = match.group("creds").split(":")
    users = (0, 2) if len(parts) == 4 else (0,)
    return match.group("head") + ":".join(p if i in users or not p else MASK for i, p in enumerate(parts))


def redact(text):
    """``text`` (a command line, an argument, or any text quoting them) with every credential masked.
    Anything that is not a string is returned as it is."""
    if not isinstance(text, str) or not text:
        return text
    text = _SECRET_KEY_RE.sub(_mask_value, text)
    text = _URL_RE.sub(lambda m: m.group("head") + MASK, text)
    return _ISCSI_RE.sub(_mask_iscsi, text)


def redact_all(value):
    """``redact`` applied to every string inside lists, tuples and dicts (keys stay)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return type(value)(redact_all(v) for v in value)
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}
    return value


def mask_secret(text, secret, mask=MASK):
    """``text`` with each occurrence of ``secret`` that stands as a token of its own (no letter, digit or
    ``_`` right before or after it) replaced by ``mask``. An empty secret masks nothing."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if not isinstance(secret, str) or not secret:
        return text
    return re.sub(rf"(?<![A-Za-z0-9_]){re.escape(secret)}(?![A-Za-z0-9_])", lambda _m: mask, text)
