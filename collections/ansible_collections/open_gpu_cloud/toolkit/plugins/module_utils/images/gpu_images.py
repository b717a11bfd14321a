# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""GPU guest images (the gpu_images role): the rules every step of a build asks.

* which distribution an image is, from its diskimage-builder elements (:func:`image_distro`);
* which NVIDIA packages the ``ogc-nvidia-driver`` element installs there, and at which pin
  (:func:`nvidia_packages`, :func:`image_pins`): Debian ``nvidia-driver`` + ``nvidia-smi`` from the
  archive's non-free component, Ubuntu ``nvidia-driver-<branch>-server`` + ``nvidia-utils-<branch>-server``;
* what is wrong with a declared image before anything is built (:func:`image_problems`): no name, no
  elements, no distribution the element supports, an unpinned driver, a pin of another branch;
* the APT sources the image installs the driver from (:func:`archive_sources`): Debian's are the ones
  diskimage-builder writes (``DIB_APT_SOURCES_CONF`` of its ``debian-minimal`` element) with the components
  the element adds (:func:`with_driver_components`); Ubuntu's are the release's three pockets;
* what a pin the archive does not have means (:func:`archive_problems`);
* the diskimage-builder environment of the build (:func:`build_environment`).

The element (``images/elements/ogc-nvidia-driver``) does in the image what these functions describe; the
image tests compare the two (the sources and packages of a built image against these answers).
"""

from __future__ import annotations

import re

NVIDIA_ELEMENT = "ogc-nvidia-driver"
# Operating-system elements of diskimage-builder, per distribution the NVIDIA element supports.
DISTRO_ELEMENTS = {"debian": ("debian", "debian-minimal"), "ubuntu": ("ubuntu", "ubuntu-minimal")}
# The release an image gets when it names none (the role's default before Debian was supported: jammy).
DEFAULT_RELEASE = {"debian": "bookworm", "ubuntu": "jammy"}
# Debian: the driver is in non-free, its GSP firmware in non-free-firmware, its helpers (nvidia-support,
# nvidia-kernel-common, glx-alternative-nvidia) in contrib. Every source that has main gets them.
DEBIAN_DRIVER_COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
# Ubuntu: nvidia-driver-<branch>-server is in restricted, in the -updates and -security pockets.
UBUNTU_COMPONENTS = ("main", "restricted", "universe", "multiverse")
ANY_VERSION = "any"
_BRANCH = re.compile(r"^[0-9]+$")
# A Debian version: [epoch:]upstream[-revision], upstream starting with a digit.
_VERSION = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$")


def image_distro(elements) -> str | None:
    """'debian' or 'ubuntu' from an image's elements; None when neither (or both) is named."""
    if not isinstance(elements, (list, tuple)):
        return None
    found = {distro for distro, names in DISTRO_ELEMENTS.items() if set(names) & set(elements)}
    return found.pop() if len(found) == 1 else None


def nvidia_packages(distro: str, branch: str) -> list[str]:
    """The driver and the package with nvidia-smi that the element installs (and holds) on ``distro``."""
    if distro == "debian":
        return ["nvidia-driver", "nvidia-smi"]
    if distro == "ubuntu":
        return [f"nvidia-driver-{branch}-server", f"nvidia-utils-{branch}-server"]
    raise ValueError(f"the {NVIDIA_ELEMENT} element supports Debian and Ubuntu images, not {distro!r}")


def image_pins(image: dict, default_branch, default_version) -> dict:
    """{'branch', 'version'} of an image's driver: its own nvidia_branch/nvidia_version, else the defaults."""
    branch = image.get("nvidia_branch")
    version = image.get("nvidia_version")
    return {"branch": default_branch if branch is None else branch,
            "version": default_version if version is None else version}


def image_release(image: dict) -> str | None:
    """The image's release (its own, else its distribution's default)."""
    return image.get("release") or DEFAULT_RELEASE.get(image_distro(image.get("elements")))


def image_problems(image, default_branch, default_version) -> list[str]:
    """What is wrong with one image_builds item, each message naming the image, the variable and the fix."""
    if not isinstance(image, dict):
        return [f"image_builds: every item must be a mapping (name, elements, ...), got {image!r}"]
    name = image.get("name")
    if not isinstance(name, str) or not name.strip():
        return [f"image_builds item {image!r} has no name"]
    problems = []
    elements = image.get("elements")
    if not isinstance(elements, list) or not elements or not all(isinstance(e, str) and e for e in elements):
        problems.append(f"image {name}: elements must be a non-empty list of diskimage-builder element names "
                        "(e.g. [debian-minimal, vm, ogc-nvidia-driver, ogc-docker-mtu]), got "
                        f"{elements!r}")
        return problems
    if image.get("disk_format", "qcow2") not in ("qcow2", "raw"):
        problems.append(f"image {name}: disk_format must be qcow2 or raw, got {image.get('disk_format')!r}")
    for key in ("release", "mirror", "security_mirror"):
        if image.get(key) is not None and not isinstance(image.get(key), str):
            problems.append(f"image {name}: {key} must be a string, got {image.get(key)!r}")
    if NVIDIA_ELEMENT not in elements:
        return problems
    distro = image_distro(elements)
    if distro is None:
        problems.append(f"image {name}: the {NVIDIA_ELEMENT} element supports Debian and Ubuntu images; name one "
                        f"of the elements {', '.join(n for names in DISTRO_ELEMENTS.values() for n in names)} "
                        f"(elements: {', '.join(elements)})")
        return problems
    pins = image_pins(image, default_branch, default_version)
    branch, version = pins["branch"], pins["version"]
    if not isinstance(branch, str) or not _BRANCH.match(branch):
        problems.append(f"image {name}: the NVIDIA driver branch must be digits as a string (image_nvidia_branch, "
                        f"or the image's nvidia_branch; e.g. \"535\"), got {branch!r}")
        return problems
    driver = nvidia_packages(distro, branch)[0]
    if not isinstance(version, str) or not version.strip():
        problems.append(f"image {name}: the NVIDIA driver is not pinned: set image_nvidia_version (or the image's "
                        f"nvidia_version) to the exact version of {driver} in the {distro} archive "
                        f"(apt-cache madison {driver} on {image_release(image)}): an unpinned driver drifts")
    elif version != ANY_VERSION and not _VERSION.match(version):
        problems.append(f"image {name}: {version!r} is not a Debian package version (nvidia_version / "
                        f"image_nvidia_version)")
    elif version != ANY_VERSION and version.split(":")[-1].split(".")[0] != branch:
        problems.append(f"image {name}: the pinned version {version} of {driver} is not of the driver branch "
                        f"{branch} (image_nvidia_branch / the image's nvidia_branch): change both together")
    return problems


def with_driver_components(line: str) -> str:
    """A one-line APT source (``deb [options] URI SUITE COMPONENT...``) with the components the Debian driver
    needs, when it has ``main``; any other line as it is. The element applies the same rule in the image."""
    words = line.split()
    if not words or words[0] not in ("deb", "deb-src") or "main" not in words:
        return line
    return " ".join(words + [c for c in DEBIAN_DRIVER_COMPONENTS if c not in words])


def dib_sources(conf: str) -> list[str]:
    """The one-line sources of a ``DIB_APT_SOURCES_CONF`` value (lines ``name:deb URI SUITE COMPONENT...``)."""
    out = []
    for line in conf.splitlines():
        line = line.strip()
        if not line:
            continue
        _name, sep, value = line.partition(":")
        if not sep or not value.strip().startswith(("deb ", "deb-src ")):
            raise ValueError(f"not a DIB_APT_SOURCES_CONF line (name:deb URI SUITE COMPONENT...): {line!r}")
        out.append(" ".join(value.split()))
    return out


def archive_sources(distro: str, release: str, dib_sources_conf: str = "", mirror: str = "") -> list[str]:
    """The APT sources the image installs its NVIDIA packages from.

    Debian: diskimage-builder's own sources for the image (``dib_sources_conf``), with the driver's components.
    Ubuntu: the release, -updates and -security pockets of ``mirror`` with main, restricted, universe and
    multiverse (the cloud image's own layout)."""
    if distro == "debian":
        sources = [with_driver_components(line) for line in dib_sources(dib_sources_conf)]
        if not sources:
            raise ValueError("diskimage-builder gave no APT sources for the Debian image (DIB_APT_SOURCES_CONF)")
        return sources
    if distro == "ubuntu":
        if not mirror:
            raise ValueError("no Ubuntu mirror (DIB_DISTRIBUTION_MIRROR) for the archive check")
        return [f"deb {mirror} {suite} {' '.join(UBUNTU_COMPONENTS)}"
                for suite in (release, f"{release}-updates", f"{release}-security")]
    raise ValueError(f"no archive rule for distribution {distro!r}")


def archive_problems(name: str, pins: dict, versions: dict, sources) -> list[str]:
    """A message per pinned package the archive does not have (``any``: at least one version).

    ``pins``: {package: version}; ``versions``: {package: [versions in the archive]}."""
    where = "; ".join(sources)
    problems = []
    for package, version in pins.items():
        have = list(versions.get(package) or [])
        if not have:
            problems.append(f"image {name}: the archive has no package {package} ({where})")
        elif version != ANY_VERSION and version not in have:
            problems.append(f"image {name}: {package} {version} is not in the archive ({where}); it has "
                            f"{', '.join(have)}: set the image's nvidia_version (or image_nvidia_version) to one "
                            "of them")
    return problems


def build_environment(image: dict, default_branch, default_version, docker_mtu, datasources) -> dict:
    """The diskimage-builder environment of one image's build (values as strings)."""
    distro = image_distro(image.get("elements"))
    pins = image_pins(image, default_branch, default_version)
    env = {
        "DIB_RELEASE": image_release(image) or DEFAULT_RELEASE["ubuntu"],
        "DIB_OGC_NVIDIA_BRANCH": str(pins["branch"]),
        "DIB_OGC_NVIDIA_VERSION": str(pins["version"] or ""),
        "DIB_OGC_DOCKER_MTU": str(docker_mtu),
        "DIB_CLOUD_INIT_DATASOURCES": str(datasources),
    }
    if image.get("mirror"):
        env["DIB_DISTRIBUTION_MIRROR"] = image["mirror"]
    if image.get("security_mirror") and distro == "debian":
        env["DIB_DEBIAN_SECURITY_MIRROR"] = image["security_mirror"]
    return env
