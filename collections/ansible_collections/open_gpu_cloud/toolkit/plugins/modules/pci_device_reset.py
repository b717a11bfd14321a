#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Reset passthrough GPUs through sysfs when it is safe (before they go back to Nova)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pci_device_reset
short_description: Reset passthrough GPUs through sysfs, only when it is safe
description:
  - For each device of I(devices), writes C(1) to C(<sysfs_root>/bus/pci/devices/<address>/reset), and the kernel
    resets the device (with the method C(reset_method) names first, when the kernel has that file).
  - Only when the device is bound to C(vfio-pci) (its C(driver) link), no process holds its IOMMU group open (no
    C(<procfs_root>/<pid>/fd/*) link to C(/dev/vfio/<group>), C(/dev/vfio/noiommu-<group>) or one of its vfio cdevs
    C(/dev/vfio/devices/vfioN)), the host's passthrough I(plan) says the kernel can reset it (C(resettable) of its
    C(selected) entry) and C(reset) is in sysfs. Otherwise the device is skipped with a reason naming the host, the
    address and what to do; C(kind) tells C(no_reset) (the kernel cannot, or may not be known to, reset it; an
    operator may still return it without a reset) from C(blocked) (not on vfio-pci, held open, gone from the bus, a
    tree that leads out of its root, or the reset failed; never returned).
  - Every path resolves inside I(sysfs_root); a symlink out of the tree (a sandbox or a captured host) is refused, as
    M(open_gpu_cloud.toolkit.pci_passthrough_facts) refuses it. C(reset) is opened write-only, without following a link and without
    creating anything.
  - Skipping is not a failure; the module fails only when I(sysfs_root) or I(procfs_root) is not a sysfs or procfs
    tree, or I(plan) is not a plan.
version_added: "0.1.0"
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only]
attributes:
  check_mode:
    description: Reads and decides as a real run does (C(outcome=would_reset)) and writes nothing.
options:
  devices:
    description: The devices to reset, with the Placement provider each is, for the messages.
    type: list
    elements: dict
    required: true
    suboptions:
      address:
        description: The device's PCI address (C(0000:27:00.0); upper case is accepted).
        type: str
        required: true
      provider:
        description: The UUID of its resource provider in Placement (names it in the command that returns it by hand).
        type: str
      resource_class:
        description: Its resource class in Placement.
        type: str
  host:
    description: The host's name in messages (its inventory name); default the machine's own name.
    type: str
  plan:
    description:
      - The host's passthrough plan (C(passthrough_plan), loaded by roles/passthrough C(tasks/load.yml)); its
        C(selected) entries say whether the kernel can reset each GPU (C(resettable), C(reset_methods)).
    type: dict
    required: true
  procfs_root:
    description: Where procfs is mounted, or a sandbox host's C(proc) directory (its processes' C(fd) links are read).
    type: path
    default: /proc
  sysfs_root:
    description: Where sysfs is mounted, or a sandbox host's C(sys) directory.
    type: path
    default: /sys
notes:
  - Needs root on a real host (C(become)); C(reset) is writable by root only, and so are other users' C(fd)
    directories; one that cannot be read makes the device C(blocked) (who holds it cannot be told).
  - Nothing stops a process from opening the group between the scan and the write. The playbook resets only devices
    Placement keeps reserved (no server can be given them meanwhile).
"""

EXAMPLES = r"""
- name: Reset the GPUs waiting to be returned
  open_gpu_cloud.toolkit.pci_device_reset:
    host: "{{ inventory_hostname }}"
    devices:
      - {address: "0000:27:00.0", provider: 5c3f0e1a-0b7e-4bb1-9a53-5a4c4f0c2c11, resource_class: CUSTOM_PCI_10DE_1DB4}
    plan: "{{ passthrough_plan }}"
    sysfs_root: "{{ passthrough_sysfs_root | default('/sys') }}"
    procfs_root: "{{ passthrough_procfs_root | default('/proc') }}"
  become: true
  register: reset
"""

RETURN = r"""
devices:
  description:
    - One item per device, in the order given. C(address); C(outcome) C(reset), C(would_reset) (check mode),
      C(skipped) or C(failed) (writing C(reset) failed, the kernel could not reset it); C(kind) (C(no_reset) or
      C(blocked); null when reset); C(reason) (empty when reset).
    - What was seen, C(driver), C(iommu_group), C(holders) (C([{pid, comm, fd, target}])), C(reset_path) (the
      C(reset) file's real path, null without one).
  returned: always
  type: list
  elements: dict
  sample:
    - {"address": "0000:27:00.0", "outcome": "reset", "kind": null, "reason": "", "driver": "vfio-pci",
       "iommu_group": "19", "holders": [],
       "reset_path": "/sys/devices/pci0000:20/0000:20:03.1/0000:25:00.0/0000:26:08.0/0000:27:00.0/reset"}
reset:
  description: The addresses reset in this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
not_reset:
  description:
    - The devices skipped or failed, C([{address, outcome, kind, reason}]) (not C(skipped), a key that would make
      Ansible report the task as skipped).
  returned: always
  type: list
  elements: dict
"""

import platform

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import reset as pci_reset
from ansible.module_utils.basic import AnsibleModule


def examine(params, addresses):
    """Read every device, scan the processes once for all their vfio nodes, then decide each (pci_reset.decide):
    [(address, what was seen, decision)]. A device whose tree cannot be read is blocked, with the reason."""
    host = params["host"]
    views, errors = {}, {}
    for address, _provider, _resource_class in addresses:
        try:
            views[address] = pci_reset.read_device(params["sysfs_root"], address)
        except (pci_reset.ResetError, OSError) as exc:  # OSError: a tree that changed under the reading
            errors[address] = str(exc)
    nodes = dict((address, pci_reset.vfio_nodes(view["iommu_group"], view["cdevs"])) for address, view in views.items()
                 if view["present"] and view["driver"] == pci_reset.VFIO_DRIVER and view["iommu_group"])
    holders, unreadable = pci_reset.find_holders(params["procfs_root"], sorted(set(sum(nodes.values(), []))))
    examined = []
    for address, provider, resource_class in addresses:
        if address in errors:
            examined.append((address, dict(driver=None, iommu_group=None, holders=[], reset_path=None), dict(
                action="skip", kind=pci_reset.BLOCKED,
                reason=f"{host}: GPU {address}: {errors[address]}: not reset, not returned")))
            continue
        view, mine = views[address], nodes.get(address, [])
        view.update(holders=[h for h in holders if pci_reset.holds(h["target"], mine)],
                    unreadable=unreadable if mine else [])
        examined.append((address, view, pci_reset.decide(host, address, view, pci_reset.plan_entry(
            params["plan"], address), provider, resource_class)))
    return examined


def main():
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type="list", elements="dict", required=True, options=dict(
                address=dict(type="str", required=True),
                provider=dict(type="str"),
                resource_class=dict(type="str"),
            )),
            host=dict(type="str"),
            plan=dict(type="dict", required=True),
            procfs_root=dict(type="path", default="/proc"),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    params["host"] = params["host"] or platform.node()
    if not isinstance(params["plan"].get("selected"), list):
        module.fail_json(msg=f"pci_device_reset: {params['host']}: plan is not a passthrough plan (no 'selected' "
                             "list): pass the host's passthrough_plan (roles/passthrough tasks/load.yml)")
    addresses = []
    for item in params["devices"]:
        address = pci_address.normalise_address(item["address"])
        if address is None:
            module.fail_json(msg=f"pci_device_reset: {params['host']}: {item['address']!r} is not a PCI address like "
                                 "0000:27:00.0; nothing was reset")
        addresses.append((address, item.get("provider"), item.get("resource_class")))
    try:  # the roots first: a wrong root fails the task instead of skipping every device
        pci_reset.check_roots(params["sysfs_root"], params["procfs_root"])
        examined = examine(params, addresses)
    except pci_reset.ResetError as exc:
        module.fail_json(msg=f"pci_device_reset: {params['host']}: {exc}; nothing was reset")

    results, reset, not_reset = [], [], []
    for address, device, decision in examined:
        outcome, kind, reason = "skipped", decision["kind"], decision["reason"]
        if decision["action"] == "reset":
            if module.check_mode:
                outcome = "would_reset"
            else:
                try:
                    pci_reset.write_reset(device["reset_path"])
                    outcome = "reset"
                except pci_reset.ResetError as exc:
                    outcome, kind = "failed", pci_reset.BLOCKED
                    reason = (f"{params['host']}: GPU {address}: {exc}: not returned. Read the kernel log "
                              "(journalctl -k) and reboot the host if the GPU is stuck")
        if outcome in ("skipped", "failed"):
            not_reset.append(dict(address=address, outcome=outcome, kind=kind, reason=reason))
        else:
            reset.append(address)
            kind, reason = None, ""
        results.append(dict(address=address, outcome=outcome, kind=kind, reason=reason, driver=device.get("driver"),
                            iommu_group=device.get("iommu_group"), holders=device.get("holders") or [],
                            reset_path=device.get("reset_path")))
    # A failed reset is reported (outcome failed), not raised: the other devices' results still reach the playbook's
    # return step, which fails the run at its end.
    module.exit_json(changed=bool(reset), devices=results, reset=reset, not_reset=not_reset)


if __name__ == "__main__":
    main()
