#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Read and update the passthrough_host state file (pending steps, the reboot that was to settle them)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Remember unfinished host work and the reboot meant to settle it
description:
  - Reads the state file (JSON) under O(root) and the running boot id, applies the requested changes
    (steps marked pending or done, a reboot recorded or cleared, what the boot-config tool generated from), and
    writes the file only when it changes (temporary file, fsync, atomic rename, fsync of the directory).
  - With O(decide), says whether a reboot may be made now (RV(reboot_allowed)) - not when the host
    already rebooted for the same boot line and pending list (O(boot_args), O(plan_pending)) and still
    needs it.
  - The rules are in plugins/module_utils/host/state.py.
options:
  boot_id_path:
    description: The running boot id, as on the host.
    type: str
    default: /proc/sys/kernel/random/boot_id
  clear_reboot:
    description: Forget the recorded reboot (the plan holds after it).
    type: bool
    default: false
  boot_args:
    description: The arguments of each generated boot entry (what a reboot now would boot with).
    type: list
    elements: list
    default: []
  decide:
    description: Say whether a reboot may be made now (RV(reboot_allowed), RV(reason)).
    type: bool
    default: false
  inputs:
    description:
      - Record what a step's tool just ran on, a fingerprint per step (plugins/modules/host_files.py's
        RV(open_gpu_cloud.toolkit.host_files#module:inputs)), given with O(pending_remove) once the tool succeeded. A step whose inputs
        later differ from these is due again.
    type: dict
    default: {}
  generated_from:
    description:
      - Record what the boot-config tool just generated from - the fingerprint of the kernel arguments the GRUB files
        give (the grub_cmdline module's RV(open_gpu_cloud.toolkit.grub_cmdline#module:files_fingerprint)). Given with O(pending_remove)
        C(boot_config) once the tool succeeded; empty records nothing.
    type: str
    default: ''
  plan_pending:
    description: What the plan says the running system lacks (the plan's C(pending) list).
    type: list
    elements: str
    default: []
  path:
    description: The state file, as on the host (absolute).
    type: str
    default: /var/lib/open-gpu-cloud/passthrough_host.json
  pending_add:
    description: Steps to mark pending (C(initramfs), C(boot_config)).
    type: list
    elements: str
    default: []
  pending_remove:
    description: Steps that succeeded.
    type: list
    elements: str
    default: []
  record_reboot:
    description: Record a reboot about to be made - the running boot id and what it is to apply (O(boot_args), O(plan_pending)).
    type: bool
    default: false
  root:
    description: Directory the host's files are under; C(/) on a real host.
    type: str
    default: /
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_and_diff]
notes:
  - Check mode computes the new state and writes nothing.
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Mark the initramfs rebuild pending
  open_gpu_cloud.toolkit.host_state:
    pending_add: [initramfs]

- name: May the host be rebooted?
  open_gpu_cloud.toolkit.host_state:
    decide: true
    boot_args: "{{ __entries.entries | map(attribute='args') | list }}"
    plan_pending: "{{ __plan.pending }}"
  register: __state
"""

RETURN = r"""
pending:
  description: The steps pending after the changes (C(initramfs), C(boot_config)).
  returned: success
  type: list
  elements: str
reboot:
  description: The recorded reboot after the changes (C(boot_id), C(fingerprint)), or null.
  returned: success
  type: dict
boot_id:
  description: The running boot id (empty when the file is missing).
  returned: success
  type: str
reboot_allowed:
  description: Whether a reboot may be made now (true without O(decide)).
  returned: success
  type: bool
reason:
  description: Why, in words.
  returned: success
  type: str
path:
  description: The state file on this machine.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            boot_id_path=dict(type="str", default="/proc/sys/kernel/random/boot_id"),
            clear_reboot=dict(type="bool", default=False),
            boot_args=dict(type="list", elements="list", default=[]),
            decide=dict(type="bool", default=False),
            generated_from=dict(type="str", default=""),
            inputs=dict(type="dict", default={}),
            plan_pending=dict(type="list", elements="str", default=[]),
            path=dict(type="str", default="/var/lib/open-gpu-cloud/passthrough_host.json"),
            pending_add=dict(type="list", elements="str", default=[]),
            pending_remove=dict(type="list", elements="str", default=[]),
            record_reboot=dict(type="bool", default=False),
            root=dict(type="str", default="/"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        boot_id_file = bf.host_path(params["root"], params["boot_id_path"], "boot_id_path")
        state, path, before_text, note = hs.read(params["root"], params["path"])
    except (bf.BootFilesError, hs.StateError) as exc:
        module.fail_json(msg=to_native(exc))
    result = dict(changed=False, path=path)
    boot_id = ""
    if os.path.isfile(boot_id_file):
        with open(boot_id_file, encoding="utf-8") as handle:
            boot_id = handle.read().strip()
    try:
        print_now = hs.fingerprint(params["boot_args"], params["plan_pending"])
        record = {"boot_id": boot_id, "fingerprint": print_now} if params["record_reboot"] else None
        new = hs.update(state, params["pending_add"], params["pending_remove"], record, params["clear_reboot"],
                        params["generated_from"], params["inputs"])
    except hs.StateError as exc:
        module.fail_json(msg=to_native(exc), **result)
    allowed, reason = True, "no decision asked"
    if params["decide"]:
        allowed, reason = hs.reboot_decision(state, boot_id, print_now)
    new_text = hs.dump(new)
    changed = new != state or before_text is None and new != hs.empty(new["machine"]) or note is not None
    if note:
        result["warnings"] = [note]
    result.update(changed=changed, pending=new["pending"], reboot=new["reboot"], boot_id=boot_id, reboot_allowed=allowed, reason=reason)
    if module._diff and changed:
        result["diff"] = dict(before=before_text or "", after=new_text, before_header=params["path"],
                              after_header=params["path"])
    if changed and not module.check_mode:
        try:
            hs.save(path, new, params["path"])
        except hs.StateError as exc:
            module.fail_json(msg=to_native(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
