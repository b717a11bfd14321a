"""Shared fixtures: the project's modules and filters, and fixture hosts built once per session."""

from __future__ import annotations

import os

import pytest

from ogc_testlib import FIXTURES, PCI_IDS, load_library_module, load_source


@pytest.fixture(scope="session")
def mock_sysfs():
    return load_source("mock_sysfs", "scripts/mock_sysfs.py")


@pytest.fixture(scope="session")
def facts_module():
    return load_library_module("pci_passthrough_facts")


@pytest.fixture(scope="session")
def pci_ids_db():
    """The PCI ID database as Debian ships it (package pci.ids), parsed by module_utils/pci_ids.py."""
    if not os.path.isfile(PCI_IDS):
        pytest.fail(f"{PCI_IDS} is missing: install Debian's pci.ids package (apt-get install -y pci.ids); "
                    "the test set-up does")
    import ansible.module_utils.pci_ids as pci_ids  # pylint: disable=import-outside-toplevel

    return pci_ids.load(PCI_IDS)


@pytest.fixture(scope="session")
def planner():
    return load_source("passthrough_plan", "filter_plugins/passthrough_plan.py")


@pytest.fixture(scope="session")
def fixture_host(tmp_path_factory, mock_sysfs):
    """Build a fixture host once per session; returns its root directory."""
    built = {}

    def build(name: str, **overrides) -> str:
        key = (name, repr(sorted(overrides.items())))
        if key not in built:
            root = str(tmp_path_factory.mktemp(name))
            fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, f"{name}.yml"))
            mock_sysfs.build_tree(fixture, root, **dict(overrides))
            built[key] = root
        return built[key]

    return build


@pytest.fixture(scope="session")
def host_facts(fixture_host, facts_module, pci_ids_db):
    """Facts of a fixture host as the module discovers them from its built tree, named from the real pci.ids."""

    def facts(name: str, **overrides) -> dict:
        root = fixture_host(name, **overrides)
        return facts_module.discover(os.path.join(root, "sys"), os.path.join(root, "proc"), pci_ids_db)

    return facts
