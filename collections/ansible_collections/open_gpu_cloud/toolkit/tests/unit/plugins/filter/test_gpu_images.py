"""plugins/module_utils/images/gpu_images.py (the rules of a GPU image build) and plugins/filter/gpu_images.py (the
gpu_images role's view)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.filter import gpu_images as filters
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.images import gpu_images as rules

DEBIAN = {"name": "debian-12-nvidia", "elements": ["debian-minimal", "vm", "ogc-nvidia-driver", "ogc-docker-mtu"],
          "release": "bookworm", "nvidia_branch": "535", "nvidia_version": "535.309.01-0+deb12u1"}
UBUNTU = {"name": "ubuntu-2204-nvidia", "elements": ["ubuntu", "vm", "ogc-nvidia-driver", "ogc-docker-mtu"],
          "release": "jammy"}
PLAIN = {"name": "ubuntu-2204", "elements": ["ubuntu", "vm", "ogc-docker-mtu"]}
UBUNTU_PIN = "535.274.02-0ubuntu0.22.04.1"
DIB_CONF = ("default:deb http://mirror.example/debian bookworm main\n"
            "updates:deb http://mirror.example/debian bookworm-updates main\n"
            "security:deb http://mirror.example/debian-security bookworm-security main\n")


@pytest.mark.parametrize("elements, distro", [
    (["debian-minimal", "vm"], "debian"), (["debian"], "debian"), (["ubuntu", "vm"], "ubuntu"),
    (["ubuntu-minimal"], "ubuntu"), (["centos", "vm"], None), (["debian", "ubuntu"], None), ("debian", None),
])
def test_image_distro(elements, distro):
    assert rules.image_distro(elements) == distro


def test_nvidia_packages_per_distribution():
    assert rules.nvidia_packages("debian", "535") == ["nvidia-driver", "nvidia-smi"]
    assert rules.nvidia_packages("ubuntu", "550") == ["nvidia-driver-550-server", "nvidia-utils-550-server"]
    with pytest.raises(ValueError, match="supports Debian and Ubuntu images, not 'centos'"):
        rules.nvidia_packages("centos", "535")


def test_declared_images_have_no_problems():
    assert filters.ogc_image_problems([DEBIAN, UBUNTU, PLAIN], "535", UBUNTU_PIN) == []


@pytest.mark.parametrize("image, default_version, message", [
    (dict(DEBIAN, nvidia_version=""), UBUNTU_PIN,
     "image debian-12-nvidia: the NVIDIA driver is not pinned: set image_nvidia_version (or the image's "
     "nvidia_version) to the exact version of nvidia-driver in the debian archive (apt-cache madison nvidia-driver "
     "on bookworm): an unpinned driver drifts"),
    (UBUNTU, "", "image ubuntu-2204-nvidia: the NVIDIA driver is not pinned: set image_nvidia_version (or the "
                 "image's nvidia_version) to the exact version of nvidia-driver-535-server in the ubuntu archive "
                 "(apt-cache madison nvidia-driver-535-server on jammy)"),
    (dict(DEBIAN, nvidia_branch="550"), "",
     "image debian-12-nvidia: the pinned version 535.309.01-0+deb12u1 of nvidia-driver is not of the driver branch "
     "550"),
    (dict(DEBIAN, nvidia_branch=535), "", "the NVIDIA driver branch must be digits as a string"),
    (dict(DEBIAN, nvidia_version="latest please"), "", "'latest please' is not a Debian package version"),
    (dict(DEBIAN, elements=["centos", "vm", "ogc-nvidia-driver"]), "",
     "image debian-12-nvidia: the ogc-nvidia-driver element supports Debian and Ubuntu images"),
    (dict(DEBIAN, elements=[]), "", "image debian-12-nvidia: elements must be a non-empty list"),
    (dict(DEBIAN, elements="debian-minimal vm"), "", "elements must be a non-empty list"),
    (dict(DEBIAN, disk_format="vmdk"), "", "disk_format must be qcow2 or raw, got 'vmdk'"),
    (dict(DEBIAN, mirror=["http://x"]), "", "image debian-12-nvidia: mirror must be a string"),
    ({"elements": ["ubuntu"]}, "", "has no name"),
    ("ubuntu", "", "every item must be a mapping"),
])
def test_image_problems_name_the_image_the_variable_and_the_fix(image, default_version, message):
    problems = filters.ogc_image_problems([image], "535", default_version)
    assert any(message in p for p in problems), problems


def test_any_version_and_epochs_are_accepted_and_duplicates_are_not():
    assert filters.ogc_image_problems([dict(DEBIAN, nvidia_version="any")], "535", "") == []
    assert filters.ogc_image_problems([dict(DEBIAN, nvidia_version="1:535.1-1")], "535", "") == []
    assert filters.ogc_image_problems([PLAIN, PLAIN], "535", "") == [
        "image ubuntu-2204 is declared twice in image_builds: names must be unique"]
    assert filters.ogc_image_problems({"name": "x"}, "535", "") == ["image_builds must be a list of images, got dict"]


def test_build_of_a_debian_image():
    build = filters.ogc_image_build(dict(DEBIAN, mirror="http://m/debian", security_mirror="http://m/sec"), "535",
                                    UBUNTU_PIN, 1450, "ConfigDrive, OpenStack", {"DIB_NO_TMPFS": "1",
                                                                                 "DIB_RELEASE": "sid"})
    assert build == {
        "name": "debian-12-nvidia", "disk_format": "qcow2", "distro": "debian", "release": "bookworm",
        "elements": ["debian-minimal", "vm", "ogc-nvidia-driver", "ogc-docker-mtu", "cloud-init-datasources"],
        "nvidia_pins": {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-smi": "535.309.01-0+deb12u1"},
        "environment": {"DIB_NO_TMPFS": "1", "DIB_RELEASE": "bookworm", "DIB_OGC_NVIDIA_BRANCH": "535",
                        "DIB_OGC_NVIDIA_VERSION": "535.309.01-0+deb12u1", "DIB_OGC_DOCKER_MTU": "1450",
                        "DIB_CLOUD_INIT_DATASOURCES": "ConfigDrive, OpenStack",
                        "DIB_DISTRIBUTION_MIRROR": "http://m/debian", "DIB_DEBIAN_SECURITY_MIRROR": "http://m/sec"}}


def test_build_of_ubuntu_images_keeps_the_role_defaults():
    build = filters.ogc_image_build(UBUNTU, "535", UBUNTU_PIN, 1450, "ConfigDrive, OpenStack")
    assert build["nvidia_pins"] == {"nvidia-driver-535-server": UBUNTU_PIN, "nvidia-utils-535-server": UBUNTU_PIN}
    assert build["environment"]["DIB_RELEASE"] == "jammy" and "DIB_DISTRIBUTION_MIRROR" not in build["environment"]
    plain = filters.ogc_image_build(dict(PLAIN, release=None), "535", "", 1450, "ConfigDrive, OpenStack")
    assert plain["nvidia_pins"] == {} and plain["release"] == "jammy"
    with pytest.raises(AnsibleFilterError, match="ogc_image_build: image ubuntu-2204-nvidia: the NVIDIA driver is "
                                                 "not pinned"):
        filters.ogc_image_build(UBUNTU, "535", "", 1450, "ConfigDrive, OpenStack")


def test_archive_sources():
    assert rules.archive_sources("debian", "bookworm", dib_sources_conf=DIB_CONF) == [
        "deb http://mirror.example/debian bookworm main contrib non-free non-free-firmware",
        "deb http://mirror.example/debian bookworm-updates main contrib non-free non-free-firmware",
        "deb http://mirror.example/debian-security bookworm-security main contrib non-free non-free-firmware"]
    assert rules.archive_sources("ubuntu", "jammy", mirror="http://u/ubuntu") == [
        "deb http://u/ubuntu jammy main restricted universe multiverse",
        "deb http://u/ubuntu jammy-updates main restricted universe multiverse",
        "deb http://u/ubuntu jammy-security main restricted universe multiverse"]
    for bad, message in (("", "gave no APT sources"), ("default:http://x bookworm main", "not a DIB_APT_SOURCES_CONF")):
        with pytest.raises(ValueError, match=message):
            rules.archive_sources("debian", "bookworm", dib_sources_conf=bad)
    with pytest.raises(ValueError, match="no Ubuntu mirror"):
        rules.archive_sources("ubuntu", "jammy")
    with pytest.raises(ValueError, match="no archive rule"):
        rules.archive_sources("centos", "9")


def test_archive_problems():
    sources = ["deb http://m bookworm main"]
    versions = {"nvidia-driver": ["535.309.01-0+deb12u1", "535.261.03-1"], "nvidia-smi": ["535.309.01-0+deb12u1"]}
    assert rules.archive_problems("d", {"nvidia-driver": "535.261.03-1", "nvidia-smi": "any"}, versions,
                                  sources) == []
    assert rules.archive_problems("d", {"nvidia-driver": "535.1-1", "nvidia-smi": "535.1-1", "nvidia-x": "any"},
                                  versions, sources) == [
        "image d: nvidia-driver 535.1-1 is not in the archive (deb http://m bookworm main); it has "
        "535.309.01-0+deb12u1, 535.261.03-1: set the image's nvidia_version (or image_nvidia_version) to one of them",
        "image d: nvidia-smi 535.1-1 is not in the archive (deb http://m bookworm main); it has 535.309.01-0+deb12u1: "
        "set the image's nvidia_version (or image_nvidia_version) to one of them",
        "image d: the archive has no package nvidia-x (deb http://m bookworm main)"]


COMPONENT = st.sampled_from(["main", "contrib", "non-free", "non-free-firmware", "universe", "restricted"])
WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789:/.-[]=", min_size=1, max_size=12)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["deb", "deb-src", "#deb", "rpm"]), options=st.lists(WORD, max_size=2),
       components=st.lists(COMPONENT, max_size=6, unique=True))
def test_driver_components_are_added_to_main_sources_only_once(kind, options, components):
    line = " ".join([kind, *options, "http://m/debian", "bookworm", *components])
    once = rules.with_driver_components(line)
    assert rules.with_driver_components(once) == once  # a second pass changes nothing
    if kind in ("deb", "deb-src") and "main" in line.split():
        words = once.split()
        assert words[:len(line.split())] == line.split()  # what was there stays, in order
        assert set(rules.DEBIAN_DRIVER_COMPONENTS) <= set(words)
        assert len(words) == len(set(words)) or len(line.split()) != len(set(line.split()))
    else:
        assert once == line


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=st.dictionaries(st.sampled_from(["name", "elements", "release", "nvidia_branch", "nvidia_version",
                                              "disk_format", "mirror"]),
                             st.one_of(st.none(), st.text(max_size=8), st.integers(), st.lists(st.text(max_size=8)))))
def test_image_problems_never_raise_and_are_strings(image):
    problems = filters.ogc_image_problems([image], "535", "")
    assert all(isinstance(p, str) and p for p in problems)


def _record(selected, devices):
    return {"plan": {"selected": [{"address": a} for a in selected]}, "facts": {"devices": devices}}


def test_address_space_from_the_plans_counts_only_the_selected_gpus_windows():
    big = {"address": "0000:41:00.0", "bars": [{"index": 1, "size": 128 << 30, "is_64bit": True, "prefetchable": True}]}
    small = {"address": "0000:27:00.0", "bars": [{"index": 1, "size": 16 << 30, "is_64bit": True, "prefetchable": True}]}
    assert filters.ogc_image_address_space({"v100": _record(["0000:27:00.0"], [small, big])}) == {}
    props = filters.ogc_image_address_space({"v100": _record(["0000:27:00.0"], [small]),
                                             "h100": _record(["0000:41:00.0"], [big])})
    assert props["hw_maxphysaddr_mode"] == "emulate" and props["hw_maxphysaddr_bits"] >= 41
    # A capture without windows (bars null) needs nothing it could tell.
    assert filters.ogc_image_address_space({"old": _record(["0000:41:00.0"], [dict(big, bars=None)])}) == {}
    with pytest.raises(filters.AnsibleFilterError, match="plans must be"):
        filters.ogc_image_address_space(["not", "a", "mapping"])
