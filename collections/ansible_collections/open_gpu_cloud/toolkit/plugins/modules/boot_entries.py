#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Read back the kernel arguments the generated boot configuration gives, and check them against a plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: boot_entries
short_description: Read the kernel arguments the generated boot configuration will boot with
description:
  - Reads what the boot-config tool generated - on the Debian family the default (first) menu entry's
    C(linux) line in C(/boot/grub/grub.cfg); on the RHEL family the C(options) line of every kernel
    entry in C(/boot/loader/entries) (what C(grubby --info) shows), rescue entries left out - and checks
    each against the planned arguments with the kernel_cmdline model.
  - Also computes, from the GRUB files (O(grub_path) and, Debian family, the drop-ins of O(dropin_dir)),
    the arguments grub-mkconfig should have written, so a mismatch can be explained - which file set
    which variable, and what overrides them.
  - When they lack the plan, RV(diagnosis) names the cause and its fix (RV(cause)) - the tool's run did not
    complete (O(state_file) says so), the files themselves lack the arguments, the files give them but the tool
    has not run on them since they changed, or the tool ran on them and something outside the files overrides
    them.
  - Signs of another boot mechanism than GRUB's defaults (systemd-boot, unified kernel images, kernel-install's
    C(/etc/kernel/cmdline) on the Debian family) are a problem of their own (O(boot_loader)).
  - Credentials on the lines read (plugins/module_utils/common/redact.py) are masked in the result.
  - Never writes anything.
options:
  absent:
    description: Arguments the entries must not have (C(key) or C(key=value)).
    type: list
    elements: str
    default: []
  boot_loader:
    description: C(auto) reports signs of another boot mechanism than GRUB's defaults; C(grub) says GRUB boots the host.
    type: str
    choices: [auto, grub]
    default: auto
  dropin_dir:
    description: The GRUB drop-in directory (Debian family). Absolute.
    type: str
    default: /etc/default/grub.d
  family:
    description: The OS family, deciding what the boot-config tool generates.
    type: str
    choices: [Debian, RedHat]
    default: Debian
  grub_path:
    description: The GRUB defaults file (absolute).
    type: str
    default: /etc/default/grub
  output:
    description:
      - What the boot-config tool generated. Empty - C(/boot/grub/grub.cfg) (Debian family) or the BLS
        directory C(/boot/loader/entries) (RHEL family). A directory is read as BLS entries.
    type: str
    default: ''
  present:
    description: Arguments every entry must have.
    type: list
    elements: str
    default: []
  root:
    description: Directory the host's files are under; C(/) on a real host.
    type: str
    default: /
  state_file:
    description: The passthrough_host state file (absolute), read to tell the causes apart; empty - not read.
    type: str
    default: ''
  tool:
    description: The boot-config command, as the diagnosis names it.
    type: str
    default: the boot-config tool
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only]
notes:
  - Read-only; runs the same in check mode.
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Read back the generated boot configuration
  open_gpu_cloud.toolkit.boot_entries:
    family: RedHat
    present: [amd_iommu=on, iommu=pt]
    absent: [iommu=off]
  register: __entries

- name: Refuse to reboot for nothing
  ansible.builtin.assert:
    that: __entries.problems | length == 0
    fail_msg: "{{ __entries.diagnosis }}"
"""

RETURN = r"""
output:
  description: What was read (as on the host).
  returned: always
  type: str
  sample: /boot/grub/grub.cfg
entries:
  description: Each boot entry read, as C({where, args}).
  returned: success
  type: list
  elements: dict
problems:
  description: What each entry lacks or still has against the plan; empty when the next boot gets the plan.
  returned: success
  type: list
  elements: str
expected:
  description: The arguments the GRUB files give the default entry (after root= and ro).
  returned: success
  type: list
  elements: str
sources:
  description: For each command-line variable, the file and line of its last assignment (or none).
  returned: success
  type: dict
cause:
  description: When RV(problems) is not empty, its cause - C(boot_mechanism), C(tool_pending), C(files), C(tool_not_run)
    or C(override); else empty.
  returned: success
  type: str
diagnosis:
  description: When RV(problems) is not empty, what is wrong, why, and the fix, in words.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_config as bc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact


def run(params, state=None):
    """The generated entries checked against the plan; ``state`` is the host state (or None: not kept)."""
    family = params["family"]
    output = params["output"] or bc.FAMILIES[family][2]
    root = params["root"]
    bf.host_path(root, output, "output (passthrough_host_boot_config_output)")
    result = dict(output=output, cause="")
    others = bf.other_boot_mechanisms(root, family) if params["boot_loader"] == "auto" else []
    if others:
        result.update(entries=[], problems=others, expected=[], sources={}, cause="boot_mechanism", diagnosis=(
            f"this host does not boot through GRUB's defaults: {'; '.join(others)}. What GRUB generates is not what "
            "the next boot gets, so the host is not rebooted. Give the kernel the planned arguments through that "
            "mechanism yourself, or set passthrough_host_boot_loader: grub if GRUB does boot it"))
        return result
    entries = bf.read_entries(root, family, output)
    try:
        sourced = bf.sourced_files(root, family, params["grub_path"], params["dropin_dir"])
    except FileNotFoundError:
        sourced = []
    values, assignments = bc.evaluate([(shown, text) for shown, _t, _r, text in sourced])
    expected = bc.kernel_args(values)
    sources = {}
    for name in bc.CMDLINE_VARIABLES:
        last = [a.where for a in assignments if a.name == name]
        sources[name] = last[-1] if last else "not assigned"
    problems = bc.readback_problems(entries, params["present"], params["absent"])
    result.update(entries=[dict(where=w, args=a) for w, a in entries], problems=problems,
                  expected=expected, sources=sources, diagnosis="")
    if problems:
        result["cause"], result["diagnosis"] = bc.diagnose(problems, expected, sources, params["present"],
                                                           params["absent"], output, state, params["tool"])
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="str", default=[]),
            boot_loader=dict(type="str", choices=["auto", "grub"], default="auto"),
            dropin_dir=dict(type="str", default="/etc/default/grub.d"),
            family=dict(type="str", choices=["Debian", "RedHat"], default="Debian"),
            grub_path=dict(type="str", default="/etc/default/grub"),
            output=dict(type="str", default=""),
            present=dict(type="list", elements="str", default=[]),
            root=dict(type="str", default="/"),
            state_file=dict(type="str", default=""),
            tool=dict(type="str", default="the boot-config tool"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        state = hs.read(params["root"], params["state_file"]).state if params["state_file"] else None
        result = run(params, state)
    except (bf.BootFilesError, bc.BootConfigError, hs.StateError) as exc:
        module.fail_json(msg=redact.redact(to_native(exc)), changed=False)
    # What is printed and passed on (a reboot record's fingerprint too) has the credentials masked.
    module.exit_json(changed=False, **redact.redact_all(result))


if __name__ == "__main__":
    main()
