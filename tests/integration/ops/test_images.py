"""GPU images: the diskimage-builder elements (dependency expansion with DIB itself, file layout, shellcheck)
and the upload path of playbooks/images.yml against the test cloud with a tiny real qcow2."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from ogc_testlib import ROOT

pytestmark = pytest.mark.integration
ELEMENTS = os.path.join(ROOT, "images", "elements")
OURS = ("ogc-nvidia-driver", "ogc-docker-mtu")
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
            "    print(json.dumps({'error': '%s: %s' % (type(exc).__name__, exc)})); sys.exit(0)\n"
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
        assert {"package-installs", "ubuntu", "vm", "cloud-init-datasources"} <= names, image["name"]
        for ours in set(image["elements"]) & set(OURS):
            assert out["elements"][ours] == os.path.realpath(os.path.join(ELEMENTS, ours))
    nvidia = expand(dib_python, "ubuntu", "vm", "ogc-nvidia-driver")
    assert "ogc-nvidia-driver" in nvidia["elements"]
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
        for phase in ("install.d", "post-install.d"):
            for script in os.listdir(os.path.join(path, phase)) if os.path.isdir(os.path.join(path, phase)) else []:
                full = os.path.join(path, phase, script)
                assert os.stat(full).st_mode & stat.S_IXUSR, f"{full} is not executable"
                with open(full, encoding="utf-8") as handle:
                    assert handle.readline().startswith("#!/bin/bash"), full
        for env in os.listdir(os.path.join(path, "environment.d")):
            with open(os.path.join(path, "environment.d", env), encoding="utf-8") as handle:
                lines = [ln for ln in handle.read().splitlines() if ln and not ln.startswith("#")]
            assert lines and all(ln.startswith("export DIB_OGC_") for ln in lines), env
    with open(os.path.join(ELEMENTS, "ogc-docker-mtu", "package-installs.yaml"), encoding="utf-8") as handle:
        assert {"docker.io", "cloud-init"} <= set(yaml.safe_load(handle))


def test_scripts_pass_shellcheck():
    assert shutil.which("shellcheck"), "shellcheck is not installed: run scripts/setup-system.sh (Debian package shellcheck)"
    scripts = [os.path.join(root, name) for root, _dirs, files in os.walk(ELEMENTS) for name in files
               if os.path.basename(root) in ("install.d", "post-install.d", "environment.d")]
    assert len(scripts) == 5
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


def run_images(compute_cloud, *args):
    env = compute_cloud.env()
    env.pop("ANSIBLE_STDOUT_CALLBACK")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", "images.yml"), *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_upload_to_the_test_cloud(compute_cloud, tmp_path):
    qcow2 = tmp_path / "tiny.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", str(qcow2), "16M"], check=True, capture_output=True)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"image_files": {"ubuntu-2204-nvidia": str(qcow2), "ubuntu-2204": str(qcow2)},
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
    assert "No file for image(s) ubuntu-2204-nvidia, ubuntu-2204: build them first" in " ".join(out.split()), out
