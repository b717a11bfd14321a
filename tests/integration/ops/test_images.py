"""GPU images: the diskimage-builder elements (dependency expansion with DIB itself, file layout, shellcheck)
and the upload path of playbooks/images.yml against the test cloud, with a tiny real qcow2 and with the real
Debian GPU image (built and booted in test_gpu_image.py) booting a server of the GPU flavor."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.images import gpu_images
from ogc_testlib import ROOT, enable_compute_service, output, run_playbook, wait_status

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
import gpu_image  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration
ELEMENTS = os.path.join(ROOT, "images", "elements")
OURS = ("ogc-nvidia-driver", "ogc-docker-mtu", "ogc-debian-cloud")
PACKAGE_INSTALL_KEYS = {"phase", "uninstall", "installtype", "arch", "build-only", "when", "not-arch"}


def dib_version():
    with open(os.path.join(ROOT, "roles", "gpu_images", "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["gpu_images_dib_version"]


@pytest.fixture(scope="session")
def dib_python():
    """diskimage-builder at the role's pinned version, in its own venv under .cache (created once, ~1 min)."""
    venv = os.path.join(ROOT, ".cache", "dib-venv")
    python = os.path.join(venv, "bin", "python")
    want = dib_version()
    probe = [python, "-c", "import importlib.metadata as m; print(m.version('diskimage-builder'))"]
    if not os.path.exists(python) or subprocess.run(probe, capture_output=True, text=True,
                                                    check=False).stdout.strip() != want:
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", f"diskimage-builder=={want}"], check=True, timeout=900)
    return python


def expand(dib_python, *elements):
    """DIB's own dependency resolution (disk-image-create adds block-device-mbr beside vm, as here)."""
    if "vm" in elements and not any(e.startswith("block-device-") for e in elements):
        elements = (*elements, "block-device-mbr")
    code = ("import json, os, sys\n"
            "from diskimage_builder import element_dependencies as ed\n"
            "dib = os.path.join(os.path.dirname(ed.__file__), 'elements')\n"
            "try:\n"
            "    found = ed.get_elements(sys.argv[2:], paths=sys.argv[1] + ':' + dib)\n"
            "except Exception as exc:\n"
            "    print(json.dumps({'error': f'{type(exc).__name__}: {exc}'})); sys.exit(0)\n"
            "print(json.dumps({'elements': dict(found)}))\n")
    proc = subprocess.run([dib_python, "-c", code, ELEMENTS, *elements], capture_output=True, text=True, check=True,
                          timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_elements_expand_with_dib(dib_python):
    with open(os.path.join(ROOT, "inventory", "demo", "group_vars", "all", "ops.yml"), encoding="utf-8") as handle:
        images = yaml.safe_load(handle)["image_builds"]
    for image in images:
        out = expand(dib_python, *image["elements"], "cloud-init-datasources")
        assert "error" not in out, (image["name"], out)
        names = set(out["elements"])
        system = "debootstrap" if "debian-minimal" in image["elements"] else "ubuntu"
        assert {"package-installs", system, "vm", "cloud-init-datasources"} <= names, image["name"]
        for ours in set(image["elements"]) & set(OURS):
            assert out["elements"][ours] == os.path.realpath(os.path.join(ELEMENTS, ours))
    for system in ("ubuntu", "debian-minimal"):
        nvidia = expand(dib_python, system, "vm", "ogc-nvidia-driver")
        assert {"ogc-nvidia-driver", "pkg-map", "package-installs"} <= set(nvidia["elements"]), system
    # DIB really resolves: a missing element and a missing operating system are errors.
    assert expand(dib_python, "ubuntu", "ogc-nvidia-drivers")["error"].startswith("MissingElementException")
    assert expand(dib_python, "ogc-docker-mtu")["error"].startswith("MissingOSException")


def test_element_files():
    for element in OURS:
        path = os.path.join(ELEMENTS, element)
        with open(os.path.join(path, "element-deps"), encoding="utf-8") as handle:
            assert "package-installs" in handle.read().split()
        with open(os.path.join(path, "package-installs.yaml"), encoding="utf-8") as handle:
            packages = yaml.safe_load(handle)
        assert isinstance(packages, dict) and packages
        for name, options in packages.items():
            assert options is None or set(options) <= PACKAGE_INSTALL_KEYS, (element, name)
        for phase in ("pre-install.d", "install.d", "post-install.d"):
            for script in os.listdir(os.path.join(path, phase)) if os.path.isdir(os.path.join(path, phase)) else []:
                full = os.path.join(path, phase, script)
                assert os.stat(full).st_mode & stat.S_IXUSR, f"{full} is not executable"
                with open(full, encoding="utf-8") as handle:
                    assert handle.readline().startswith("#!/bin/bash"), full
        for env in os.listdir(os.path.join(path, "environment.d")):
            with open(os.path.join(path, "environment.d", env), encoding="utf-8") as handle:
                lines = [ln for ln in handle.read().splitlines() if ln and not ln.startswith("#")]
            # DIB variables with a default only: an operator's own value always wins
            assert lines and all(re.fullmatch(r"export (DIB_[A-Z0-9_]+)=\$\{\1:-[^}]*\}", ln) for ln in lines), env
    with open(os.path.join(ELEMENTS, "ogc-docker-mtu", "package-installs.yaml"), encoding="utf-8") as handle:
        assert {"docker.io", "cloud-init"} <= set(yaml.safe_load(handle))


def test_scripts_pass_shellcheck():
    assert shutil.which("shellcheck"), "shellcheck is not installed: run scripts/setup-system.sh (Debian package shellcheck)"
    scripts = [os.path.join(root, name) for root, _dirs, files in os.walk(ELEMENTS) for name in files
               if os.path.basename(root) in ("pre-install.d", "install.d", "post-install.d", "environment.d")]
    assert len(scripts) == 9
    proc = subprocess.run(["shellcheck", "-s", "bash", *scripts], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_docker_mtu_script_merges_daemon_json(tmp_path):
    """Run the post-install script in a private mount namespace whose /etc/docker is a temp dir."""
    etc_docker = tmp_path / "docker"
    etc_docker.mkdir()
    (etc_docker / "daemon.json").write_text(json.dumps({"log-driver": "journald"}))
    script = os.path.join(ELEMENTS, "ogc-docker-mtu", "post-install.d", "70-ogc-docker-mtu")
    inner = f"mkdir -p /etc/docker && mount --bind {etc_docker} /etc/docker && DIB_OGC_DOCKER_MTU=1450 {script}"
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner], capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((etc_docker / "daemon.json").read_text()) == {"log-driver": "journald", "mtu": 1450}
    bad = f"mkdir -p /etc/docker && mount --bind {etc_docker} /etc/docker && DIB_OGC_DOCKER_MTU=jumbo {script}"
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", bad], capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode != 0 and "DIB_OGC_DOCKER_MTU must be a number, got 'jumbo'" in proc.stderr


def test_dm_loop_maps_partitions_as_the_table_says(tmp_path):
    """files/dm-loop, the kpartx and dmsetup of build hosts without device-mapper (this machine): the partitions it
    maps under /dev/mapper are those of the image's table as sfdisk reads it (start and size), and it unmaps them.
    Run in a private mount namespace with its own /dev/mapper, as ogc-dib-build runs it."""
    image = tmp_path / "disk.raw"
    with open(image, "wb") as handle:
        handle.truncate(64 << 20)
    subprocess.run(["sfdisk", "-q", str(image)], input="label: dos\n,24M,L\n,,L,*\n", text=True, check=True)
    table = json.loads(subprocess.run(["sfdisk", "--json", str(image)], capture_output=True, text=True,
                                      check=True).stdout)["partitiontable"]["partitions"]
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("kpartx", "dmsetup"):
        (tools / name).symlink_to(os.path.join(ROOT, "roles", "gpu_images", "files", "dm-loop"))
    loop = subprocess.run(["losetup", "--show", "-f", str(image)], capture_output=True, text=True,
                          check=True).stdout.strip()
    name = os.path.basename(loop)
    script = (f"set -e; mkdir -p /dev/mapper; mount -t tmpfs none /dev/mapper; {tools}/kpartx -avs {loop}; "
              f"for p in /dev/mapper/{name}p*; do echo \"$p $(readlink $p) $(cat /sys/class/block/$(basename "
              f"$(readlink $p))/start) $(blockdev --getsz $p)\"; done; {tools}/dmsetup --noudevsync mknodes; "
              f"{tools}/dmsetup remove {name}p2; ls /dev/mapper; {tools}/kpartx -d {loop}; "
              f"ls /dev/mapper; ls /dev/{name}p* 2>/dev/null || echo gone")
    try:
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
                              capture_output=True, text=True, check=False, timeout=60)
    finally:
        subprocess.run(["losetup", "--detach", loop], capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    mapped = [line.split() for line in lines if line.startswith(f"/dev/mapper/{name}p")]
    assert [(m[0], m[1], int(m[2]), int(m[3])) for m in mapped] == [
        (f"/dev/mapper/{name}p{n}", f"/dev/{name}p{n}", part["start"], part["size"])
        for n, part in enumerate(table, start=1)]
    assert lines[0] == f"add map {name}p1 (/dev/{name}p1): 0 {table[0]['size']} linear {loop} {table[0]['start']}"
    # dmsetup remove took p2's link only; kpartx -d left no link and no partition
    assert lines[len(table) + len(mapped):] == [f"{name}p1", "gone"], lines


STUB = """#!/bin/sh
# records its arguments; apt-cache madison answers from $STUB_VERSIONS
echo "$(basename "$0") $*" >> "$STUB_LOG"
if [ "$(basename "$0")" = apt-cache ] && [ "$1" = madison ]; then
    for version in $STUB_VERSIONS; do echo " $2 | $version | http://m/debian bookworm/non-free amd64 Packages"; done
fi
"""


def run_nvidia_element(tmp_path, distro, version, versions=("535.309.01-0+deb12u1", "535.261.03-1")):
    """The element's install.d script in a private mount namespace: /etc/apt is a temp dir holding the sources
    diskimage-builder writes, apt-get/apt-cache/apt-mark/nvidia-smi are recorders."""
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "preferences.d").mkdir()
    conf = ("default:deb http://m/debian bookworm main\nupdates:deb http://m/debian bookworm-updates main\n"
            "security:deb http://m/debian-security bookworm-security main\n")
    for line in conf.splitlines():
        name, _, value = line.partition(":")
        (apt / "sources.list.d" / f"{name}.list").write_text(value + "\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("apt-get", "apt-cache", "apt-mark", "nvidia-smi"):
        (stubs / tool).write_text(STUB)
        (stubs / tool).chmod(0o755)
    script = os.path.join(ELEMENTS, "ogc-nvidia-driver", "install.d", "60-ogc-nvidia-driver")
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", STUB_LOG=str(tmp_path / "calls"),
               STUB_VERSIONS=" ".join(versions), DISTRO_NAME=distro, DIB_OGC_NVIDIA_BRANCH="535",
               DIB_OGC_NVIDIA_VERSION=version)
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount --bind {apt} /etc/apt && exec {script}"], capture_output=True, text=True,
                          env=env, check=False, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return proc, calls, apt, conf


def test_nvidia_element_on_debian_enables_non_free_pins_and_holds(tmp_path):
    """The element does in the image what the collection's images/gpu_images.py says the preflight checks."""
    rules = gpu_images
    pin = "535.261.03-1"
    proc, calls, apt, conf = run_nvidia_element(tmp_path, "debian", pin)
    assert proc.returncode == 0, proc.stderr
    written = sorted((apt / "sources.list.d" / f).read_text().strip() for f in os.listdir(apt / "sources.list.d"))
    assert written == sorted(rules.archive_sources("debian", "bookworm", dib_sources_conf=conf))
    assert (apt / "preferences.d" / "ogc-nvidia-driver").read_text().splitlines()[1:] == [
        "Package: src:nvidia-graphics-drivers", f"Pin: version {pin}", "Pin-Priority: 1001"]
    packages = rules.nvidia_packages("debian", "535")
    assert calls == ["apt-get -y update", "apt-cache madison nvidia-driver",
                     "apt-get -y install --no-install-recommends " + " ".join(f"{p}={pin}" for p in packages),
                     "apt-mark hold " + " ".join(packages)]


def test_nvidia_element_refuses_an_unpinned_driver_or_a_version_the_archive_lacks(tmp_path):
    proc, calls, _apt, _conf = run_nvidia_element(tmp_path / "a", "debian", "")
    assert proc.returncode != 0 and calls == []
    assert "set DIB_OGC_NVIDIA_VERSION to the exact package version of nvidia-driver" in proc.stderr
    proc, calls, _apt, _conf = run_nvidia_element(tmp_path / "b", "debian", "535.1-1")
    assert proc.returncode != 0
    assert ("nvidia-driver 535.1-1 is not in the image's archive; it has: 535.309.01-0+deb12u1 535.261.03-1"
            in " ".join(proc.stderr.split())), proc.stderr
    assert not any(call.startswith("apt-get -y install") for call in calls)
    proc, calls, _apt, _conf = run_nvidia_element(tmp_path / "c", "centos", "535.1-1")
    assert proc.returncode != 0 and "supports Debian and Ubuntu images, not 'centos'" in proc.stderr


def test_nvidia_element_on_ubuntu_is_as_before(tmp_path):
    pin = "535.274.02-0ubuntu0.22.04.1"
    proc, calls, apt, conf = run_nvidia_element(tmp_path, "ubuntu", pin, versions=(pin,))
    assert proc.returncode == 0, proc.stderr
    assert calls[-2:] == [f"apt-get -y install --no-install-recommends nvidia-driver-535-server={pin} "
                          f"nvidia-utils-535-server={pin}", "apt-mark hold nvidia-driver-535-server "
                                                             "nvidia-utils-535-server"]
    assert (apt / "sources.list.d" / "default.list").read_text().strip() == conf.splitlines()[0].partition(":")[2]
    assert not (apt / "preferences.d" / "ogc-nvidia-driver").exists()


def run_images(compute_cloud, *args):
    env = compute_cloud.env()
    env.pop("ANSIBLE_STDOUT_CALLBACK")
    proc = run_playbook(os.path.join(ROOT, "playbooks", "images.yml"), *args, env=env)
    return proc.returncode, output(proc)


def test_upload_to_the_test_cloud(compute_cloud, tmp_path):
    qcow2 = tmp_path / "tiny.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", str(qcow2), "16M"], check=True, capture_output=True)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"image_files": {"ubuntu-2204-nvidia": str(qcow2), "ubuntu-2204": str(qcow2),
                                                 "debian-12-nvidia": str(qcow2)},
                                 "cloud_clouds_yaml": compute_cloud.clouds_yaml, "cloud_name": "ogc-test"}))
    conn = compute_cloud.connect()

    rc, out = run_images(compute_cloud, "-e", f"@{extra}", "--check")
    assert rc == 0, out
    assert conn.image.find_image("ubuntu-2204-nvidia") is None, "check mode uploaded an image"

    rc, out = run_images(compute_cloud, "-e", f"@{extra}")
    assert rc == 0, out
    assert "changed=1" in out, out
    image = conn.image.find_image("ubuntu-2204-nvidia", ignore_missing=False)
    assert image.status == "active" and image.disk_format == "qcow2" and image.visibility == "public"
    raw = conn.image.get(f"/images/{image.id}").json()  # Glance's own view, properties as stored
    assert raw["hw_machine_type"] == "q35" and raw["img_hide_hypervisor_id"] == "true", raw
    assert raw["os_distro"] == "ubuntu"
    plain = conn.image.find_image("ubuntu-2204", ignore_missing=False)
    raw = conn.image.get(f"/images/{plain.id}").json()
    assert raw["hw_machine_type"] == "q35" and "img_hide_hypervisor_id" not in raw

    rc, out = run_images(compute_cloud, "-e", f"@{extra}")
    assert rc == 0 and "changed=0" in out, out


def test_upload_names_missing_files(compute_cloud, tmp_path):
    rc, out = run_images(compute_cloud, "-e", f"image_output_dir={tmp_path}")
    assert rc != 0
    assert ("No file for image(s) ubuntu-2204-nvidia, debian-12-nvidia, ubuntu-2204: build them first"
            in " ".join(out.split())), out


@pytest.mark.heavy
def test_the_built_gpu_image_uploads_and_boots_a_server_of_the_gpu_flavor(compute_cloud, tmp_path):
    """The real Debian GPU image (built by the role and booted under qemu in test_gpu_image.py) uploaded by
    playbooks/images.yml with its file's checksum, then a server of the demo's GPU flavor booted from it: the
    scheduler puts it on the fake compute's V100 through the flavor's alias."""
    build = gpu_image.ensure()
    declared = build.variables["image_builds"][0]
    name = declared["name"]
    digest = hashlib.sha256()
    with open(build.image, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"image_builds": [declared], "image_files": {name: build.image},
                                 "cloud_clouds_yaml": compute_cloud.clouds_yaml, "cloud_name": "ogc-test"}))
    conn = compute_cloud.connect()
    enable_compute_service(conn, "ogc-gpu-1")  # the drain tests on this cloud leave it disabled
    rc, out = run_images(compute_cloud, "-e", f"@{extra}")
    assert rc == 0, out
    image = conn.image.find_image(name, ignore_missing=False)
    raw = conn.image.get(f"/images/{image.id}").json()
    try:
        assert raw["status"] == "active" and raw["disk_format"] == "qcow2", raw
        assert raw["size"] == os.path.getsize(build.image), raw
        assert raw["owner_specified.openstack.sha256"] == digest.hexdigest(), raw
        assert raw["hw_machine_type"] == "q35" and raw["os_distro"] == "debian", raw

        with open(os.path.join(ROOT, "inventory", "demo", "group_vars", "all", "cloud.yml"), encoding="utf-8") as handle:
            flavor = next(f for f in yaml.safe_load(handle)["cloud_flavors"] if f["name"] == "gpu_large")
        rc, results, raw_out = compute_cloud.tasks(tmp_path, [{"name": "flavor", "open_gpu_cloud.toolkit.os_flavors": {
            "cloud": "ogc-test", "flavors": [flavor], "purge_extra_specs": True}}])
        assert rc == 0, raw_out
        server = conn.compute.create_server(name="debian-gpu", flavor_id=flavor["id"], image_id=image.id,
                                            networks="none")
        try:
            server = wait_status(conn, server.id, ("ACTIVE", "ERROR"), timeout=180)
            assert server.status == "ACTIVE", (server.status, server.fault)
            assert server.compute_host == "ogc-gpu-1" and server.image["id"] == image.id
            allocations = conn.placement.get(f"/allocations/{server.id}",
                                              microversion="1.28").json()["allocations"]
            used = {rc_: n for provider in allocations.values() for rc_, n in provider["resources"].items()}
            assert used.get("CUSTOM_PCI_10DE_1DB4") == 1, allocations  # the V100 the alias asked for
        finally:
            conn.compute.delete_server(server.id)
            conn.compute.wait_for_delete(server, wait=120)
    finally:
        # The image's gigabyte stays out of the test cloud's directory once the test is done.
        for found in conn.image.images():
            if found.name == name or found.name.startswith(f"{name} (retired"):
                conn.image.delete_image(found.id, ignore_missing=True)
