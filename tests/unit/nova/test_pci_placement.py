"""plugins/module_utils/nova/placement.py: releases, the names devices get in Placement, when the scheduler may switch.

Examples, properties (hypothesis), and the names compared with Nova's own normalisation (the OpenStack services
venv, built or waited for: never skipped)."""

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import openstack_python

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement as pp


@pytest.mark.parametrize("release, expected", [
    ("2026.1", dict(report=True, schedule=True, one_time_use=True)),
    ("master", dict(report=True, schedule=True, one_time_use=True)),
    ("2025.2", dict(report=True, schedule=True, one_time_use=True)),
    ("flamingo", dict(report=True, schedule=True, one_time_use=True)),
    # Nova 31 (2025.1 "Epoxy") has no one_time_use tag: it first ships in Nova 32.0.0 (2025.2).
    ("2025.1", dict(report=True, schedule=True, one_time_use=False)),
    ("epoxy", dict(report=True, schedule=True, one_time_use=False)),
    ("2024.2", dict(report=True, schedule=True, one_time_use=False)),
    ("2023.1", dict(report=True, schedule=True, one_time_use=False)),
    ("zed", dict(report=True, schedule=False, one_time_use=False)),
    ("Yoga", dict(report=False, schedule=False, one_time_use=False)),
    ("2026.1-debian-bookworm", dict(report=True, schedule=True, one_time_use=True)),
])
def test_features_by_release(release, expected):
    assert pp.features(release) == expected


@pytest.mark.parametrize("bad", ["2026.3", "26.1", "", "latest", "2026", 2026.1, None])
def test_unknown_release_names_the_accepted_forms(bad):
    with pytest.raises(ValueError) as err:
        pp.series(bad)
    assert "2026.1" in str(err.value)


@pytest.mark.parametrize("alias, expected", [
    ("tesla-v100", "CUSTOM_GPU_TESLA_V100"),
    ("rtx-a4000", "CUSTOM_GPU_RTX_A4000"),
    ("RTX 2080 Ti", "CUSTOM_GPU_RTX_2080_TI"),
    ("--a100--80gb--", "CUSTOM_GPU_A100_80GB"),
])
def test_resource_class_rule(alias, expected):
    assert pp.resource_class(alias) == expected


def test_resource_class_refusals_say_why():
    with pytest.raises(ValueError, match="no letter or digit"):
        pp.resource_class("---")
    with pytest.raises(ValueError, match="Placement allows 255"):
        pp.resource_class("a" * 250)


def test_device_traits():
    dev = {"vendor_id": "10de", "product_id": "1db4", "numa_node": 1}
    assert pp.device_traits(dev) == ["CUSTOM_GPU_10DE_1DB4", "CUSTOM_NUMA_NODE_1"]
    for unknown in (None, -1, True, "0"):
        assert pp.device_traits(dict(dev, numa_node=unknown)) == ["CUSTOM_GPU_10DE_1DB4"]


ALIASES = st.text(st.characters(codec="ascii", exclude_characters=":,"), min_size=1, max_size=80)


@given(ALIASES)
@settings(max_examples=300)
def test_every_resource_class_is_already_normal(alias):
    try:
        name = pp.resource_class(alias)
    except ValueError:
        return
    assert pp.is_custom(name) and "__" not in name[len("CUSTOM_GPU_"):] and not name.endswith("_")


@given(st.lists(st.fixed_dictionaries({"address": st.from_regex(r"0000:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]",
                                                                 fullmatch=True),
                                        "resource_class": st.sampled_from(["CUSTOM_GPU_A", "CUSTOM_GPU_B"])}),
                unique_by=lambda s: s["address"], max_size=6),
       st.sets(st.integers(0, 5)), st.booleans())
def test_placement_missing_lists_exactly_the_devices_without_their_provider(specs, present, wrong_class):
    devices = [{"name": pp.provider_name("hv1", s["address"]), "host": "hv1",
                "resource_class": "CUSTOM_PCI_10DE_1DB4" if wrong_class else s["resource_class"]}
               for i, s in enumerate(specs) if i in present]
    missing = pp.placement_missing({"gpu1": specs}, devices, {"gpu1": "hv1"})
    expected = [s["address"] for i, s in enumerate(specs) if i not in present or wrong_class]
    assert [m.split(" ")[0] for m in missing.get("gpu1", [])] == expected


def test_placement_missing_names_provider_and_class():
    specs = {"gpu1": [{"address": "0000:27:00.0", "resource_class": "CUSTOM_GPU_TESLA_V100"}],
             "gpu2": [], "gpu3": [{"address": "0000:41:00.0", "resource_class": "CUSTOM_GPU_A"}]}
    devices = [{"name": "gpu1.example_0000:27:00.0", "host": "gpu1.example", "resource_class": "CUSTOM_PCI_10DE_1DB4"}]
    assert pp.placement_missing(specs, devices, {"gpu1": "gpu1.example"}) == {
        "gpu1": ["0000:27:00.0 (provider gpu1.example_0000:27:00.0 has CUSTOM_PCI_10DE_1DB4, the rendered device_spec "
                 "says CUSTOM_GPU_TESLA_V100)"],
        "gpu3": ["0000:41:00.0 (no provider gpu3_0000:41:00.0)"]}


def test_names_are_what_nova_reports():
    """Nova's own normalisation (nova.compute.pci_placement_translator) keeps our names as written."""
    names = [pp.resource_class(a) for a in ("tesla-v100", "RTX 2080 Ti", "a100")]
    traits = pp.device_traits({"vendor_id": "10de", "product_id": "1db4", "numa_node": 3})
    code = ("import json, sys\n"
            "from nova.compute import pci_placement_translator as t\n"
            "names, traits = json.loads(sys.argv[1])\n"
            "print(json.dumps([[t.get_resource_class(n, '10de', '1db4') for n in names],"
            " sorted(t.get_traits(','.join(traits)))]))\n")
    out = subprocess.run([openstack_python(), "-c", code, json.dumps([names, traits])], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert json.loads(out) == [names, sorted(traits)]
