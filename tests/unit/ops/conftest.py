"""The ops modules under test (plugins/modules/os_server_lifetimes.py) and the seed V100 host as the health and
metrics filters see it; the mocked connection and the module runner come from tests/unit/conftest.py."""

from __future__ import annotations

import copy

import pytest

from ogc_testlib import collection_module


@pytest.fixture(scope="session")
def lifetimes():
    return collection_module("os_server_lifetimes")


@pytest.fixture(scope="module")
def seed(host_facts, planner):
    """(facts, facts with the planned devices on vfio-pci, plan) of the seed V100 host."""
    facts = host_facts("seed-v100")
    plan = planner.passthrough_plan(facts, {}, "seed-v100")
    bound = copy.deepcopy(facts)
    for dev in bound["devices"]:
        if dev["address"] in plan["vfio_devices"]:
            dev["driver"] = "vfio-pci"
    return facts, bound, plan
