#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Manage kernel arguments where GRUB takes them from: /etc/default/grub and its drop-ins."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: grub_cmdline
short_description: Put kernel arguments where grub-mkconfig takes them from, drop-ins included
description:
  - Reads the files C(grub-mkconfig) sources, in its order (Debian family - the GRUB file, then every
    C(*.cfg) of O(dropin_dir); RHEL family - the GRUB file only), and computes the arguments the
    default boot entry gets (C(GRUB_CMDLINE_LINUX) then C(GRUB_CMDLINE_LINUX_DEFAULT)).
  - Puts the arguments of O(present) into the last assignment of O(variable), the one that takes
    effect (on an Ubuntu cloud image, C(/etc/default/grub.d/50-cloudimg-settings.cfg)), removes the
    arguments of O(absent) from every command-line variable in every file, and removes a planned key
    that another part of the line would override. Every token-level decision (quoting, C(-)/C(_) in
    names, list and option keys, last one wins) is the kernel_cmdline model's.
  - Every other argument, the quoting style, comments and every other line are kept. A symlinked file
    is edited at its target (the link stays a link).
  - A line the editor cannot model (C($(...)), backquotes, adjacent quoting such as C("quiet "'splash'),
    a line continuation, a conditional use of the variable) is refused with the file and line number,
    and nothing is written.
  - Files are written through a temporary file and an atomic rename, after an optional backup. It does
    not regenerate the boot configuration; run C(update-grub) or C(grub2-mkconfig) when it says
    C(changed), then check the result with the boot_entries module.
options:
  absent:
    description:
      - Arguments to remove wherever they are. C(key) removes the key with any value, C(key=value) that
        value (for a list or option key, those items).
    type: list
    elements: str
    default: []
  backup:
    description: Keep a timestamped copy of each file before changing it (returned in RV(backups)).
    type: bool
    default: true
  dropin_dir:
    description: The drop-in directory grub-mkconfig sources after O(path) (Debian family only). Absolute.
    type: str
    default: /etc/default/grub.d
  family:
    description: The OS family, deciding which files are sourced and the default O(variable).
    type: str
    choices: [Debian, RedHat]
    default: Debian
  path:
    description: The GRUB defaults file as on the host (absolute), below O(root).
    type: str
    default: /etc/default/grub
  present:
    description:
      - Arguments the default boot entry must get. C(key=value) sets the key (or adds items to a list or
        option key); a bare C(flag) is added when missing.
    type: list
    elements: str
    default: []
  root:
    description: Directory the host's files are under (a sandbox copy of a host); C(/) on a real host.
    type: str
    default: /
  variable:
    description:
      - The variable the planned arguments go to. Empty - the family's own (C(GRUB_CMDLINE_LINUX_DEFAULT)
        on Debian/Ubuntu, C(GRUB_CMDLINE_LINUX) on RHEL 9, which has no C(GRUB_CMDLINE_LINUX_DEFAULT)).
    type: str
    choices: ['', GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT]
    default: ''
notes:
  - Check mode computes the edit with the same function as a real run and writes nothing.
  - With C(--diff) every file that changes is shown whole, before and after.
extends_documentation_fragment: [ogc_host_state]
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
    family: Debian
    present:
      - amd_iommu=on
      - iommu=pt
      - vfio-pci.ids=10de:1db4
      - modprobe.blacklist=nouveau,nvidiafb
    absent:
      - amd_iommu=off
      - iommu=off
  register: __grub

- name: Edit a sandbox copy of a Rocky 9 host
  grub_cmdline:
    root: /srv/sandbox/host1
    family: RedHat
    present: [intel_iommu=on]
    absent: [nomodeset]
    backup: false
"""

RETURN = r"""
host_state:
  description: The state file as read before any change (module_utils/host_state.py); C(pending) empty and C(reboot)
    null when there is no file.
  returned: O(state_file) is set and the module succeeded
  type: dict
  contains:
    pending: {description: Steps an earlier run left pending (C(initramfs), C(boot_config))., type: list, elements: str}
    reboot: {description: The reboot recorded to settle the plan, or null., type: dict}
    version: {description: The state file's format., type: int}
path:
  description: The GRUB file as on the host.
  returned: always
  type: str
  sample: /etc/default/grub
variable:
  description: The variable the planned arguments went to.
  returned: always
  type: str
  sample: GRUB_CMDLINE_LINUX_DEFAULT
target:
  description: Where the planned arguments went (the last assignment of RV(variable)).
  returned: success
  type: str
  sample: /etc/default/grub.d/50-cloudimg-settings.cfg line 11
overridden:
  description: Earlier assignments of RV(variable) that the target overrides (they have no effect).
  returned: success
  type: list
  elements: str
sourced:
  description: The files grub-mkconfig sources, in order.
  returned: success
  type: list
  elements: str
before:
  description: The default boot entry's arguments from the files before (after root= and ro).
  returned: success
  type: list
  elements: str
  sample: [console=tty1, console=ttyS0]
after:
  description: The default boot entry's arguments from the files after (what a real run writes, also in check mode).
  returned: success
  type: list
  elements: str
  sample: [console=tty1, console=ttyS0, amd_iommu=on, iommu=pt]
changes:
  description: Each changed line (path, line, variable, before, after).
  returned: success
  type: list
  elements: dict
added:
  description: Arguments of the default entry that were not there before.
  returned: success
  type: list
  elements: str
removed:
  description: Arguments of the default entry that are gone.
  returned: success
  type: list
  elements: str
files:
  description: The files written (as on the host; a symlink's target, not the link).
  returned: success
  type: list
  elements: str
backups:
  description: The backup of each written file, as C({path, backup}) with real paths on the machine.
  returned: changed and O(backup) and not check mode
  type: list
  elements: dict
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.module_utils import boot_config as bc
from ansible.module_utils import boot_files as bf
from ansible.module_utils import host_state as hs


def run(params):
    """Plan the edit of the host's GRUB files. Returns (result, writes: [(real path, new text)])."""
    family = params["family"]
    variable = params["variable"] or bc.default_variable(family)
    root = params["root"]
    result = dict(path=params["path"], variable=variable)
    bf.host_path(root, params["path"], "path (passthrough_host_grub_path)")
    bf.host_path(root, params["dropin_dir"], "dropin_dir (passthrough_host_grub_dropin_dir)")
    try:
        sourced = bf.sourced_files(root, family, params["path"], params["dropin_dir"])
    except FileNotFoundError:
        raise bf.BootFilesError(
            "%s does not exist: this host has no GRUB defaults file where expected. Install GRUB (grub2-common / "
            "grub2-tools), or point the path option (role variable passthrough_host_grub_path) at the file that "
            "holds %s." % (bf.host_path(root, params["path"]), variable)) from None
    files = [(shown, text) for shown, _target, _real, text in sourced]
    try:
        plan = bc.plan_edit(files, variable, params["present"], params["absent"])
    except bc.BootConfigError as exc:
        msg = to_native(exc)
        if msg.startswith("no line assigns"):
            msg = ("%s: add a line such as %s=\"\" to %s (or set the variable option, role variable "
                   "passthrough_host_grub_variable, to the variable this host uses)" % (msg, variable, params["path"]))
        raise bf.BootFilesError(msg) from None
    real_of = {shown: (target, real) for shown, target, real, _ in sourced}
    writes = [(real_of[shown][1], shown, text) for shown, text in plan["texts"].items()]
    result.update(
        target=plan["target"], overridden=plan["overridden"], sourced=[s for s, _ in files],
        before=plan["before"], after=plan["after"], changes=plan["changes"],
        added=[a for a in plan["after"] if a not in plan["before"]],
        removed=[a for a in plan["before"] if a not in plan["after"]],
        files=[real_of[shown][0] for shown in plan["texts"]],
    )
    result["diff"] = [dict(before=dict(files)[shown], after=text, before_header=shown, after_header=shown)
                      for shown, text in plan["texts"].items()]
    return result, writes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="str", default=[]),
            backup=dict(type="bool", default=True),
            dropin_dir=dict(type="str", default="/etc/default/grub.d"),
            family=dict(type="str", choices=["Debian", "RedHat"], default="Debian"),
            path=dict(type="str", default="/etc/default/grub"),
            present=dict(type="list", elements="str", default=[]),
            root=dict(type="str", default="/"),
            state_file=dict(type="str", default=""),
            variable=dict(type="str", choices=["", "GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT"], default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        state = hs.read(params["root"], params["state_file"])[0] if params["state_file"] else None
        result, writes = run(params)
    except (bf.BootFilesError, bc.BootConfigError, hs.StateError) as exc:
        module.fail_json(msg=to_native(exc), path=params["path"], changed=False)
    if state is not None:
        result["host_state"] = state
    diff = result.pop("diff")
    result["changed"] = bool(writes)
    if module._diff:
        result["diff"] = diff
    for where in result["overridden"]:
        module.warn("%s assigns %s but %s overrides it; the arguments went to the latter"
                    % (where, result["variable"], result["target"]))
    if writes and not module.check_mode:
        backups = []
        for real, shown, text in writes:
            if params["backup"]:
                backups.append(dict(path=real, backup=module.backup_local(real)))
            fd, tmp = tempfile.mkstemp(prefix=".grub_cmdline.", dir=os.path.dirname(real))
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(to_bytes(text))
                    handle.flush()
                    os.fsync(handle.fileno())
                module.atomic_move(tmp, real, unsafe_writes=False)
            except Exception as exc:  # pylint: disable=broad-except
                if os.path.exists(tmp):
                    os.unlink(tmp)
                module.fail_json(msg="cannot write %s: %s (this file was not changed; files written before it: %s)"
                                 % (shown, to_native(exc), ", ".join(b["path"] for b in backups[:-1]) or "none"),
                                 backups=backups, **result)
        if params["backup"]:
            result["backups"] = backups
    module.exit_json(**result)


if __name__ == "__main__":
    main()
