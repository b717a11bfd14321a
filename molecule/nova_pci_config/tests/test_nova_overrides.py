"""Verify the Nova overrides nova.yml wrote from the simulated hosts' plans."""

import json
import os

import pytest

CONFIG = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "kolla-config")

DEVICE_SPECS = {
    "seed-v100": ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0"],
    "consumer-rtx": ["0000:01:00.0", "0000:02:00.0"],
}


def values(path, key):
    with open(path, encoding="utf-8") as handle:
        return [line.split("=", 1)[1].strip() for line in handle if line.startswith(key + " =")]


@pytest.mark.parametrize("host", sorted(DEVICE_SPECS))
def test_device_spec_per_host(host):
    specs = [json.loads(v) for v in values(os.path.join(CONFIG, "nova", host, "nova.conf"), "device_spec")]
    assert [s["address"] for s in specs] == DEVICE_SPECS[host]


def test_two_models_on_one_host_and_no_gpu_host():
    specs = [json.loads(v) for v in values(os.path.join(CONFIG, "nova", "a100-t4", "nova.conf"), "device_spec")]
    assert len({s["product_id"] for s in specs}) == 2
    assert not os.path.exists(os.path.join(CONFIG, "nova", "intel-pre-iommu"))


def test_global_aliases_filters_and_operator_setting():
    path = os.path.join(CONFIG, "nova.conf")
    with open(path, encoding="utf-8") as handle:
        assert handle.read().startswith("[DEFAULT]\ncpu_allocation_ratio = 3.0\n# BEGIN open-gpu-cloud")
    aliases = {json.loads(v)["name"]: json.loads(v)["device_type"] for v in values(path, "alias")}
    assert len(aliases) == 4 and aliases["tesla-v100"] == "type-PCI"
    assert sorted(set(aliases.values())) == ["type-PCI", "type-PF"]
    assert values(path, "enabled_filters")[0].endswith(",PciPassthroughFilter")
