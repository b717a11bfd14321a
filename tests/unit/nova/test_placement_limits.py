"""plugins/module_utils/nova/placement_limits.py: Placement's bounds on allocation candidates for hosts with several
GPUs of one model. Examples, properties (hypothesis), and the rendered lines read by Placement's own option
definitions (the OpenStack services venv: Placement 15.0.0)."""

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import openstack_python

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement_limits as pl

V100 = "CUSTOM_GPU_TESLA_V100"
H100 = "CUSTOM_GPU_H100"


def test_nothing_without_pci_in_placement_or_without_a_wide_host():
    assert pl.candidate_limits("2026.1", False, {"gpu-1": {V100: 8}})["options"] == {}
    assert pl.candidate_limits("2026.1", True, {"gpu-1": {V100: 1}, "gpu-2": {H100: 1}})["options"] == {}
    assert pl.candidate_limits("2026.1", True, {})["options"] == {}


def test_a_host_with_two_gpus_of_a_model_gets_breadth_first_and_a_limit():
    got = pl.candidate_limits("2026.1", True, {"seed-v100": {V100: 4}, "gpu-2": {H100: 1}}, {V100: 1})
    assert got["options"] == {"placement": {"max_allocation_candidates": 100000,
                                            "allocation_candidates_generation_strategy": "breadth-first"}}
    assert got["reasons"] == ["seed-v100 offers 4 GPUs of CUSTOM_GPU_TESLA_V100: candidates visited breadth-first "
                              "(every host gets its turn before Nova's limit), at most 100000 generated per request"]


def test_eight_of_a_model_and_a_flavor_of_more_than_four_turn_the_wide_tree_optimisation_on():
    hosts = {"gpu-8": {H100: 8}}
    got = pl.candidate_limits("2026.1", True, hosts, {H100: 8})
    assert got["options"] == {"placement": {"max_allocation_candidates": 1000,
                                            "allocation_candidates_generation_strategy": "breadth-first"},
                              "workarounds": {"optimize_for_wide_provider_trees": True}}
    assert "gpu-8 offers 8 GPUs of CUSTOM_GPU_H100 and a flavor asks 8 of them" in got["reasons"][1]
    assert got["reasons"][0].endswith("at most 1000 generated per request")
    # Flavors of four or fewer: Placement says not to enable it.
    small = pl.candidate_limits("2026.1", True, hosts, {H100: 4})
    assert "workarounds" not in small["options"] and "stays off" in small["reasons"][1]
    # Flavors unknown here: a flavor may ask for the whole host.
    unknown = pl.candidate_limits("2026.1", True, hosts, None)
    assert unknown["options"]["workarounds"] == {"optimize_for_wide_provider_trees": True}
    assert "a flavor may ask for all of them" in unknown["reasons"][1]


@pytest.mark.parametrize("release, limits, workaround", [
    ("2023.1", False, False), ("zed", False, False), ("2023.2", True, False), ("2024.1", True, False),
    ("2024.2", True, True), ("2025.1", True, True), ("2026.1", True, True), ("master", True, True)])
def test_each_release_gets_the_options_it_has(release, limits, workaround):
    got = pl.candidate_limits(release, True, {"gpu-8": {H100: 8}}, {H100: 8})
    assert ("placement" in got["options"]) is limits
    assert ("workarounds" in got["options"]) is workaround
    if limits and not workaround:
        assert "has no wide-tree optimisation (from 2024.2)" in got["reasons"][1]


def test_an_unknown_release_is_refused():
    with pytest.raises(ValueError, match="2026.1"):
        pl.candidate_limits("antelope-ish", True, {"gpu-8": {H100: 8}})


def test_largest_requests_adds_a_flavors_aliases_of_one_class():
    flavors = {"a": [("tesla-v100", 2)], "b": [("h100", 4), ("tesla-v100", 1)], "c": [("h100", 3), ("H100", 2)]}
    assert pl.largest_requests(flavors) == {V100: 2, H100: 5}


def test_render_is_ini_in_a_fixed_order():
    assert pl.render({"workarounds": {"optimize_for_wide_provider_trees": True},
                      "placement": {"max_allocation_candidates": 1000,
                                    "allocation_candidates_generation_strategy": "breadth-first"}}) == (
        "[placement]\nallocation_candidates_generation_strategy = breadth-first\nmax_allocation_candidates = 1000\n"
        "[workarounds]\noptimize_for_wide_provider_trees = true")


hosts = st.dictionaries(st.sampled_from(["gpu-1", "gpu-2", "gpu-3"]),
                        st.dictionaries(st.sampled_from([V100, H100]), st.integers(1, 16), max_size=2), max_size=3)


@settings(max_examples=200, deadline=None)
@given(hosts, st.one_of(st.none(), st.dictionaries(st.sampled_from([V100, H100]), st.integers(1, 16))),
       st.sampled_from(["2023.1", "2023.2", "2024.2", "2026.1"]))
def test_the_options_are_placements_own_and_come_together(host_classes, requests, release):
    """Whatever the hosts: the options are only Placement's own three; a limit comes with breadth-first (so every
    host is visited before it is reached); the workaround comes with the smaller limit; and nothing is set unless a
    host has two or more of a class."""
    got = pl.candidate_limits(release, True, host_classes, requests)["options"]
    assert {(s, o) for s in got for o in got[s]} <= set(pl.OPTIONS)
    wide = max((n for classes in host_classes.values() for n in classes.values()), default=0)
    if wide < 2:
        assert got == {}
    if got:
        assert got["placement"]["allocation_candidates_generation_strategy"] == "breadth-first"
        assert got["placement"]["max_allocation_candidates"] in (pl.MAX_CANDIDATES, pl.MAX_CANDIDATES_WIDE_TREES)
        assert ("workarounds" in got) == (got["placement"]["max_allocation_candidates"] == 1000)
    if "workarounds" in got:  # Placement's "when to enable": 8 or more children, more than 4 asked
        assert any(n >= 8 and (requests is None or requests.get(rc, 0) > 4)
                   for classes in host_classes.values() for rc, n in classes.items())


def test_placements_own_options_read_the_rendered_lines(tmp_path):
    """Placement 15.0.0's option definitions (placement.conf.register_opts) parse what render() writes, with the
    types and choices they declare."""
    got = pl.candidate_limits("2026.1", True, {"gpu-8": {H100: 8}}, {H100: 8})
    conf = tmp_path / "placement.conf"
    conf.write_text("[placement_database]\nconnection = sqlite://\n" + pl.render(got["options"]) + "\n")
    code = ("import json, sys\nfrom oslo_config import cfg\nimport placement.conf\nc = cfg.ConfigOpts()\n"
            "placement.conf.register_opts(c)\nc(['--config-file', sys.argv[1]], project='placement', "
            "default_config_files=[])\nprint(json.dumps([c.placement.max_allocation_candidates, "
            "c.placement.allocation_candidates_generation_strategy, c.workarounds.optimize_for_wide_provider_trees]))")
    out = subprocess.run([openstack_python(), "-c", code, str(conf)], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    assert json.loads(out) == [1000, "breadth-first", True]


def test_for_deployment_counts_the_hosts_device_specs_and_reads_the_declared_flavors():
    specs = {"seed-v100": [{"address": f"0000:{n:02x}:00.0", "resource_class": V100} for n in range(4)],
             "gpu-8": [{"address": f"0000:{n:02x}:00.0", "resource_class": H100} for n in range(8)],
             "pools-only": [{"address": "0000:01:00.0"}]}
    flavors = [{"name": "gpu_tiny", "extra_specs": {"pci_passthrough:alias": "tesla-v100:1"}},
               {"name": "h100x8", "extra_specs": {"pci_passthrough:alias": "h100:8"}},
               {"name": "broken", "extra_specs": {"pci_passthrough:alias": "h100"}},  # the cloud phase refuses it
               {"name": "cpu"}]
    assert pl.host_classes_of(specs) == {"seed-v100": {V100: 4}, "gpu-8": {H100: 8}}
    assert pl.flavor_aliases(flavors) == {"gpu_tiny": [("tesla-v100", 1)], "h100x8": [("h100", 8)]}
    got = pl.for_deployment(specs, "2026.1", True, flavors)
    assert got["options"]["workarounds"] == {"optimize_for_wide_provider_trees": True}
    assert got["text"].startswith("[placement]\nallocation_candidates_generation_strategy = breadth-first\n")
    assert pl.for_deployment(specs, "2026.1", True, flavors[:1])["options"]["placement"]["max_allocation_candidates"] \
        == 100000
    assert pl.for_deployment({}, "2026.1", True, None) == dict(options={}, wide=False, reasons=[
        "no host offers two or more GPUs of one model: Placement's defaults hold"], text="")


def test_the_operators_own_settings_are_found_outside_the_block_only():
    begin, end = "# BEGIN managed", "# END managed"
    files = {
        "placement.conf": f"[placement]\nmax_allocation_candidates = 50\n{begin}\n[workarounds]\n"
                          f"optimize_for_wide_provider_trees = true\n{end}\n",
        "global.conf": "[DEFAULT]\ndebug = true\n[workarounds]\n# optimize_for_wide_provider_trees = true\n",
        "placement/ctl-1/placement.conf": "[placement]\nallocation_candidates_generation_strategy=depth-first\n",
    }
    assert pl.operator_settings(files, begin, end) == [
        "placement.conf: [placement] max_allocation_candidates",
        "placement/ctl-1/placement.conf: [placement] allocation_candidates_generation_strategy"]
