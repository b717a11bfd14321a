"""Fixtures for the Nova PCI / kolla-ansible tests (helpers live in nova_helpers.py)."""

import pytest

from nova_helpers import write_inventory


@pytest.fixture
def inventory(tmp_path):
    return write_inventory(tmp_path / "inventory.json", ["gpu1", "gpu2", "gpu3"])
