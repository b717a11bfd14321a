#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Write, edit, link or remove the files a role owns on a host, all in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_files
short_description: Write, edit, link or remove a role's files on a host in one module run
description:
  - One module run for what would otherwise be one C(template)/C(copy)/C(blockinfile)/C(file) task per
    file (each a module process per host). Every entry of O(files) says what one path must be; the module
    reads what is there, decides every change first (an entry it refuses stops the run before anything is
    written), then writes each changed file through a temporary file beside it and an atomic rename
    (C(atomic_move) - an existing file's owner is kept).
  - C(file) - exactly O(files[].content). A symlink in its place is replaced by the file, never written
    through (as C(copy) and C(template) do), so nothing lands outside O(root).
  - C(block) - O(files[].block) between two marker lines in a file the operator owns; the rest of the file
    is kept. The text is the one C(blockinfile) writes (markers C(BEGIN)/C(END), appended at the end when
    missing), so a file it wrote is found unchanged. A symlinked file is edited at its target, resolved as
    the host resolves it (inside O(root)).
  - C(link) - a symbolic link to O(files[].src), replacing whatever is there (what C(systemctl enable) makes).
  - C(absent) - nothing there; a link is removed, not its target. A directory is refused.
  - Directories above a path are resolved the host's way (an absolute symlink in a sandbox points into the
    sandbox) and created with O(directory_mode) when missing; existing directories are left as they are.
  - Returns which entries changed and the union of their O(files[].needs) (e.g. C(initramfs)), so the role
    knows what to rebuild. With O(state_file), those of them that are steps of the passthrough_host state
    (C(initramfs), C(boot_config)) are marked pending there, durably, before the first file is written
    (write-ahead), so that a run killed after any write leaves the step for the next run. The rules are in
    plugins/module_utils/host/files.py.
options:
  directory_mode:
    description: Mode of the directories the module creates, an octal string (a number is refused).
    type: raw
    default: "0755"
  files:
    description: What each path must be, in the order they are written.
    type: list
    elements: dict
    required: true
    suboptions:
      block:
        description: The block's lines (C(block) only); empty removes the block and its markers.
        type: str
      content:
        description: The file's whole text (C(file) only), e.g. a C(lookup('ansible.builtin.template', ...)).
        type: str
      marker:
        description: The marker line with C({mark}) (C(block) only).
        type: str
        default: "# {mark} ANSIBLE MANAGED BLOCK"
      mode:
        description:
          - The file's mode, an octal string such as C("0644") (C(file) and C(block)); a number (YAML reads
            an unquoted 0644 as 420) is refused. Without it a new file gets 0644 and an existing one keeps its mode.
        type: raw
      needs:
        description: Names of follow-up steps a change of this entry needs; returned in RV(needs) when it changes.
        type: list
        elements: str
        default: []
      path:
        description: The path as on the host (absolute), below O(root).
        type: str
        required: true
      src:
        description: The link's target as written in the link (C(link) only).
        type: str
      state:
        description: What the path must be.
        type: str
        choices: [file, block, link, absent]
        default: file
  root:
    description: Directory the host's files are under (a sandbox copy of a host); C(/) on a real host.
    type: str
    default: /
notes:
  - Check mode plans with the same function as a real run and writes nothing.
  - With C(--diff) each changed file is shown whole, before and after; created directories, links, removals
    and mode changes as the C(file) module shows them.
extends_documentation_fragment: [open_gpu_cloud.toolkit.host_state, open_gpu_cloud.toolkit.attributes.check_and_diff]
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Write the vfio files
  open_gpu_cloud.toolkit.host_files:
    files:
      - path: /etc/modprobe.d/vfio.conf
        content: "{{ lookup('ansible.builtin.template', 'vfio.conf.j2') }}"
        mode: "0644"
        needs: [initramfs]
      - path: /etc/initramfs-tools/modules
        state: block
        block: "vfio\nvfio_iommu_type1\nvfio_pci"
        marker: "# {mark} open-gpu-cloud passthrough_host: vfio before any GPU driver"
        needs: [initramfs]
      - path: /etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service
        state: link
        src: /etc/systemd/system/vfio-pci-bind.service
      - path: /usr/local/sbin/vfio-pci-bind
        state: absent
  register: __files

- name: Rebuild the initramfs when an input changed
  ansible.builtin.command:
    argv: [update-initramfs, -u, -k, all]
  when: "'initramfs' in __files.needs"
  changed_when: true
"""

RETURN = r"""
host_state:
  description: The state file as read before any change (plugins/module_utils/host/state.py), with C(pending) (the steps an
    earlier run left pending), C(reboot) (the reboot recorded to settle the plan, or null) and C(version), as the
    grub_cmdline module returns it.
  returned: O(state_file) is set and the module succeeded
  type: dict
files:
  description: Each entry's outcome, in order.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: The path as on the host.
      type: str
    state:
      description: The entry's state.
      type: str
    action:
      description: What was done (or would be, in check mode) - C(create), C(update), C(replace-link), C(chmod), C(link), C(remove) or C(none).
      type: str
    changed:
      description: Whether the entry changed.
      type: bool
  sample: [{path: /etc/modprobe.d/vfio.conf, state: file, action: none, changed: false}]
changed_paths:
  description: The paths (as on the host) that changed, or would in check mode.
  returned: success
  type: list
  elements: str
inputs:
  description: For each step named in O(files[].needs), a fingerprint of its entries as they are to be - what its
    tool runs on. Recorded in the state file once the tool succeeded (host_state O(open_gpu_cloud.toolkit.host_state#module:inputs)).
  returned: success
  type: dict
  sample: {initramfs: "sha256:5d41402abc4b2a76b9719d911017c592..."}
needs:
  description: The union of O(files[].needs) of the entries that changed, and (with O(state_file)) the steps whose
    inputs differ from those their tool last ran on, sorted.
  returned: success
  type: list
  elements: str
  sample: [initramfs]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import files as hf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory_mode=dict(type="raw", default="0755"),
            files=dict(type="list", elements="dict", required=True, options=dict(
                block=dict(type="str"),
                content=dict(type="str"),
                marker=dict(type="str", default="# {mark} ANSIBLE MANAGED BLOCK"),
                mode=dict(type="raw"),
                needs=dict(type="list", elements="str", default=[]),
                path=dict(type="str", required=True),
                src=dict(type="str"),
                state=dict(type="str", choices=["file", "block", "link", "absent"], default="file"),
            )),
            root=dict(type="str", default="/"),
            state_file=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not isinstance(params["directory_mode"], str) or not hf.MODE_RE.match(params["directory_mode"]):
        module.fail_json(msg=f"directory_mode {params['directory_mode']!r} is not an octal mode string such as "
                             "\"0755\" (quote it in YAML)")
    entries = [{k: v for k, v in entry.items() if not (k == "marker" and entry["state"] != "block")}
               for entry in params["files"]]
    try:
        state, _real, _text, note = hs.read(params["root"], params["state_file"]) if params["state_file"] else \
            (None, None, None, None)
        actions = hf.plan(params["root"], entries)
        fingerprints = hf.inputs(entries)
    except (hf.HostFilesError, hs.StateError) as exc:
        module.fail_json(msg=f"nothing written: {to_native(exc)}", changed=False)
    changed = [a for a in actions if a["changed"]]
    # A step is due when a file it takes changes now, or when its inputs are not those its tool last ran on
    # (host_state's record: also when the state file is gone or predates the record).
    due = {step for step, fingerprint in fingerprints.items()
           if state is not None and step in hs.STEPS and state["inputs"].get(step) != fingerprint}
    result = dict(
        changed=bool(changed),
        files=[dict(path=a["path"], state=a["state"], action=a["action"], changed=a["changed"]) for a in actions],
        changed_paths=[a["path"] for a in changed],
        needs=sorted({n for a in changed for n in a["needs"]} | due),
        inputs=fingerprints,
    )
    if note:
        result["warnings"] = [note]
    if state is not None:
        result["host_state"] = state
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = [d for a in changed for d in a["diff"]]
    ahead = [n for n in result["needs"] if n in hs.STEPS]
    if ahead and params["state_file"] and not module.check_mode:
        # Written ahead: the follow-up step is pending before the first file changes, so a run killed after any
        # write leaves it for the next run to repeat (plugins/module_utils/host/state.py).
        try:
            hs.write_ahead(params["root"], params["state_file"], ahead)
        except hs.StateError as exc:
            module.fail_json(msg=f"nothing written: {to_native(exc)}", **result)
    if not module.check_mode:
        done = []
        for act in changed:
            try:
                hf.apply(params["root"], act, move=lambda tmp, real: module.atomic_move(tmp, real, unsafe_writes=False),
                         directory_mode=int(params["directory_mode"], 8))
            except (OSError, hf.HostFilesError) as exc:
                module.fail_json(msg=f"cannot {act['action']} {act['path']}: {to_native(exc)}. This file was not "
                                     "changed (each is replaced atomically); changed before it: "
                                     f"{', '.join(done) or 'nothing'}. Fix the cause and run again.",
                                 **result)
            done.append(act["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
