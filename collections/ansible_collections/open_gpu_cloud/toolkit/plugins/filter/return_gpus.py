# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The pure steps of playbooks/return_gpus.yml, thin adapters over plugins/module_utils/ops/pci_return.py.

* ``return_gpus_address_errors``: ``return_gpus_addresses | open_gpu_cloud.toolkit.return_gpus_address_errors`` -> [error] (its preflight);
* ``return_gpus_waiting``: ``nova.devices | open_gpu_cloud.toolkit.return_gpus_waiting(hypervisor_names, addresses)`` -> the one-time-use
  devices waiting to be returned, by inventory host;
* ``return_gpus_to_return``: ``waiting | open_gpu_cloud.toolkit.return_gpus_to_return(resets, without_reset)`` -> the devices that go back
  after their hosts' resets, and the skipped ones with the reason;
* ``return_gpus_fences``: ``chosen | open_gpu_cloud.toolkit.return_gpus_fences`` -> os_pci_fence's devices for the
  GPUs whose reset failed (fenced, cause reset_failed);
* ``return_gpus_summary``: ``waiting | open_gpu_cloud.toolkit.return_gpus_summary(chosen, returned, check_mode)`` -> what the run did.
"""

from __future__ import annotations


from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_return

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""


def return_gpus_address_errors(addresses):
    """Why return_gpus_addresses is not a list of PCI addresses, one error per bad item; [] when it is."""
    return pci_return.address_errors(addresses)


def return_gpus_waiting(devices, hypervisor_names, addresses=None, fences=None):
    """os_pci_inventory's ``devices`` -> {by_host, left, not_waiting, count} (pci_return.waiting_by_host); ``fences``
    os_pci_fence's ``records`` ({host: [entry]}): a fenced device is left, with the reason."""
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise AnsibleFilterError("return_gpus_waiting: devices must be os_pci_inventory's devices (a list of dicts), "
                                 f"got {type(devices).__name__}")
    if not isinstance(hypervisor_names, dict):
        raise AnsibleFilterError("return_gpus_waiting: hypervisor_names must be {host: hypervisor name} "
                                 "(nova_pci_hypervisor_names)")
    if fences is not None and not (isinstance(fences, dict) and all(isinstance(v, list) for v in fences.values())):
        raise AnsibleFilterError("return_gpus_waiting: fences must be os_pci_fence's records ({host: [entry]}), got "
                                 f"{type(fences).__name__}")
    try:
        return pci_return.waiting_by_host(devices, dict(hypervisor_names), addresses, fences)
    except ValueError as exc:
        raise AnsibleFilterError(f"return_gpus_waiting: {exc}") from None


def return_gpus_to_return(waiting, resets, without_reset=False):
    """The waiting devices that go back after their hosts' resets (pci_return.to_return)."""
    if not isinstance(waiting, dict) or "by_host" not in waiting:
        raise AnsibleFilterError("return_gpus_to_return: waiting must be return_gpus_waiting's answer")
    if not isinstance(resets, dict):
        raise AnsibleFilterError("return_gpus_to_return: resets must be {host: pci_device_reset's result}")
    if not isinstance(without_reset, bool):
        raise AnsibleFilterError(f"return_gpus_to_return: without_reset must be true or false, got {without_reset!r} "
                                 "(return_gpus_without_reset)")
    return pci_return.to_return(waiting, dict(resets), without_reset)


def return_gpus_summary(waiting, chosen, returned=None, check_mode=False, fenced=None):
    """What the run did: {returned, unchanged, skipped, errors, not_waiting, waiting, nothing_waiting, lines}."""
    if not isinstance(waiting, dict) or not isinstance(chosen, dict) or "skipped" not in chosen:
        raise AnsibleFilterError("return_gpus_summary: expects return_gpus_waiting's and return_gpus_to_return's "
                                 "answers")
    return pci_return.summary(waiting, chosen, returned if isinstance(returned, dict) else None, bool(check_mode),
                              fenced if isinstance(fenced, dict) else None)


def return_gpus_fences(chosen):
    """os_pci_fence's devices for the GPUs whose reset failed (pci_return.reset_failed_fences)."""
    if not isinstance(chosen, dict) or "skipped" not in chosen:
        raise AnsibleFilterError("return_gpus_fences: expects return_gpus_to_return's answer")
    return pci_return.reset_failed_fences(chosen)


class FilterModule:
    """Filters of playbooks/return_gpus.yml."""

    def filters(self):
        return {
            "return_gpus_address_errors": return_gpus_address_errors,
            "return_gpus_waiting": return_gpus_waiting,
            "return_gpus_to_return": return_gpus_to_return,
            "return_gpus_summary": return_gpus_summary,
            "return_gpus_fences": return_gpus_fences,
        }
