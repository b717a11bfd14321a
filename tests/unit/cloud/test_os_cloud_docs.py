"""os_cloud's sections take exactly the options of os_access, os_flavors and os_quotas: its documentation of each
section's suboptions is those modules' own (ansible-test's validate-modules wants every suboption documented where it
is accepted), and this test keeps the copies equal to the originals."""

from __future__ import annotations

import ast
import os

import pytest
import yaml

from ogc_testlib import COLLECTION

PLUGINS = os.path.join(COLLECTION, "plugins")
# Where each section's options are documented once.
SOURCES = {"access": ("modules", "os_access.py"), "flavors": ("modules", "os_flavors.py"),
           "quotas": ("doc_fragments", "quotas.py")}


def _documentation(*path):
    with open(os.path.join(PLUGINS, *path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"no DOCUMENTATION in {path}")


@pytest.mark.parametrize("section", sorted(SOURCES))
def test_each_section_documents_the_options_of_its_module(section):
    documented = _documentation("modules", "os_cloud.py")["options"][section]["suboptions"]
    assert documented == _documentation(*SOURCES[section])["options"], (
        f"os_cloud's {section} suboptions differ from {'/'.join(SOURCES[section])}'s options: copy them over")
