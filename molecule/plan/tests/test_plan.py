"""Verify the plans written by playbooks/plan.yml on each simulated host."""

import json
import os

import pytest

PLANS = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "plans")

EXPECTED = {
    "seed-v100": {"selected": ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"],
                  "vfio_ids": ["10de:1db4"], "bind_by_address": []},
    "intel-pre-iommu": {"selected": [], "vfio_ids": ["10de:1eb8"], "bind_by_address": []},
    "consumer-rtx": {"selected": ["0000:01:00.0", "0000:02:00.0"],
                     "vfio_ids": ["10de:10f7", "10de:1ad6", "10de:1ad7", "10de:1e07"], "bind_by_address": []},
    "shared-group": {"selected": ["0000:01:00.0"], "vfio_ids": [], "bind_by_address": ["0000:01:00.0", "0000:01:00.1"]},
    "console-twin": {"selected": ["0000:0b:00.0"], "vfio_ids": [],
                     "bind_by_address": ["0000:0b:00.0", "0000:0b:00.1", "0000:0b:00.2", "0000:0b:00.3"]},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_plan_file(name):
    with open(os.path.join(PLANS, f"{name}.json"), encoding="utf-8") as handle:
        data = json.load(handle)
    plan = data["plan"]
    assert plan["host"] == name
    assert [s["address"] for s in plan["selected"]] == EXPECTED[name]["selected"]
    assert plan["vfio_ids"] == EXPECTED[name]["vfio_ids"]
    assert plan["bind_by_address"] == EXPECTED[name]["bind_by_address"]
    assert data["facts"]["devices"], "facts are stored beside the plan"


def test_plans_are_not_world_writable(host):
    for name in EXPECTED:
        mode = host.file(os.path.join(PLANS, f"{name}.json")).mode
        assert mode == 0o644
