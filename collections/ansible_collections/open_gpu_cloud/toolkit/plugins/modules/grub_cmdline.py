#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
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
  - A construct whose effect on the command-line variables the editor cannot prove is refused with the file,
    the line and its text, and nothing is written - in an assignment (C($(...)), backquotes, adjacent quoting
    such as C("quiet "'splash'), a line continuation), or around it (another file sourced with C(.) or
    C(source), an assignment inside C(if)/C(case)/a loop/a function or an C(&&) list, C(eval), a use of the
    variable by a command). Other variables' assignments and commands are left to the shell
    (plugins/module_utils/host/shell_scan.py).
  - A host that boots through something else than GRUB's defaults (systemd-boot, unified kernel images,
    kernel-install's C(/etc/kernel/cmdline) on the Debian family) is refused, naming the signs found, before
    anything is written (O(boot_loader)).
  - Says in RV(needs) whether the boot-config tool must run - the files change, an earlier run of it did not
    complete (the state file), or what it generated lacks the arguments the files give and it has not run on
    these files (a file edited by hand). On the RHEL family, arguments that boot entries have on their own and
    C(grub2-mkconfig --update-bls-cmdline) would drop are refused first.
  - With O(state_file), the tool's step is marked pending in the state file, durably, before the first file
    is written (write-ahead), so that a run killed after any write leaves it for the next run.
  - Files are written through a temporary file and an atomic rename, after an optional backup. It does
    not regenerate the boot configuration; run C(update-grub) or C(grub2-mkconfig) when RV(needs) says
    C(boot_config), then check the result with the boot_entries module.
  - Credentials on the kernel lines (plugins/module_utils/common/redact.py) are masked in every result and message.
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
  boot_loader:
    description:
      - C(auto) refuses a host with signs of another boot mechanism than GRUB's defaults; C(grub) says GRUB boots
        this host whatever is found (signs left over from an earlier installation).
    type: str
    choices: [auto, grub]
    default: auto
  dropin_dir:
    description: The drop-in directory grub-mkconfig sources after O(path) (Debian family only). Absolute.
    type: str
    default: /etc/default/grub.d
  family:
    description: The OS family, deciding which files are sourced and the default O(variable).
    type: str
    choices: [Debian, RedHat]
    default: Debian
  output:
    description:
      - What the boot-config tool generates (as the boot_entries module's O(open_gpu_cloud.toolkit.boot_entries#module:output)), read to
        tell whether it is older than the files. Empty - C(/boot/grub/grub.cfg) (Debian family) or the BLS
        directory C(/boot/loader/entries) (RHEL family).
    type: str
    default: ''
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
extends_documentation_fragment: [open_gpu_cloud.toolkit.host_state, open_gpu_cloud.toolkit.attributes.check_and_diff]
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Put the passthrough arguments on the kernel command line
  open_gpu_cloud.toolkit.grub_cmdline:
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
  open_gpu_cloud.toolkit.grub_cmdline:
    root: /srv/sandbox/host1
    family: RedHat
    present: [intel_iommu=on]
    absent: [nomodeset]
    backup: false
"""

RETURN = r"""
host_state:
  description: The state file as read before any change (plugins/module_utils/host/state.py); C(pending) empty and C(reboot)
    null when there is no file.
  returned: O(state_file) is set and the module succeeded
  type: dict
  contains:
    pending: {description: "Steps an earlier run left pending (C(initramfs), C(boot_config)).", type: list, elements: str}
    reboot: {description: "The reboot recorded to settle the plan, or null.", type: dict}
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
needs:
  description: C([boot_config]) when the boot-config tool must run (RV(why)), else empty.
  returned: success
  type: list
  elements: str
why:
  description: Why the boot-config tool must run, in words (empty when it need not).
  returned: success
  type: str
  sample: the GRUB files change
files_fingerprint:
  description: The fingerprint of the arguments the files give after the edit (RV(after)); the state file records it
    when the tool succeeded (host_state O(open_gpu_cloud.toolkit.host_state#module:generated_from)).
  returned: success
  type: str
overridden:
  description: Earlier assignments of RV(variable) that a later one replaces without taking their value in (an
    assignment C(NAME="$NAME ...") appends, it does not override); warned about when the arguments are placed.
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
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_config as bc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact


def _refuse_other_boot_mechanism(root, family, params):
    """Refuse, before anything is written, a host that boots through something else than GRUB's defaults."""
    found = bf.other_boot_mechanisms(root, family)
    if not found:
        return
    add = " ".join(params["present"]) or "nothing to add"
    without = "; without " + " ".join(params["absent"]) if params["absent"] else ""
    raise bf.BootFilesError(
        f"this host does not boot through GRUB's defaults: {'; '.join(found)}. The GRUB files this role edits would "
        "not reach the kernel, and a reboot would not apply the plan, so nothing was written. Give the kernel the "
        f"planned arguments through that mechanism yourself ({add}{without}; e.g. in /etc/kernel/cmdline, then "
        "kernel-install add for each kernel, or rebuild the unified kernel images), reboot, and run this play again; "
        "if GRUB does boot this host and the signs are left over, set passthrough_host_boot_loader: grub "
        "(module option boot_loader)")


def _tool_needed(root, family, params, state, writes, after):
    """Whether the boot-config tool must run, and why: the files change, an earlier run of it did not complete,
    or what it generated lacks the plan although the files give it and it has not run on these files."""
    if writes:
        return "the GRUB files change"
    if state is None:
        return None
    if "boot_config" in state["pending"]:
        return "an earlier run of it did not complete"
    if state.get("generated_from") == bc.inputs_fingerprint(after):
        return None  # it ran on these very files: its output is what it is (the reboot guard says why)
    output = params["output"] or bc.FAMILIES[family][2]
    try:
        lacks = bc.readback_problems(bf.read_entries(root, family, output), params["present"], params["absent"])
    except (bf.BootFilesError, bc.BootConfigError):
        lacks = [f"{output} cannot be read"]
    if lacks:
        return "what it generated lacks the arguments the GRUB files give (it has not run since they changed)"
    return None


def run(params, state=None):
    """Plan the edit of the host's GRUB files. Returns (result, writes: [(real path, new text)]). ``state`` is the
    host state (plugins/module_utils/host/state.py) or None when no state file is kept."""
    family = params["family"]
    variable = params["variable"] or bc.default_variable(family)
    root = params["root"]
    result = dict(path=params["path"], variable=variable)
    bf.host_path(root, params["path"], "path (passthrough_host_grub_path)")
    bf.host_path(root, params["dropin_dir"], "dropin_dir (passthrough_host_grub_dropin_dir)")
    if params["output"]:
        bf.host_path(root, params["output"], "output (passthrough_host_boot_config_output)")
    if params["boot_loader"] == "auto":
        _refuse_other_boot_mechanism(root, family, params)
    try:
        sourced = bf.sourced_files(root, family, params["path"], params["dropin_dir"])
    except FileNotFoundError:
        raise bf.BootFilesError(
            f"{bf.host_path(root, params['path'])} does not exist: this host has no GRUB defaults file where expected. "
            "Install GRUB (grub2-common / grub2-tools), or point the path option (role variable "
            f"passthrough_host_grub_path) at the file that holds {variable}.") from None
    files = [(shown, text) for shown, _target, _real, text in sourced]
    try:
        plan = bc.plan_edit(files, variable, params["present"], params["absent"])
    except bc.VariableNotAssigned as exc:
        raise bf.BootFilesError(
            f"{to_native(exc)}: add a line such as {variable}=\"\" to {params['path']} (or set the variable option, "
            "role variable passthrough_host_grub_variable, to the variable this host uses)"
        ) from None
    except bc.BootConfigError as exc:
        raise bf.BootFilesError(to_native(exc)) from None
    real_of = {shown: (target, real) for shown, target, real, _text in sourced}
    writes = [(real_of[shown][1], shown, text) for shown, text in plan["texts"].items()]
    why = _tool_needed(root, family, params, state, writes, plan["after"])
    if why and family == "RedHat":
        output = params["output"] or bc.FAMILIES[family][2]
        dropped = bc.bls_dropped(bf.read_bls_entries(root, output), plan["after"], params["present"],
                                 params["absent"])
        if dropped:
            entries = "; ".join(f"{where} has {' '.join(args)}" for where, args in dropped)
            raise bf.BootFilesError(
                "grub2-mkconfig --update-bls-cmdline would drop arguments that boot entries have on their own: "
                f"{entries}. The tool rewrites every entry's options from GRUB_CMDLINE_LINUX, and these are not in it "
                "(added to the entries alone, e.g. with grubby --update-kernel=<kernel> --args). Nothing was written. "
                f"Add them to GRUB_CMDLINE_LINUX in {params['path']} to keep them for every kernel, or remove them "
                "from the entries (grubby --update-kernel=ALL --remove-args=\"...\"), then run this play again")
    result.update(
        target=plan["target"], overridden=plan["overridden"], sourced=[s for s, _text in files],
        before=plan["before"], after=plan["after"], changes=plan["changes"],
        added=[a for a in plan["after"] if a not in plan["before"]],
        removed=[a for a in plan["before"] if a not in plan["after"]],
        files=[real_of[shown][0] for shown in plan["texts"]],
        needs=["boot_config"] if why else [], why=why or "",
        files_fingerprint=bc.inputs_fingerprint(plan["after"]),
    )
    result["diff"] = [dict(before=dict(files)[shown], after=text, before_header=shown, after_header=shown)
                      for shown, text in plan["texts"].items()]
    return result, writes


def _shown(result):
    """The result as it may be printed: credentials on the kernel lines masked (plugins/module_utils/common/redact.py)."""
    out = dict(result)
    for key in ("before", "after", "added", "removed", "changes", "diff"):
        if key in out:
            out[key] = redact.redact_all(out[key])
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="str", default=[]),
            backup=dict(type="bool", default=True),
            boot_loader=dict(type="str", choices=["auto", "grub"], default="auto"),
            dropin_dir=dict(type="str", default="/etc/default/grub.d"),
            family=dict(type="str", choices=["Debian", "RedHat"], default="Debian"),
            output=dict(type="str", default=""),
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
        read = hs.read(params["root"], params["state_file"]) if params["state_file"] else None
        state = read.state if read else None
        result, writes = run(params, state)
    except (bf.BootFilesError, bc.BootConfigError, hs.StateError) as exc:
        module.fail_json(msg=redact.redact(to_native(exc)), path=params["path"], changed=False)
    if state is not None:
        result["host_state"] = state
    if read is not None and read.note:
        module.warn(read.note)
    diff = result.pop("diff")
    result["changed"] = bool(writes)
    if module._diff:
        result["diff"] = diff
    # Said when the arguments are placed, not on every run: a later run that changes nothing has nothing to explain.
    for where in result["overridden"] if writes else []:
        module.warn(f"{where} assigns {result['variable']} but {result['target']} overrides it; the arguments went to "
                    "the latter")
    if result["needs"] and params["state_file"] and not module.check_mode:
        # Written ahead: the tool's step is pending before the first file changes, so a run killed after any
        # write leaves it for the next run to repeat (plugins/module_utils/host/state.py).
        try:
            hs.write_ahead(params["root"], params["state_file"], ["boot_config"])
        except hs.StateError as exc:
            module.fail_json(msg=f"nothing written: {to_native(exc)}", **_shown(result))
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
                module.fail_json(msg=f"cannot write {shown}: {to_native(exc)} (this file was not changed; files "
                                     f"written before it: {', '.join(b['path'] for b in backups[:-1]) or 'none'})",
                                 backups=backups, **_shown(result))
        if params["backup"]:
            result["backups"] = backups
    module.exit_json(**_shown(result))


if __name__ == "__main__":
    main()
