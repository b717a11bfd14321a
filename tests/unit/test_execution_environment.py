"""execution-environment.yml, the image AWX (or Automation Platform) runs the job templates in.

`ansible-builder create` writes the build context from it, here with no network at all (its own network
namespace): the Containerfile and the requirement files it writes must carry exactly what the project pins.
The image itself is not built: that needs a container engine, which the test machine lacks.

Its lists are checked against the project's own sources, so they cannot drift:
- the Python packages are pyproject.toml's runtime dependencies, ansible-core and ansible-runner pinned as there;
- the collections are those the playbooks, roles, templates and plugins use (every fully qualified name they
  write whose collection the `ansible` bundle holds) plus those kolla-ansible's playbooks need, each at the
  version the bundle the tests ran holds; a playbook that starts using another collection fails this test.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from ogc_testlib import ROOT

EE_FILE = os.path.join(ROOT, "execution-environment.yml")
ANSIBLE_BUILDER = os.path.join(os.path.dirname(sys.executable), "ansible-builder")
# The collections of the `ansible` bundle pyproject.toml pins, as installed in the venv the tests run with.
BUNDLE = os.path.join(sysconfig.get_paths()["purelib"], "ansible_collections")
# What kolla-ansible's playbooks need (`kolla-ansible install-deps` installs it); kolla-ansible finds it here too.
KOLLA_REQUIREMENTS = os.path.join(sys.prefix, "share", "kolla-ansible", "requirements-core.yml")
# Where the project's Ansible content names modules, filters, tests, lookups and callbacks.
CONTENT = ("site.yml", "ansible.cfg", "playbooks", "roles", "templates", "group_vars", "inventory", "collections",
           "filter_plugins", "callback_plugins", "vars_plugins")
FQCN = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\.[a-z_][a-z0-9_]*(?![\w])")
# Python code reaches a collection through its package; `ansible.utils.vars` there is ansible-core's own module.
PYTHON_COLLECTION = re.compile(r"\bansible_collections\.([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)")


def load_ee():
    with open(EE_FILE, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def pins(requirements):
    """{normalised name: the requirement as written} of a list of pip requirements."""
    return {Requirement(line).name.lower().replace("_", "-"): line for line in requirements}


def bundled():
    """{collection: version} of every collection the venv's `ansible` bundle holds."""
    found = {}
    for manifest in sorted(glob.glob(os.path.join(BUNDLE, "*", "*", "MANIFEST.json"))):
        with open(manifest, encoding="utf-8") as handle:
            info = json.load(handle)["collection_info"]
        found[f"{info['namespace']}.{info['name']}"] = info["version"]
    return found


def own_collections():
    """The project's own collections (collections/ansible_collections/<ns>/<name>): the checkout brings them (ansible.cfg's
    collections_path), so the image needs none of them."""
    top = os.path.join(ROOT, "collections", "ansible_collections")
    return {f"{ns}.{name}" for ns in os.listdir(top) for name in os.listdir(os.path.join(top, ns))}


def collections_used(root=ROOT, known=None):
    """{collection: [files]} of the collections the project's content names, ansible.builtin aside.

    A dotted triple in YAML, Jinja or ansible.cfg counts when its first two parts name a collection of the
    bundle (so a file name like fleet_report.html.j2 does not); in Python, only an `ansible_collections.`
    import counts."""
    known = set(bundled()) if known is None else known
    found = {}
    for top in CONTENT:
        path = os.path.join(root, top)
        files = [path] if os.path.isfile(path) else [
            os.path.join(d, f) for d, _dirs, names in os.walk(path) for f in names if "__pycache__" not in d]
        for name in files:
            with open(name, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            if name.endswith(".py"):
                used = {f"{a}.{b}" for a, b in PYTHON_COLLECTION.findall(text)}
            else:
                used = {f"{a}.{b}" for a, b in FQCN.findall(text)} & known
            for collection in used - {"ansible.builtin"} - own_collections():
                found.setdefault(collection, []).append(os.path.relpath(name, root))
    return found


def kolla_collections():
    """{collection: version bounds} of kolla-ansible's requirements-core.yml."""
    with open(KOLLA_REQUIREMENTS, encoding="utf-8") as handle:
        return {c["name"]: SpecifierSet(c.get("version", "")) for c in yaml.safe_load(handle)["collections"]}


def ee_collections(ee):
    return {c["name"]: str(c["version"]) for c in ee["dependencies"]["galaxy"]["collections"]}


def test_the_python_packages_are_pyprojects_pins():
    ee, project = load_ee(), pyproject()
    runtime = pins(project["dependencies"])
    test_extra = pins(project["optional-dependencies"]["test"])
    deps = ee["dependencies"]
    assert deps["ansible_core"]["package_pip"] == runtime["ansible-core"]
    assert deps["ansible_runner"]["package_pip"] == test_extra["ansible-runner"]
    # The bundle's collections come as galaxy collections instead (the next tests).
    expected = {name: line for name, line in runtime.items() if name not in ("ansible-core", "ansible")}
    assert pins(deps["python"]) == expected
    assert deps["python_interpreter"]["package_system"] == "python3.11"
    assert "3.11" in project["requires-python"] and "3.12" in project["requires-python"]


def test_the_scan_sees_the_collections_known_to_be_used(tmp_path):
    """A scan that found nothing would pass the next test vacuously; and a new collection must be seen."""
    used = collections_used()
    assert "roles/passthrough_host/tasks/firmware.yml" in used["community.general"]
    assert "roles/kolla_deploy/tasks/preflight.yml" in used["ansible.utils"]
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "new.yml").write_text(
        "- name: New\n  hosts: all\n  tasks:\n    - name: A container\n      containers.podman.podman_container:\n"
        "        name: x\n    - name: A filter\n      ansible.builtin.debug:\n"
        "        msg: \"{{ x | community.crypto.gpg_fingerprint }} fleet_report.html.j2\"\n")
    (tmp_path / "collections").mkdir()
    (tmp_path / "collections" / "m.py").write_text("from ansible_collections.openstack.cloud.plugins.module_utils "
                                               "import openstack\nfrom ansible.utils.vars import combine_vars\n")
    assert sorted(collections_used(str(tmp_path))) == ["community.crypto", "containers.podman", "openstack.cloud"]


def test_the_collections_are_those_the_control_side_uses_at_the_tested_versions():
    ee = ee_collections(load_ee())
    used, kolla, bundle = collections_used(), kolla_collections(), bundled()
    missing = {c: files for c, files in used.items() if c not in ee}
    assert not missing, (f"execution-environment.yml: dependencies.galaxy.collections lacks {sorted(missing)}, "
                         f"used by {missing}; add each at the version the ansible bundle holds")
    missing_kolla = sorted(set(kolla) - set(ee))
    assert not missing_kolla, (f"execution-environment.yml: dependencies.galaxy.collections lacks {missing_kolla}, "
                               f"which kolla-ansible's playbooks need ({KOLLA_REQUIREMENTS})")
    unused = sorted(set(ee) - set(used) - set(kolla))
    assert not unused, f"execution-environment.yml: nothing uses the collections {unused}; remove them"
    for name, version in ee.items():
        assert version == bundle[name], (
            f"execution-environment.yml: {name} {version}, but the ansible bundle the tests run holds "
            f"{bundle[name]}; pin {bundle[name]}")
        if name in kolla:
            assert version in kolla[name], f"{name} {version} is outside kolla-ansible's bounds {kolla[name]}"


def test_ansible_builder_writes_the_build_context_offline(tmp_path):
    context = tmp_path / "context"
    # Its own network namespace (only a loopback, down): a build context that needed the network fails here.
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    proc = subprocess.run(["unshare", *user, "--net", ANSIBLE_BUILDER, "create", "-f", EE_FILE,
                           "--context", str(context), "--output-filename", "Containerfile"],
                          capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ee = load_ee()
    deps = ee["dependencies"]
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{ee["images"]["base_image"]["name"]}"' in containerfile
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile and 'ARG PYPKG="python3.11"' in containerfile
    assert (f'ARG ANSIBLE_INSTALL_REFS="{deps["ansible_core"]["package_pip"]} '
            f'{deps["ansible_runner"]["package_pip"]}"') in containerfile
    # The collections are installed, then the Python and system packages they and we need are assembled.
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "introspect --user-pip=requirements.txt --user-bindep=bindep.txt" in containerfile
    build = context / "_build"
    assert (build / "requirements.txt").read_text().split() == deps["python"]
    assert yaml.safe_load((build / "requirements.yml").read_text()) == deps["galaxy"]
    assert (build / "bindep.txt").read_text().splitlines() == deps["system"]

