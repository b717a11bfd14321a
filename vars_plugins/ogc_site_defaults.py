# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Load the project's top-level group_vars/ as site-wide defaults beneath every inventory's own."""

from __future__ import annotations

import os

from ansible.plugins.vars.host_group_vars import VarsModule as HostGroupVarsModule
from ansible.utils.vars import combine_vars

DOCUMENTATION = r"""
name: ogc_site_defaults
short_description: Site-wide defaults from the project's top-level group_vars/, beneath the inventory's
description:
  - Loads C(group_vars/<group>.yml) and C(group_vars/<group>/*.yml) from the open-gpu-cloud checkout
    (the directory above this plugin) for every inventory, whatever C(-i) names, so every environment
    inherits the same defaults from one place.
  - It runs at the inventory stage, before C(host_group_vars) (see C(vars_plugins_enabled) in
    C(ansible.cfg)), so a value from C(inventory/<env>/group_vars/) or C(host_vars/) of the same group or
    a narrower one wins over the site default. C(ansible.cfg) also keeps C(host_group_vars) to the
    inventory stage, so this directory is not loaded a second time, as playbook group_vars, for
    C(site.yml), where it would outrank the inventory.
  - A value a group sets in the inventory file itself (its C(vars:)) also wins over the site default for
    that group. Ansible ranks the group variables of a vars plugin above those of an inventory file, so this plugin
    leaves out the keys the group already sets there.
  - Host variables are not read here; put host-specific values in the inventory's C(host_vars/).
options:
  stage:
    ini:
      - key: stage
        section: vars_ogc_site_defaults
    default: inventory
extends_documentation_fragment:
  - vars_plugin_staging
"""

SITE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class VarsModule(HostGroupVarsModule):
    """host_group_vars' own loading (files, directories, vault, extensions), rooted at the checkout."""

    REQUIRES_ENABLED = True

    def get_vars(self, loader, path, entities, cache=True):
        data = {}
        for entity in entities if isinstance(entities, list) else [entities]:
            if hasattr(entity, "get_groups"):  # a host: site defaults are group variables only
                continue
            own = entity.get_vars()  # what the inventory file itself sets for this group
            found = super().get_vars(loader, SITE_DIR, [entity], cache=cache)
            data = combine_vars(data, {key: value for key, value in found.items() if key not in own})
        return data
