# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The declared flavors' PCI alias requests against the plans, as a filter: an adapter over
plugins/module_utils/cloud/flavor_requests.py (the rule the os_flavors and os_cloud modules apply too).

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


def numa_errors(declared, plans, alias_numa_policy=None):
    """numa.flavor_problems over the plans' GPU nodes, every alias with ALIAS_NUMA_POLICY."""
    return numa.flavor_problems(declared, numa.gpu_nodes(plans),
                                default_policy=alias_numa_policy or numa.DEFAULT_ALIAS_POLICY)


def address_errors(declared, plans, release, images=None):
    """address_space.flavor_problems under SeaBIOS (Nova's default) and the firmware of each declared image."""
    firmwares = {"bios"} | {address_space.image_firmware(image.get("properties")) for image in images or []
                            if isinstance(image, dict)}
    return address_space.flavor_problems(address_space.budgets(declared, plans), release,
                                         [fw for fw in address_space.FIRMWARES if fw in firmwares])


def images_address_space(images, declared, plans):
    """Each image with the address-space properties its firmware's guests need for the GPU flavors (its own win)."""
    budgets = address_space.budgets(declared, plans)
    out = []
    for image in images or []:
        if not isinstance(image, dict):
            out.append(image)
            continue
        needed = address_space.image_properties(budgets, address_space.image_firmware(image.get("properties")))
        own = image.get("properties") if isinstance(image.get("properties"), dict) else {}
        out.append(dict(image, properties={**needed, **own}) if needed else image)
    return out


class FilterModule:
    """Cloud declaration filters."""

    def filters(self):
        return {"cloud_flavor_alias_errors": flavor_requests.declared_alias_errors, "cloud_flavor_numa_errors": numa_errors,
                "cloud_flavor_address_errors": address_errors, "cloud_images_address_space": images_address_space}
