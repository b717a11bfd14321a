#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Manage kernel arguments in one variable of /etc/default/grub."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: grub_cmdline
short_description: Add, replace and remove kernel arguments in /etc/default/grub
description:
  - Edits one shell variable (by default C(GRUB_CMDLINE_LINUX_DEFAULT)) of the GRUB defaults file.
  - Adds every argument of O(present) that is missing, replaces a stale value of the same key
    (an old C(vfio-pci.ids=...), C(intel_iommu=off) when C(intel_iommu=on) is wanted), merges
    comma-separated list values for the keys in O(merge_keys) (C(modprobe.blacklist=a,b)), removes
    the arguments or keys of O(absent), and never writes an argument twice (a key O(present) sets ends
    up once, where the line first had it).
  - What a line means (quoting, C(-)/C(_) in names, last one wins, list keys, comma options such as
    C(intel_iommu=on,sm_on)) comes from C(module_utils/kernel_cmdline.py), the same model the facts
    module and the planner use, so what this module writes is what the planner calls done.
  - Every other argument, the quoting style of the value (double, single or none), trailing comments
    and every other line of the file are kept as they are. Kernel parameter names compare the way the
    kernel compares them, C(-) and C(_) being the same (C(vfio-pci.ids) is C(vfio_pci.ids)).
  - When the variable is assigned more than once, the last assignment (the one the shell keeps) is
    edited and a warning says so.
  - The file is written through a temporary file and an atomic rename, after an optional backup.
    It does not regenerate the boot configuration; run C(update-grub) or C(grub2-mkconfig) when the
    result says C(changed).
options:
  absent:
    description:
      - Arguments to remove. An entry C(key=value) removes exactly that value (for a key of
        O(merge_keys), that item of the list); an entry without C(=) removes the key with any value.
    type: list
    elements: str
    default: []
  backup:
    description: Keep a timestamped copy of the file before changing it (returned as RV(backup_file)).
    type: bool
    default: true
  merge_keys:
    description:
      - Keys whose value is a comma-separated list. For these, O(present) adds its items to the items
        already there instead of replacing them, and repeated occurrences are merged into the first.
    type: list
    elements: str
    default: [modprobe.blacklist, module_blacklist, modules-load, rd.driver.blacklist, rd.driver.post, rd.driver.pre,
              rd.modules-load]
  path:
    description: The GRUB defaults file, relative to O(root) when it is absolute.
    type: path
    default: /etc/default/grub
  present:
    description:
      - Arguments that must be on the line. C(key=value) sets the key to that value, replacing any
        other value; a bare C(flag) is added when missing.
    type: list
    elements: str
    default: []
  root:
    description: Directory prefixed to O(path) (a sandbox copy of a host); C(/) on a real host.
    type: path
    default: /
  variable:
    description: The shell variable holding the kernel arguments.
    type: str
    default: GRUB_CMDLINE_LINUX_DEFAULT
notes:
  - Check mode computes the new line with the same function as a real run and writes nothing.
  - With C(--diff) the whole file is compared, so the output shows the exact before and after line.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - open-gpu-cloud contributors
"""

EXAMPLES = r"""
- name: Put the passthrough arguments on the kernel command line
  grub_cmdline:
    present:
      - amd_iommu=on
      - iommu=pt
      - vfio-pci.ids=10de:1db4
      - modprobe.blacklist=nouveau,nvidiafb
    absent:
      - amd_iommu=off
      - iommu=off
  register: __grub

- name: Edit a sandbox copy of a host, in GRUB_CMDLINE_LINUX
  grub_cmdline:
    root: /srv/sandbox/host1
    variable: GRUB_CMDLINE_LINUX
    present: [intel_iommu=on]
    absent: [nomodeset]
    backup: false
"""

RETURN = r"""
path:
  description: The file that was read (and written when changed), O(root) included.
  returned: always
  type: str
  sample: /etc/default/grub
variable:
  description: The variable that was edited.
  returned: always
  type: str
  sample: GRUB_CMDLINE_LINUX_DEFAULT
before:
  description: The arguments before, as a list.
  returned: always
  type: list
  elements: str
  sample: [quiet, vfio-pci.ids=10de:1b80]
after:
  description: The arguments after, as a list (what a real run writes, also in check mode).
  returned: always
  type: list
  elements: str
  sample: [quiet, vfio-pci.ids=10de:1db4, iommu=pt]
line_before:
  description: The assignment line before.
  returned: always
  type: str
  sample: GRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:1b80"
line_after:
  description: The assignment line after.
  returned: always
  type: str
  sample: GRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:1db4 iommu=pt"
added:
  description: Arguments that were not on the line before.
  returned: always
  type: list
  elements: str
removed:
  description: Arguments that were on the line before and are not after.
  returned: always
  type: list
  elements: str
backup_file:
  description: The backup copy, when one was made.
  returned: changed and O(backup) and not check mode
  type: str
  sample: /etc/default/grub.12345.2026-01-01@10:00:00~
"""

import os
import re
import tempfile

from ansible.module_utils import kernel_cmdline
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

_ASSIGN_RE = re.compile(r"^(?P<lead>\s*(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<rest>.*)$")


class GrubCmdlineError(Exception):
    """A problem with the file or the arguments, worded for the operator."""


def parse_assignment(rest):
    """Split the text after VAR= into (quote, value, suffix).

    quote is '"', "'" or '' (unquoted). The value is returned as written (shell escapes such as
    \\" kept), so writing it back changes nothing the operator typed. suffix is what follows the
    closing quote (spaces, a comment).
    """
    if rest.startswith('"'):
        i = 1
        while i < len(rest):
            char = rest[i]
            if char == "\\":
                i += 2
                continue
            if char == '"':
                return '"', rest[1:i], rest[i + 1:]
            i += 1
        raise GrubCmdlineError("the double quote opened after the '=' is never closed")
    if rest.startswith("'"):
        end = rest.find("'", 1)
        if end < 0:
            raise GrubCmdlineError("the single quote opened after the '=' is never closed")
        return "'", rest[1:end], rest[end + 1:]
    match = re.match(r"^(\S*)(.*)$", rest)
    return "", match.group(1), match.group(2)


def render_value(quote, tokens):
    """Write the arguments back with the original quoting. An unquoted value that no longer is a
    single word gets double quotes (the shell would split it otherwise)."""
    text = " ".join(tokens)
    if quote == "'":
        return "'" + text + "'"
    if quote == "" and len(tokens) <= 1:
        return text
    return '"' + text.replace('"', '\\"') + '"'


def edit_text(text, variable, present, absent, merge_keys):
    """Edit the file's text. Returns dict(text, before, after, line_before, line_after, warnings)."""
    lines = text.splitlines(True)
    matches = []
    for index, line in enumerate(lines):
        stripped = line.rstrip("\r\n")
        match = _ASSIGN_RE.match(stripped)
        if match and match.group("name") == variable:
            matches.append((index, match))
    if not matches:
        raise GrubCmdlineError("no line assigns %s" % variable)
    warnings = []
    if len(matches) > 1:
        warnings.append(
            "%s is assigned on %d lines (%s); only the last one counts for the shell and only it is edited"
            % (variable, len(matches), ", ".join(str(i + 1) for i, _ in matches)))
    index, match = matches[-1]
    line = lines[index]
    eol = line[len(line.rstrip("\r\n")):]
    try:
        quote, value, suffix = parse_assignment(match.group("rest"))
    except GrubCmdlineError as exc:
        raise GrubCmdlineError("line %d (%s): %s" % (index + 1, line.rstrip("\r\n"), exc))
    try:
        # Inside shell double quotes the kernel's own quotes are written \" (acpi_osi=\"!Windows 2012\").
        before = kernel_cmdline.split(value.replace('\\"', '"') if quote == '"' else value)
        after = kernel_cmdline.edit(before, present, absent, merge_keys)
    except kernel_cmdline.CmdlineError as exc:
        raise GrubCmdlineError("line %d (%s): %s" % (index + 1, line.rstrip("\r\n"), exc))
    line_before = line.rstrip("\r\n")
    if after == before:
        line_after = line_before
    else:
        line_after = match.group("lead") + variable + "=" + render_value(quote, after) + suffix
        lines[index] = line_after + eol
    return {
        "text": "".join(lines),
        "before": before,
        "after": after,
        "line_before": line_before,
        "line_after": line_after,
        "warnings": warnings,
    }


def full_path(root, path):
    if root and root != "/":
        return os.path.join(root, path.lstrip("/"))
    return path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="str", default=[]),
            backup=dict(type="bool", default=True),
            merge_keys=dict(type="list", elements="str",
                            default=["modprobe.blacklist", "module_blacklist", "modules-load", "rd.driver.blacklist",
                                     "rd.driver.post", "rd.driver.pre", "rd.modules-load"]),
            path=dict(type="path", default="/etc/default/grub"),
            present=dict(type="list", elements="str", default=[]),
            root=dict(type="path", default="/"),
            variable=dict(type="str", default="GRUB_CMDLINE_LINUX_DEFAULT"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = full_path(params["root"], params["path"])
    variable = params["variable"]
    result = dict(changed=False, path=path, variable=variable)

    try:
        kernel_cmdline.check([], params["present"], params["absent"], params["merge_keys"])
    except kernel_cmdline.CmdlineError as exc:
        module.fail_json(msg="%s, variable %s: %s" % (path, variable, to_native(exc)), **result)

    if not os.path.exists(path):
        module.fail_json(msg="%s does not exist: this host has no GRUB defaults file where expected. Install GRUB "
                             "(grub2-common / grub2-tools), or point the path option (role variable "
                             "passthrough_host_grub_path) at the file that holds %s." % (path, variable), **result)
    if not os.path.isfile(path):
        module.fail_json(msg="%s is not a regular file" % path, **result)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)), **result)

    try:
        edited = edit_text(text, variable, params["present"], params["absent"], params["merge_keys"])
    except GrubCmdlineError as exc:
        msg = to_native(exc)
        if msg.startswith("no line assigns"):
            msg = ("%s has no line assigning %s: add a line such as %s=\"\" to it (or set the variable option, "
                   "role variable passthrough_host_grub_variable, to the variable this host uses)"
                   % (path, variable, variable))
        else:
            msg = "%s, variable %s: %s" % (path, variable, msg)
        module.fail_json(msg=msg, **result)

    for warning in edited["warnings"]:
        module.warn("%s: %s" % (path, warning))
    changed = edited["text"] != text
    after_set = list(edited["after"])
    result.update(
        changed=changed,
        before=edited["before"],
        after=edited["after"],
        line_before=edited["line_before"],
        line_after=edited["line_after"],
        added=[a for a in after_set if a not in edited["before"]],
        removed=[a for a in edited["before"] if a not in after_set],
    )
    if module._diff:
        result["diff"] = dict(before=text, after=edited["text"],
                              before_header="%s (%s)" % (path, variable), after_header="%s (%s)" % (path, variable))

    if changed and not module.check_mode:
        if params["backup"]:
            result["backup_file"] = module.backup_local(path)
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".grub_cmdline.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(to_bytes(edited["text"]))
                handle.flush()
                os.fsync(handle.fileno())
            module.atomic_move(tmp, path, unsafe_writes=False)
        except Exception as exc:  # pylint: disable=broad-except
            if os.path.exists(tmp):
                os.unlink(tmp)
            module.fail_json(msg="cannot write %s: %s (the file was not changed)" % (path, to_native(exc)), **result)

    module.exit_json(**result)


if __name__ == "__main__":
    main()
