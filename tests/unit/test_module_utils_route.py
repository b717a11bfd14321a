"""One route from the controller's plugins to module_utils/ (plugin_utils/module_utils_route.py)."""

from __future__ import annotations

import glob
import os
import re
import runpy

import ansible.module_utils

from ogc_testlib import COLLECTION, ROOT

ROUTE = os.path.join(ROOT, "plugin_utils", "module_utils_route.py")
# The collection's plugins: plain ansible_collections imports, no route at all.
COLLECTION_PLUGINS = sorted(glob.glob(os.path.join(COLLECTION, "plugins", "**", "*.py"), recursive=True))
PLUGINS = sorted(glob.glob(os.path.join(ROOT, "filter_plugins", "*.py")) +
                 glob.glob(os.path.join(ROOT, "action_plugins", "*.py")))
# What a plugin would need to reach module_utils/ on its own: a path it extends, or a file it loads as a module.
OWN_ROUTE = re.compile(r"__path__|sys\.path|importlib|spec_from_file_location|exec_module")
OURS = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "module_utils", "*.py"))} | {
    name for name in os.listdir(os.path.join(ROOT, "module_utils"))
    if os.path.isfile(os.path.join(ROOT, "module_utils", name, "__init__.py"))}
IMPORTS_OURS = re.compile(r"^from ansible\.module_utils(?:\.(\w+))?(?:\.\w+)* import ([\w, ]+)", re.M)
# The tests, the benchmarks and the scripts they load take the same route (ogc_testlib.join_module_utils, or the
# route file itself where ogc_testlib is out of reach): none extends ansible.module_utils.__path__, puts
# module_utils/ on sys.path or loads a file of module_utils/ by its path.
HELPERS = sorted(path for top in ("tests", "bench", "scripts")
                 for path in glob.glob(os.path.join(ROOT, top, "**", "*.py"), recursive=True)
                 if os.path.abspath(path) != os.path.abspath(__file__))
HELPER_OWN_ROUTE = re.compile(r"module_utils\.__path__\.(?:append|insert|extend)|sys\.path\.\w+\(.*module_utils|"
                              r"(?:load_source|spec_from_file_location)\(.*module_utils")


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _imports_ours(text):
    for package, names in IMPORTS_OURS.findall(text):
        if package in OURS or (not package and any(n.strip() in OURS for n in names.split(","))):
            return True
    return False


def test_no_plugin_carries_its_own_route_to_module_utils():
    assert PLUGINS
    for path in PLUGINS:
        assert not OWN_ROUTE.search(_text(path)), f"{path} reaches modules by its own route"


def test_every_plugin_importing_module_utils_runs_the_one_route_first():
    users = [p for p in PLUGINS if _imports_ours(_text(p))]
    assert {os.path.basename(p) for p in users} >= {"passthrough_plan.py", "fleet_report.py", "nova_pci.py",
                                                     "gpu_health.py", "passthrough_host_checks.py",
                                                     "ogc_inputs.py"}
    for path in users:
        text = _text(path)
        route = text.find('"module_utils_route.py"')
        assert route != -1 and "runpy.run_path(" in text, path
        assert route < IMPORTS_OURS.search(text).start(), f"{path} imports module_utils before the route"


def test_the_collection_s_plugins_import_plainly_without_a_route():
    assert len(COLLECTION_PLUGINS) >= 4
    for path in COLLECTION_PLUGINS:
        text = _text(path)
        assert not OWN_ROUTE.search(text) and "module_utils_route" not in text and "runpy" not in text, path
        assert not _imports_ours(text), f"{path} imports the project's module_utils/: move what it needs with it"


def test_no_test_helper_carries_its_own_route_to_module_utils():
    assert len(HELPERS) > 50
    for path in HELPERS:
        found = HELPER_OWN_ROUTE.search(_text(path))
        assert not found, f"{path} reaches module_utils/ by its own route ({found.group(0)}): use join_module_utils"


def test_the_route_joins_module_utils_once():
    before = list(ansible.module_utils.__path__)
    runpy.run_path(ROUTE)
    runpy.run_path(ROUTE)
    joined = list(ansible.module_utils.__path__)
    assert joined.count(os.path.join(ROOT, "module_utils")) == 1
    assert joined[:len(before)] == before
    from ansible.module_utils.passthrough import planner  # pylint: disable=import-outside-toplevel
    assert planner.passthrough_plan.__module__ == "ansible.module_utils.passthrough.planner"
