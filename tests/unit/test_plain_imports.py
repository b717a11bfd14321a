"""The project's Python imports its own code plainly: the collection (ansible_collections.open_gpu_cloud.toolkit)
is the one home of module_utils, and nothing reaches it by a route of its own."""

from __future__ import annotations

import ast
import glob
import importlib
import os
import re

from ogc_testlib import COLLECTION, ROOT

PACKAGE = "ansible_collections.open_gpu_cloud.toolkit"
# Every Python file of the project: its plugins and modules, the collection, the tests, benchmarks and scripts.
SOURCES = sorted(path for top in ("filter_plugins", "callback_plugins", "vars_plugins", "collections", "tests", "bench",
                                  "scripts", "molecule")
                 for path in glob.glob(os.path.join(ROOT, top, "**", "*.py"), recursive=True)
                 if "/tests/output/" not in path)
COLLECTION_PLUGINS = sorted(glob.glob(os.path.join(COLLECTION, "plugins", "**", "*.py"), recursive=True))
# A route of one's own to the project's code: Ansible's package paths extended, or a module_utils file loaded by
# its path. (The test cloud's nova-compute adds its driver to nova.virt's path: that is Nova's package, not ours.)
OWN_ROUTE = re.compile(r"(?:module_utils|ansible_collections[\w.]*)\.__path__\.(?:append|insert|extend)|module_utils_route|"
                       r"(?:load_source|spec_from_file_location|run_path)\(.*module_utils")


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _imported(path):
    """The modules a file imports (absolute imports only), as dotted names."""
    names = set()
    for node in ast.walk(ast.parse(_text(path), path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_project_has_no_module_utils_outside_the_collection():
    assert not os.path.exists(os.path.join(ROOT, "module_utils"))
    assert not os.path.exists(os.path.join(ROOT, "plugin_utils"))


def test_nothing_reaches_the_project_s_code_by_a_route_of_its_own():
    assert len(SOURCES) > 100
    for path in SOURCES:
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        found = OWN_ROUTE.search(_text(path))
        assert not found, f"{path} reaches code by a route of its own ({found.group(0)}): import it plainly"


def test_every_import_of_the_collection_resolves():
    """Each ``ansible_collections.open_gpu_cloud.toolkit...`` name any file imports is a module, or a name in one."""
    checked = 0
    for path in SOURCES:
        for name in sorted(n for n in _imported(path) if n.startswith(PACKAGE + ".")):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                parent, _, attr = name.rpartition(".")
                assert hasattr(importlib.import_module(parent), attr), f"{path}: {name} does not resolve"
            checked += 1
    assert checked > 100


def test_nothing_imports_a_module_util_of_ours_from_ansible_s_namespace():
    """``ansible.module_utils.<name>`` is ansible-core's alone: each such import resolves inside ansible-core."""
    for path in SOURCES:
        for name in sorted(n for n in _imported(path) if n.startswith("ansible.module_utils.")):
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError:
                parent, _, attr = name.rpartition(".")
                module = importlib.import_module(parent)
                assert hasattr(module, attr), f"{path}: {name} is not ansible-core's"
            assert "ansible_collections" not in (getattr(module, "__file__", "") or ""), path


def test_the_collection_s_plugins_import_only_the_collection_and_ansible():
    assert len(COLLECTION_PLUGINS) >= 30
    for path in COLLECTION_PLUGINS:
        if "/tests/" in path:
            continue
        for name in _imported(path):
            top = name.split(".")[0]
            assert top != "ogc_testlib", path
            if top == "ansible_collections":
                assert name.startswith(PACKAGE + ".") or name.startswith("ansible_collections.openstack."), \
                    f"{path} imports {name}"
