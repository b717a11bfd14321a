# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The gpu_images role's view of a declared image (pure; the rules are plugins/module_utils/images/gpu_images.py's).

* ``images | ogc_image_problems(default_branch, default_version)``: what is wrong with the declared images
  (one message per problem, naming the image, the variable and the fix); empty when they can be built.
* ``image | ogc_image_build(default_branch, default_version, docker_mtu, datasources, extra_env={})``: how one
  image is built: ``name``, ``disk_format``, ``elements`` (the declared ones plus ``cloud-init-datasources``),
  ``distro``, ``release``, ``nvidia_pins`` ({package: version}, empty without the NVIDIA element) and
  ``environment`` (the ``DIB_*`` variables of its ``disk-image-create``, ``extra_env`` beneath the image's own).
* ``plans | ogc_image_address_space(flavors, properties)``: the image properties (``hw_maxphysaddr_mode``/``_bits``)
  guests need to map the 64-bit memory windows of the GPUs the plans (``{host: {"facts", "plan"}}``) give Nova,
  ``{}`` when the defaults do: the more bits of all a host's GPUs in one guest (plugins/module_utils/pci/bars.py,
  ``address_space_properties``) and of the declared GPU flavors' budgets under the firmware the image properties
  name (plugins/module_utils/nova/address_space.py: each flavor's RAM beside its GPUs' windows).
"""

from __future__ import annotations

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.images import gpu_images
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import address_space
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars as pci_bars

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

# Added to every image: cloud-init reads only the datasources the role sets (gpu_images_cloud_init_datasources).
ALWAYS_ELEMENTS = ("cloud-init-datasources",)


def ogc_image_problems(images, default_branch, default_version):
    """Every problem of the declared images, in order; duplicate names are one too."""
    if not isinstance(images, list):
        return [f"image_builds must be a list of images, got {type(images).__name__}"]
    problems, seen = [], set()
    for image in images:
        problems += gpu_images.image_problems(image, default_branch, default_version)
        name = image.get("name") if isinstance(image, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.append(f"image {name} is declared twice in image_builds: names must be unique")
            seen.add(name)
    return problems


def ogc_image_build(image, default_branch, default_version, docker_mtu, datasources, extra_env=None):
    """How one declared image is built (see the module docstring). Raises on an image with problems."""
    problems = gpu_images.image_problems(image, default_branch, default_version)
    if problems:
        raise AnsibleFilterError("ogc_image_build: " + "; ".join(problems))
    elements = list(image["elements"])
    distro = gpu_images.image_distro(elements)
    pins = {}
    if gpu_images.NVIDIA_ELEMENT in elements:
        pin = gpu_images.image_pins(image, default_branch, default_version)
        pins = {package: pin["version"] for package in gpu_images.nvidia_packages(distro, pin["branch"])}
    environment = {str(k): str(v) for k, v in (extra_env or {}).items()}
    environment.update(gpu_images.build_environment(image, default_branch, default_version, docker_mtu,
                                                    datasources))
    return {
        "name": image["name"],
        "disk_format": image.get("disk_format") or "qcow2",
        "elements": elements + [e for e in ALWAYS_ELEMENTS if e not in elements],
        "distro": distro,
        "release": environment["DIB_RELEASE"],
        "nvidia_pins": pins,
        "environment": environment,
    }


def ogc_image_address_space(plans, flavors=None, properties=None):
    """Image properties for the planned GPUs' memory windows (see the module docstring); a host whose facts have no
    windows (a capture from before they were read) counts as needing nothing."""
    if not isinstance(plans, dict):
        raise AnsibleFilterError(f"ogc_image_address_space: plans must be {{host: {{facts, plan}}}}, got {plans!r}")
    windows_by_host = {}
    for host, record in sorted(plans.items()):
        selected = {d.get("address") for d in ((record or {}).get("plan") or {}).get("selected") or []}
        windows = []
        for device in ((record or {}).get("facts") or {}).get("devices") or []:
            if device.get("address") in selected and device.get("bars"):
                windows += pci_bars.high_windows(device["bars"])
        windows_by_host[host] = windows
    try:
        by_host = pci_bars.address_space_properties(windows_by_host)
        by_flavor = address_space.image_properties(address_space.budgets(flavors or [], plans),
                                                   address_space.image_firmware(properties))
    except pci_bars.ResourceError as exc:
        raise AnsibleFilterError(f"ogc_image_address_space: {exc}") from None
    return max((by_host, by_flavor), key=lambda props: props.get("hw_maxphysaddr_bits", 0))


class FilterModule:
    """The gpu_images role's filters."""

    def filters(self):
        return {"ogc_image_problems": ogc_image_problems, "ogc_image_build": ogc_image_build,
                "ogc_image_address_space": ogc_image_address_space}
