# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The declared flavors' PCI alias requests against the plans, as a filter: an adapter over
plugins/module_utils/cloud/flavors.py (the rule the os_flavors and os_cloud modules apply too).

* ``cloud_flavors | open_gpu_cloud.toolkit.cloud_flavor_alias_errors(known_aliases, retired_aliases)``: a list of
  messages, empty when every flavor asks for aliases the GPU hosts' plans provide (roles/cloud_resources, entry point
  ``check_flavors``: site.yml asks it before any host or Nova file is written).
* ``cloud_flavors | open_gpu_cloud.toolkit.cloud_flavor_numa_errors(passthrough_plans, alias_numa_policy)``: a list
  of messages, one for each flavor whose PCI NUMA affinity no GPU host can give (plugins/module_utils/nova/numa.py;
  ``alias_numa_policy`` is the numa_policy Nova's aliases carry, None where none is written: Nova's legacy).
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavors
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import numa


def numa_errors(declared, plans, alias_numa_policy=None):
    """numa.flavor_problems over the plans' GPU nodes, every alias with ALIAS_NUMA_POLICY."""
    return numa.flavor_problems(declared, numa.gpu_nodes(plans),
                                default_policy=alias_numa_policy or numa.DEFAULT_ALIAS_POLICY)


class FilterModule:
    """Cloud declaration filters."""

    def filters(self):
        return {"cloud_flavor_alias_errors": flavors.declared_alias_errors, "cloud_flavor_numa_errors": numa_errors}
