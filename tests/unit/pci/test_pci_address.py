"""plugins/module_utils/pci/address.py: the one rule for PCI addresses and ids, and that every reader uses it."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, strategies as st

from ogc_testlib import COLLECTION, ROOT

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address

HEX = "0123456789abcdef"
hexes = lambda n: st.text(alphabet=HEX, min_size=n, max_size=n)  # noqa: E731


@given(domain=hexes(4), bus=hexes(2), slot=hexes(2), function=st.integers(0, 7))
def test_full_and_short_forms_normalise_to_the_kernels(domain, bus, slot, function):
    full = f"{domain}:{bus}:{slot}.{function}"
    assert pci_address.is_address(full)
    assert pci_address.normalise_address(full) == full
    assert pci_address.normalise_address(f"  {full.upper()} ") == full
    assert pci_address.normalise_address(f"{bus}:{slot}.{function}") == f"0000:{bus}:{slot}.{function}"
    assert pci_address.normalise_address(pci_address.normalise_address(full)) == full


@given(st.text(max_size=20))
def test_whatever_normalises_is_an_address(text):
    out = pci_address.normalise_address(text)
    assert out is None or pci_address.is_address(out)


@pytest.mark.parametrize("value", ["0000:27:00.8", "0000:27:00", "27.00.0", "0000:g7:00.0", "", None, 2700, 1620.0,
                                   ["0000:27:00.0"]])
def test_not_addresses(value):
    assert pci_address.normalise_address(value) is None
    assert not pci_address.is_address(value)


def test_ids():
    assert pci_address.is_id("10de") and not pci_address.is_id("10DE") and not pci_address.is_id(4318)
    assert pci_address.is_model_id("10de:1db4") and not pci_address.is_model_id("10de-1db4")


def test_no_reader_keeps_its_own_address_pattern():
    """Discovery, the planner, the Nova filter and the fixture builder take the rule from pci_address."""
    own = re.compile(r"\{4\}:\[0-9a-f(A-F)?\]\{2\}:")
    for path in (os.path.join(COLLECTION, "plugins/modules/pci_passthrough_facts.py"),
                 os.path.join(COLLECTION, "plugins/module_utils/passthrough/policy.py"),
                 os.path.join(COLLECTION, "plugins/filter/nova_pci.py"), "scripts/mock_sysfs.py"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            text = handle.read()
        assert "pci_address" in text, path
        assert not own.search(text), path
