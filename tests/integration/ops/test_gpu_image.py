"""The GPU guest image, really built and booted.

The demo inventory's Debian image (``debian-12-nvidia``) is built by ``playbooks/images.yml`` with this machine as
the build host (real ``disk-image-create``, our elements, Debian's pinned NVIDIA driver; cached by its inputs:
tests/helpers/gpu_image.py), then booted under qemu (TCG, q35 as ``hw_machine_type`` says, a config drive as Nova
writes one, the SSH port forwarded from 127.0.0.1 only). The guest reports over its second serial port; the
checks are here. Bad input is refused before any build starts. The upload of the same image and a server booted
from it through a GPU flavor are in test_images.py (they share the compute test cloud).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.images import gpu_images as rules
from ogc_testlib import ROOT, collection_plugin, output, run_playbook, words

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
import gpu_image  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


@pytest.fixture(scope="module")
def built():
    try:
        return gpu_image.ensure()
    except gpu_image.ImageBuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def booted(built, tmp_path_factory):
    machine = upload_properties(built)["hw_machine_type"]
    try:
        result = gpu_image.boot(built.image, str(tmp_path_factory.mktemp("gpu-image-boot")), machine=machine)
    except gpu_image.ImageBuildError as exc:
        pytest.fail(f"booting {built.image}: {exc}", pytrace=False)
    print(f"\ngpu image boot: {result['wall_s']} s wall, {result['cpu_s']} s qemu CPU; SSH banner after "
          f"{result['ssh_banner_s']} s; console {result['console']}")
    return result


def upload_properties(build) -> dict:
    """The properties the upload gives the image: the role's defaults, then the image's own (one rule, the filter)."""
    reports = collection_plugin("filter", "ops_reports")
    with open(os.path.join(ROOT, "roles", "gpu_images", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)["gpu_images_default_properties"]
    image = build.variables["image_builds"][0]
    item = reports.ogc_image_upload([image, {"exists": True, "checksum": "0" * 64, "path": build.image}], defaults)
    return item["properties"]


def fact(booted, name):
    assert name in booted["facts"], f"the guest did not report {name}; console {booted['console']}"
    return booted["facts"][name]


# ---- the build ----

def test_the_role_built_the_image(built):
    state = built.state()
    first, last = state.get("first_build"), state["runs"][-1]
    assert first and first["rc"] == 0 and first["built"], state
    print(f"\nfirst build: {first['wall_s']} s at load {first['load_before']}, {first['image_bytes']} bytes; "
          f"this run: {last['wall_s']} s, changed={last['changed']}")
    if not last["built"]:
        # The image was cached: the role's run over it changed nothing (the build is skipped, the rest idempotent).
        assert last["changed"] == 0, f"a run over the built image changed something: {last['log']}"
    info = json.loads(subprocess.run(["qemu-img", "info", "--output", "json", built.image], capture_output=True,
                                     text=True, check=True).stdout)
    assert info["format"] == "qcow2"
    with open(built.dib_log, encoding="utf-8", errors="replace") as handle:
        log = handle.read()
    image = built.variables["image_builds"][0]
    # disk-image-create ran our elements with the pins from the inventory
    for element in image["elements"] + ["cloud-init-datasources"]:
        assert element in log, element
    assert f"Unpacking nvidia-driver ({image['nvidia_version']})" in log
    assert "ogc-nvidia-driver: /lib/modules/" in log  # the module check of post-install.d passed


# ---- the booted image ----

def test_cloud_init_finished_with_our_datasources(booted):
    status = fact(booted, "cloud-init-status")
    assert status["rc"] == 0 and "status: done" in status["output"], status
    result = json.loads(fact(booted, "cloud-init-result")["output"])["v1"]
    assert result["errors"] == [], result
    assert result["datasource"].startswith("DataSourceConfigDrive"), result
    datasources = fact(booted, "cloud-init-datasource-list")["output"]
    assert yaml.safe_load(datasources)["datasource_list"] == ["ConfigDrive", "OpenStack", "None"], datasources


def test_nouveau_is_not_loaded_and_blacklisted_in_the_initramfs(booted):
    modules = [line.split()[0] for line in fact(booted, "modules")["output"].splitlines()]
    assert "nouveau" not in modules and "nvidiafb" not in modules, modules
    assert "blacklist nouveau" in fact(booted, "modprobe-blacklist")["output"].splitlines()
    initramfs = fact(booted, "initramfs-modprobe")
    assert initramfs["rc"] == 0, initramfs
    lines = {line.split(":", 1)[1] for line in initramfs["output"].splitlines() if ":" in line}
    assert {"blacklist nouveau", "blacklist nvidiafb", "options nouveau modeset=0"} <= lines, initramfs["output"]


def test_the_nvidia_module_is_built_for_the_running_kernel(booted):
    kernel = fact(booted, "kernel")["output"].strip()
    files = fact(booted, "nvidia-module-files")["output"].split()
    assert f"/lib/modules/{kernel}/updates/dkms/nvidia-current.ko" in files, files
    name, vermagic, version = fact(booted, "nvidia-module-info")["output"].splitlines()
    assert name == "nvidia" and vermagic.split()[0] == kernel, (name, vermagic)
    image = booted_image()
    assert image["nvidia_version"].startswith(version + "-"), (version, image["nvidia_version"])
    assert f"{kernel}, x86_64: installed" in fact(booted, "dkms-status")["output"]
    # The kernel accepts the module (a module of another kernel fails with "Invalid module format"); with no
    # NVIDIA GPU, its probe finds no device.
    load = fact(booted, "modprobe-nvidia")
    assert load["rc"] != 0 and "No such device" in load["output"], load


def test_nvidia_smi_is_installed_and_says_it_cannot_reach_the_driver(booted):
    assert fact(booted, "nvidia-smi-path")["output"].strip().endswith("/bin/nvidia-smi")  # on the PATH
    smi = fact(booted, "nvidia-smi")
    assert smi["rc"] != 0, smi
    assert "couldn't communicate with the NVIDIA driver" in smi["output"], smi


def test_the_driver_is_pinned_and_held(booted):
    image = booted_image()
    versions = dict(line.split() for line in fact(booted, "nvidia-packages")["output"].splitlines())
    pins = {package: image["nvidia_version"] for package in rules.nvidia_packages("debian", image["nvidia_branch"])}
    assert {p: versions.get(p) for p in pins} == pins, versions
    assert versions["nvidia-kernel-dkms"] == image["nvidia_version"]
    assert set(pins) <= set(fact(booted, "apt-holds")["output"].split())
    preferences = fact(booted, "apt-preferences")["output"]
    assert f"Pin: version {image['nvidia_version']}" in preferences and "src:nvidia-graphics-drivers" in preferences
    # The image's sources are the ones the preflight checked the pin against (the collection's images/gpu_images.py).
    sources = sorted(line for line in fact(booted, "apt-sources")["output"].splitlines() if line.strip())
    assert sources == sorted(booted_checked_sources()), sources


def test_docker_mtu_and_the_machine_type(booted, built):
    assert json.loads(fact(booted, "docker-daemon-json")["output"])["mtu"] == 1450
    properties = upload_properties(built)
    assert properties["hw_machine_type"] == "q35"
    assert "Q35" in fact(booted, "dmi-product")["output"], fact(booted, "dmi-product")


def test_the_network_ssh_and_the_root_disk(booted):
    addresses = fact(booted, "addresses")["output"]
    assert "10.0.2.15/" in addresses, addresses  # qemu's DHCP, configured by cloud-init from network_data.json
    # The image carries no resolver of the build host's: the server's DNS is what its DHCP lease offered (qemu's
    # restricted network offers none, so it stays empty here).
    guest = [line.split()[1] for line in fact(booted, "resolv-conf")["output"].splitlines()
             if line.startswith("nameserver ")]
    offered = re.findall(r"option domain-name-servers ([^;]+);", fact(booted, "dhcp-leases")["output"])
    assert guest == [server.strip() for servers in offered[-1:] for server in servers.split(",")], (guest, offered)
    with open("/etc/resolv.conf", encoding="utf-8") as handle:
        host = {line.split()[1] for line in handle if line.startswith("nameserver ")}
    assert not host & set(guest), (host, guest)
    # cloud-init's growpart grew the root file system to the (20 GiB) disk the server got
    assert int(fact(booted, "root-size")["output"].split()[-1]) > 15 * 2**30, fact(booted, "root-size")
    assert fact(booted, "sshd")["output"].strip() == "active"
    assert booted["ssh_banner"].startswith("SSH-2.0-OpenSSH"), booted["ssh_banner"]


def test_only_the_driver_without_a_gpu_fails_at_boot(booted):
    """Debian's driver loads nvidia-drm at boot (systemd-modules-load); with no GPU that is the one failed unit.

    It fails one of two ways: the driver's probe finds no device ("No such device"), or, on an emulated CPU
    starved by other work, loading the 60 MB module outlasts systemd's 90 s start timeout and the unit is stopped
    first. The driver's own answer is then the one the report's modprobe got (test_the_nvidia_module_is_built_for_
    the_running_kernel). Any other failure fails the test."""
    failed = [line.split()[0] for line in fact(booted, "failed-units")["output"].splitlines() if line.strip()]
    assert failed in ([], ["systemd-modules-load.service"]), fact(booted, "failed-units")
    if failed:
        journal = fact(booted, "modules-load-journal")["output"]
        no_device = "could not insert 'nvidia_current': No such device" in journal
        timed_out = "systemd-modules-load.service: start operation timed out" in journal
        assert no_device or timed_out, journal
        if timed_out:
            load = fact(booted, "modprobe-nvidia")
            assert load["rc"] != 0 and "could not insert 'nvidia_current': No such device" in load["output"], load


# ---- helpers reading the declaration ----

def booted_image() -> dict:
    return gpu_image.declared_image()


def booted_checked_sources() -> list:
    """What the preflight's archive check read the pin from: diskimage-builder's own Debian sources (its
    debian-minimal environment, sourced from the build's venv) with the driver's components (our rule)."""
    image = gpu_image.build_vars()["image_builds"][0]
    return rules.archive_sources("debian", image["release"], dib_sources_conf=gpu_image.dib_debian_sources())


# ---- bad input: refused with the image, the variable and the fix named, before any build starts ----

def run_role(tmp_path, images, **variables):
    """playbooks/images.yml on this machine as the build host, with these images and a build directory of its own
    (diskimage-builder's venv is the cached build's)."""
    settings = dict(gpu_image.build_vars(), image_builds=images, gpu_images_build_dir=str(tmp_path / "build"))
    settings.update(variables)
    proc = run_playbook(*gpu_image.playbook(str(tmp_path), settings), timeout=900)
    return proc.returncode, words(output(proc))


def image_like(**changes):
    """The image the build uses (the demo's, with this machine's Debian mirrors), changed."""
    return dict(gpu_image.build_vars()["image_builds"][0], **changes)


def test_an_unpinned_driver_or_a_pin_of_another_branch_is_refused(tmp_path):
    rc, out = run_role(tmp_path, [image_like(name="unpinned", nvidia_version=""),
                                  image_like(name="other-branch", nvidia_branch="550"),
                                  image_like(name="centos-nvidia", elements=["centos", "vm", "ogc-nvidia-driver"])])
    assert rc != 0
    assert ("image unpinned: the NVIDIA driver is not pinned: set image_nvidia_version (or the image's "
            "nvidia_version) to the exact version of nvidia-driver in the debian archive") in out, out
    assert ("image other-branch: the pinned version 535.309.01-0+deb12u1 of nvidia-driver is not of the driver "
            "branch 550") in out, out
    assert "image centos-nvidia: the ogc-nvidia-driver element supports Debian and Ubuntu images" in out, out
    assert not (tmp_path / "build").exists(), "the preflight let the build host be prepared"


def test_a_version_the_archive_lacks_or_a_missing_element_is_refused_before_the_build(built, tmp_path):
    rc, out = run_role(tmp_path, [image_like(name="not-in-archive", nvidia_version="535.1-1"),
                                  image_like(name="typo", elements=["debian-minimal", "vm", "ogc-docker-mtus"])])
    assert rc != 0
    versions = gpu_image.declared_image()["nvidia_version"]
    assert "image not-in-archive: nvidia-driver 535.1-1 is not in the archive (deb " in out, out
    assert f"it has {versions}" in out or f", {versions}" in out, out  # the archive's versions are listed
    assert "image typo: Element 'ogc-docker-mtus' not found" in out, out
    assert "Build each image with disk-image-create" not in out, out  # the loop failed before the build task
    assert not list((tmp_path / "build").glob("*.log")) and not list((tmp_path / "build" / "tmp").iterdir())


@pytest.mark.parametrize("become, message", [
    ({"ansible_become_user": "ogc-no-such-user", "ansible_become_method": "su"},
     "image build host ogc-image-builder: cannot run as root there"),
    ({"ansible_become_user": "nobody", "ansible_become_method": "su", "ansible_become_flags": "-s /bin/sh"},
     "image build host ogc-image-builder: the build would run as nobody (uid 65534), not root"),
])
def test_a_build_host_without_root_is_refused(tmp_path, become, message):
    rc, out = run_role(tmp_path, [image_like()], **become)
    assert rc != 0 and message in out, out
    assert not (tmp_path / "build").exists()
