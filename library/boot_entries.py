#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
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
  - Never writes anything.
options:
  absent:
    description: Arguments the entries must not have (C(key) or C(key=value)).
    type: list
    elements: str
    default: []
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
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Read-only; runs the same in check mode.
author:
  - open-gpu-cloud contributors
"""

EXAMPLES = r"""
- name: Read back the generated boot configuration
  boot_entries:
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
diagnosis:
  description: When RV(problems) is not empty, what is wrong and which file overrides what, in words.
  returned: success
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils import boot_config as bc
from ansible.module_utils import boot_files as bf


def read_entries(root, family, output):
    """[(where, args)] of the generated configuration."""
    _target, real = bf.resolve(root, output)
    if os.path.isdir(real):
        entries = []
        for name in sorted(os.listdir(real)):
            if not name.endswith(".conf"):
                continue
            shown = output.rstrip("/") + "/" + name
            fields = bc.bls_entry(bf.read_text(os.path.join(real, name), shown), shown)
            if "-rescue-" in fields.get("linux", "") or fields.get("version", "").startswith("0-rescue"):
                continue
            entries.append((shown, fields["options"]))
        if not entries:
            raise bf.BootFilesError(f"{output} has no kernel entry: the boot-config tool generated nothing to boot")
        return entries
    if not os.path.exists(real):
        raise bf.BootFilesError("%s does not exist: the boot-config tool did not generate it (set "
                                "passthrough_host_boot_config_output to what it writes)" % output)
    return [(output + " default entry", bc.grub_cfg_default_args(bf.read_text(real, output), output))]


def run(params):
    family = params["family"]
    output = params["output"] or bc.FAMILIES[family][2]
    root = params["root"]
    bf.host_path(root, output, "output (passthrough_host_boot_config_output)")
    result = dict(output=output)
    entries = read_entries(root, family, output)
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
        from_files = bc.readback_problems([("x", expected)], params["present"], params["absent"])
        where = ", ".join(f"{name} from {sources[name]}" for name in bc.CMDLINE_VARIABLES)
        if from_files:
            why = f"the GRUB files themselves do not give them ({where}: {' '.join(expected) or 'nothing'})"
        else:
            why = ("the GRUB files do give them (%s: %s), so something overrides the files: a script in "
                   "/etc/grub.d, GRUB_DEFAULT choosing another entry, or the tool writing another file than %s"
                   % (where, " ".join(expected), output))
        result["diagnosis"] = ("the boot configuration the tool generated does not carry the planned arguments: %s. "
                               "%s. A reboot would not apply the plan, so the host is not rebooted"
                               % ("; ".join(problems), why[0].upper() + why[1:]))
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            absent=dict(type="list", elements="str", default=[]),
            dropin_dir=dict(type="str", default="/etc/default/grub.d"),
            family=dict(type="str", choices=["Debian", "RedHat"], default="Debian"),
            grub_path=dict(type="str", default="/etc/default/grub"),
            output=dict(type="str", default=""),
            present=dict(type="list", elements="str", default=[]),
            root=dict(type="str", default="/"),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except (bf.BootFilesError, bc.BootConfigError) as exc:
        module.fail_json(msg=to_native(exc), changed=False)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
