# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Placement's candidate bounds for the nova_pci_config role: adapters over
``plugins/module_utils/nova/placement_limits.py`` (the rule and the facts by release are documented there).

``specs_by_host | open_gpu_cloud.toolkit.nova_placement_limits(release, in_placement, flavors)`` ->
``{options, reasons, text}``: ``specs_by_host`` the role's ``{host: [device_spec entries]}``, ``flavors`` the
declared ``cloud_flavors`` or null (not known here). ``files | open_gpu_cloud.toolkit.nova_placement_operator_settings(begin,
end)`` -> ``["<file>: [section] option", ...]``: the candidate options an override file sets outside the project's
block.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement_limits


def nova_placement_limits(specs_by_host, release, in_placement, flavors=None):
    """``placement_limits.for_deployment``; an unknown release becomes a filter error with the same words."""
    try:
        return placement_limits.for_deployment(specs_by_host, release, in_placement, flavors)
    except ValueError as exc:
        raise AnsibleFilterError(f"nova_pci_config_openstack_release: {exc}") from None


class FilterModule:
    """Placement's candidate bounds."""

    def filters(self):
        return {"nova_placement_limits": nova_placement_limits,
                "nova_placement_operator_settings": placement_limits.operator_settings}
