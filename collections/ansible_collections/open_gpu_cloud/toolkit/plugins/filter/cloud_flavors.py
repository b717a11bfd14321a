# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The declared flavors and images against the plans, as filters: a table of names over module_utils
(cloud/flavor_requests.py, whose rule the os_flavors and os_cloud modules apply too; nova/numa.py;
nova/address_space.py).

* ``cloud_flavors | open_gpu_cloud.toolkit.cloud_flavor_alias_errors(known_aliases, retired_aliases)``: a list of
  messages, empty when every flavor asks for aliases the GPU hosts' plans provide (roles/cloud_resources, entry point
  ``check_flavors``: site.yml asks it before any host or Nova file is written).
* ``cloud_flavors | open_gpu_cloud.toolkit.cloud_flavor_numa_errors(passthrough_plans, alias_numa_policy)``: a list
  of messages, one for each flavor whose PCI NUMA affinity no GPU host can give (plugins/module_utils/nova/numa.py;
  ``alias_numa_policy`` is the numa_policy Nova's aliases carry, None where none is written: Nova's legacy).
* ``cloud_flavors | open_gpu_cloud.toolkit.cloud_flavor_address_errors(passthrough_plans, release, images)``: a list
  of messages, one for each GPU flavor whose guests no setting lets map their GPUs' memory windows beside their RAM,
  under the firmwares the images boot (plugins/module_utils/nova/address_space.py).
* ``cloud_images | open_gpu_cloud.toolkit.cloud_images_address_space(cloud_flavors, passthrough_plans)``: the images
  with Nova's ``hw_maxphysaddr_*`` properties added where a GPU flavor's guests need more than the defaults give
  under the image's firmware (an image's own properties win).
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavor_requests
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import address_space, numa


class FilterModule:
    """Cloud declaration filters."""

    def filters(self):
        return {"cloud_flavor_alias_errors": flavor_requests.declared_alias_errors,
                "cloud_flavor_numa_errors": numa.declared_problems,
                "cloud_flavor_address_errors": address_space.declared_problems,
                "cloud_images_address_space": address_space.images_with_properties}
