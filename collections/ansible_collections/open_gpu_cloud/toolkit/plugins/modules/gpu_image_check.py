#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Check a declared GPU image before it is built: its elements, and its NVIDIA pin in the image's archive."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_image_check
short_description: Check a GPU image before diskimage-builder builds it (elements, the driver pin in the archive)
description:
  - Resolves the image's elements with diskimage-builder's own dependency resolution (its
    C(element_dependencies), run by the Python of C(dib_venv)) over C(elements_path) and diskimage-builder's
    elements, as C(disk-image-create) will; a missing element fails naming the image and the element.
  - With C(nvidia_pins), finds the APT sources the image installs the driver from (Debian, the sources
    diskimage-builder writes, from its C(debian-minimal) element's environment with C(environment) applied,
    plus the components the C(ogc-nvidia-driver) element adds; Ubuntu, the release's three pockets), reads
    their package lists into a scratch directory (C(apt-get update) with its own state, lists and cache;
    the host's APT state is not touched) and fails when a pinned version is not there, listing the
    versions the archive has.
  - Writes nothing outside a temporary directory it removes; runs in check mode as in a real run.
version_added: "0.1.0"
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
options:
  architecture:
    description: Debian architecture of the image.
    type: str
    default: amd64
  dib_venv:
    description: The virtualenv diskimage-builder is installed in.
    type: path
    required: true
  distro:
    description: The image's distribution (C(debian) or C(ubuntu)); required with C(nvidia_pins).
    type: str
    choices: [debian, ubuntu]
  elements:
    description: The elements the build names (the role adds C(cloud-init-datasources), and C(block-device-mbr)
      is what C(disk-image-create) adds beside C(vm)).
    type: list
    elements: str
    required: true
  elements_path:
    description: Directories of the repository's elements (C(ELEMENTS_PATH)), colon-separated.
    type: str
    required: true
  environment:
    description: The build's C(DIB_*) variables (release, mirrors) as the build gets them.
    type: dict
    default: {}
  keyring:
    description:
      - Keyring the archive is signed with (C(signed-by)). Default, Debian, the keys APT trusts on the build host
        (Debian's C(debian-archive-keyring)); Ubuntu, C(/usr/share/keyrings/ubuntu-archive-keyring.gpg) where the
        build host has it (an Ubuntu host), else the lists are read unverified, with a warning (the check reads
        only version numbers; the image's own APT verifies what it installs).
    type: path
  name:
    description: The image's name (for messages).
    type: str
    required: true
  nvidia_pins:
    description: Package to exact version (C(any) - only that the package exists) the image installs.
    type: dict
    default: {}
  release:
    description: The image's release (C(DIB_RELEASE)); required with C(nvidia_pins).
    type: str
  timeout:
    description: Seconds for reading the archive's package lists.
    type: int
    default: 300
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only]
attributes:
  check_mode:
    description: Reads only; the same checks run in check mode.
"""

EXAMPLES = r"""
- name: Check the image before the build
  open_gpu_cloud.toolkit.gpu_image_check:
    name: debian-12-nvidia
    elements: [debian-minimal, vm, ogc-nvidia-driver, ogc-docker-mtu, cloud-init-datasources]
    elements_path: /var/lib/ogc-images/elements
    dib_venv: /opt/ogc-dib
    distro: debian
    release: bookworm
    environment: {DIB_RELEASE: bookworm}
    nvidia_pins: {nvidia-driver: 535.261.03-1, nvidia-smi: 535.261.03-1}
"""

RETURN = r"""
elements:
  description: Every element the build will run, dependencies included (diskimage-builder's answer).
  returned: always
  type: list
  elements: str
sources:
  description: The APT sources the driver's versions were read from (empty without C(nvidia_pins)).
  returned: always
  type: list
  elements: str
versions:
  description: Package to the versions the archive has, newest first as C(apt-cache madison) lists them.
  returned: always
  type: dict
"""

import json
import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.images.gpu_images import (
    archive_problems, archive_sources)

# Run by the Python of diskimage-builder's venv: its own dependency resolution over our elements and its own.
_EXPAND = """\
import json, os, sys
from diskimage_builder import element_dependencies as ed
dib = os.path.join(os.path.dirname(ed.__file__), 'elements')
try:
    found = ed.get_elements(sys.argv[2:], paths=sys.argv[1] + ':' + dib)
except Exception as exc:
    print(json.dumps({'error': str(exc), 'dib_elements': dib}))
else:
    print(json.dumps({'elements': sorted(name for name, _path in found), 'dib_elements': dib}))
"""
# DIB's own Debian sources: its debian-minimal element's environment, with the build's variables.
_DEBIAN_SOURCES = 'source "$1" >/dev/null && printf "%s" "$DIB_APT_SOURCES_CONF"'
_UBUNTU_MIRROR = 'source "$1" >/dev/null && printf "%s" "$DIB_DISTRIBUTION_MIRROR"'
UBUNTU_KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
# The diskimage-builder environment file that sets each distribution's mirror (and Debian's sources).
DIB_ENVIRONMENT = {"debian": ("debian-minimal", "environment.d", "10-debian-minimal.bash"),
                   "ubuntu": ("ubuntu-common", "environment.d", "10-ubuntu-distro-name.bash")}


def _run(module, argv, env=None, timeout=120):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        module.fail_json(msg=f"gpu_image_check ({module.params['name']}): {argv[0]} failed: {exc}")
    return proc


def expand_elements(module):
    python = os.path.join(module.params["dib_venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        module.fail_json(msg=f"gpu_image_check: no diskimage-builder venv at {module.params['dib_venv']} "
                             "(gpu_images_dib_venv): the role installs it before this check")
    elements = list(module.params["elements"])
    if "vm" in elements and not any(e.startswith("block-device-") for e in elements):
        elements.append("block-device-mbr")  # disk-image-create's own default beside vm
    proc = _run(module, [python, "-c", _EXPAND, module.params["elements_path"], *elements])
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg=f"gpu_image_check ({module.params['name']}): diskimage-builder's element resolution "
                             f"failed: {proc.stderr.strip()[-2000:]}")
    if "error" in out:
        module.fail_json(msg=f"image {module.params['name']}: {out['error']} (elements: "
                             f"{', '.join(module.params['elements'])}; looked in {module.params['elements_path']} "
                             f"and diskimage-builder's {out['dib_elements']}): correct the image's elements")
    return out


def image_sources(module, dib_elements):
    distro, release = module.params["distro"], module.params["release"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ARCH": module.params["architecture"]}
    env.update({k: str(v) for k, v in module.params["environment"].items()})
    env["DIB_RELEASE"] = release
    script = os.path.join(dib_elements, *DIB_ENVIRONMENT[distro])
    proc = _run(module, ["bash", "-c", _DEBIAN_SOURCES if distro == "debian" else _UBUNTU_MIRROR, "dib-env",
                         script], env=env)
    if proc.returncode:
        module.fail_json(msg=f"gpu_image_check ({module.params['name']}): sourcing {script} failed: "
                             f"{proc.stderr.strip()}")
    try:
        if distro == "debian":
            return archive_sources("debian", release, dib_sources_conf=proc.stdout)
        return archive_sources("ubuntu", release, mirror=proc.stdout.strip())
    except ValueError as exc:
        module.fail_json(msg=f"image {module.params['name']}: {exc}")
    return []  # not reached


def archive_versions(module, sources, packages):
    """{package: [versions]} read from `sources` in a scratch APT state."""
    keyring, option = module.params["keyring"], None
    if keyring:
        if not os.path.exists(keyring):
            module.fail_json(msg=f"gpu_image_check ({module.params['name']}): the archive keyring {keyring} is "
                                 "missing on the build host")
        option = f"signed-by={keyring}"
    elif module.params["distro"] == "ubuntu":
        if os.path.exists(UBUNTU_KEYRING):
            option = f"signed-by={UBUNTU_KEYRING}"
        else:
            # A Debian build host has no Ubuntu keyring (bookworm has no ubuntu-keyring package). The check reads
            # only version numbers; the image's own APT verifies every package it installs with its own keyring.
            option = "trusted=yes"
            module.warn(f"gpu_image_check ({module.params['name']}): {UBUNTU_KEYRING} is missing on the build host: "
                        "the Ubuntu archive's package lists are read without checking their signature")
    scratch = tempfile.mkdtemp(prefix="ogc-image-archive.")
    try:
        for sub in ("lists/partial", "cache/archives/partial", "etc/preferences.d"):
            os.makedirs(os.path.join(scratch, sub))
        with open(os.path.join(scratch, "etc", "sources.list"), "w", encoding="utf-8") as handle:
            for line in sources:
                if option:
                    kind, rest = line.split(" ", 1)
                    line = f"{kind} [{option}] {rest}"
                handle.write(line + "\n")
        options = []
        for key, value in (("Dir::Etc::sourcelist", os.path.join(scratch, "etc", "sources.list")),
                           ("Dir::Etc::sourceparts", "-"),
                           ("Dir::Etc::preferencesparts", os.path.join(scratch, "etc", "preferences.d")),
                           ("Dir::State::lists", os.path.join(scratch, "lists")),
                           ("Dir::State::status", "/dev/null"),
                           ("Dir::Cache", os.path.join(scratch, "cache")),
                           ("APT::Architecture", module.params["architecture"]),
                           ("APT::Architectures", module.params["architecture"]),
                           ("APT::Sandbox::User", "root"),
                           ("Acquire::Languages", "none"),
                           ("Acquire::Retries", "3")):
            options += ["-o", f"{key}={value}"]
        env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
        proc = _run(module, ["apt-get", "-q", *options, "update"], env=env, timeout=module.params["timeout"])
        if proc.returncode or "\nE: " in "\n" + proc.stderr or "\nW: Failed to fetch" in "\n" + proc.stderr:
            module.fail_json(msg=f"image {module.params['name']}: cannot read the archive's package lists "
                                 f"({'; '.join(sources)}): {(proc.stderr or proc.stdout).strip()[-1500:]}")
        proc = _run(module, ["apt-cache", *options, "madison", *packages], env=env)
        versions = {package: [] for package in packages}
        for line in proc.stdout.splitlines():
            fields = [f.strip() for f in line.split("|")]
            if len(fields) >= 3 and fields[0] in versions and fields[1] not in versions[fields[0]]:
                versions[fields[0]].append(fields[1])
        return versions
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    module = AnsibleModule(
        argument_spec={
            "architecture": {"type": "str", "default": "amd64"},
            "dib_venv": {"type": "path", "required": True},
            "distro": {"type": "str", "choices": ["debian", "ubuntu"]},
            "elements": {"type": "list", "elements": "str", "required": True},
            "elements_path": {"type": "str", "required": True},
            "environment": {"type": "dict", "default": {}},
            "keyring": {"type": "path"},
            "name": {"type": "str", "required": True},
            "nvidia_pins": {"type": "dict", "default": {}},
            "release": {"type": "str"},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    pins = {str(k): str(v) for k, v in module.params["nvidia_pins"].items()}
    # (Not a required_if: that compares the value with True, which a dict of pins never equals.)
    if pins and (not module.params["distro"] or not module.params["release"]):
        module.fail_json(msg=f"gpu_image_check ({module.params['name']}): nvidia_pins needs distro and release")
    expanded = expand_elements(module)
    result = {"changed": False, "elements": expanded["elements"], "sources": [], "versions": {}}
    if pins:
        sources = image_sources(module, expanded["dib_elements"])
        versions = archive_versions(module, sources, sorted(pins))
        result.update(sources=sources, versions=versions)
        problems = archive_problems(module.params["name"], pins, versions, sources)
        if problems:
            module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
