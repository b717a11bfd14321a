"""plugins/filter/fleet_report.py over plugins/module_utils/passthrough/fleet.py: the report's data from the loaded plans
({host: {facts, plan}}, as roles/passthrough tasks/load.yml sets them), the hosts without one and health results."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import load_source, collection_plugin

report = collection_plugin("filter", "fleet_report")


def loaded(host, facts, plan):
    """One host's entry of passthrough_plans."""
    return {host: {"facts": facts, "plan": plan}}


@pytest.fixture(scope="module")
def seed(host_facts, planner):
    facts = host_facts("seed-v100")
    return facts, planner.passthrough_plan(facts, {}, "seed")


def test_one_box_per_group_each_device_with_its_verdict(seed):
    facts, plan = seed
    out = report.fleet_report(loaded("seed", facts, plan))
    host = out["hosts"][0]
    assert [g["group"] for g in host["groups"]] == list(facts["iommu_groups"])  # numeric order, every group
    devices = {d["address"]: d for g in host["groups"] for d in g["devices"]}
    assert sorted(devices) == sorted(a for g in facts["iommu_groups"].values() for a in g)
    assert devices["0000:27:00.0"]["verdict"] == "nova" and devices["0000:28:00.0"]["verdict"] == "vfio"
    assert devices["0000:03:00.0"]["verdict"] == "host" and devices["0000:20:03.1"]["verdict"] == "bridge"
    assert devices["0000:61:00.0"]["verdict"] == "other"
    assert "shares IOMMU group 19 with 0000:27:00.0" in devices["0000:28:00.0"]["reason"]
    assert devices["0000:27:00.0"]["model"] == "Tesla V100 PCIe 16GB"
    assert out["models"] == [{"alias": "tesla-v100", "model": "Tesla V100 PCIe 16GB", "device_type": "type-PCI",
                              "count": 4, "hosts": [{"host": "seed", "count": 4}]}]
    assert out["totals"]["health_checked"] is False and out["pending"][0]["host"] == "seed"


def test_boxes_do_not_overlap(seed):
    facts, plan = seed
    groups = report.fleet_report(loaded("seed", facts, plan))["hosts"][0]["groups"]
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            assert a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"] or \
                a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"]
        for d in a["devices"]:
            assert a["y"] < d["y"] and d["y"] + d["height"] <= a["y"] + a["height"]


def test_health_results_mark_missing_gpus_and_alerts(seed):
    facts, plan = seed
    health = {"reports": [{"host": "seed", "missing": ["0000:c3:00.0"], "alerts": ["seed: GPU 0000:c3:00.0 gone"]}]}
    out = report.fleet_report(loaded("seed", facts, plan), health=health)
    devices = {d["address"]: d for g in out["hosts"][0]["groups"] for d in g["devices"]}
    assert devices["0000:c3:00.0"]["verdict"] == "missing"
    assert out["alerts"] == ["seed: GPU 0000:c3:00.0 gone"] and out["hosts"][0]["health"] == "1 alert(s)"


def test_a_host_without_a_plan_file_is_named_with_the_fix():
    out = report.fleet_report({}, missing={"gpu9": "/plans/gpu9.json"})
    assert out["errors"] == ["no plan file for gpu9 (file not found: /plans/gpu9.json): run the plan phase "
                             "(ansible-playbook playbooks/plan.yml) with passthrough_plan_dir set"]
    assert out["hosts"][0]["groups"] == []


def test_hosts_in_name_order_whatever_the_order_given(seed):
    """Loaded plans, other slices' plans and missing hosts in one name order (case-insensitive, then as written):
    the same report whichever slice writes it."""
    facts, plan = seed
    plans = {h: {"facts": facts, "plan": dict(plan, host=h)} for h in ("seed", "Zed", "other", "aa")}
    missing = {"intel": "/plans/intel.json", "ZED": "/plans/ZED.json"}
    out = report.fleet_report(plans, missing=missing)
    assert [h["host"] for h in out["hosts"]] == ["aa", "intel", "other", "seed", "ZED", "Zed"]
    again = report.fleet_report(dict(reversed(list(plans.items()))), missing=dict(reversed(list(missing.items()))))
    assert again == out


@pytest.mark.parametrize("plans, missing, health, needle", [
    ([], None, None, "plans must be the loaded plans {host: {facts, plan}}"),
    ({}, ["h"], None, "missing must be {host: plan file} (passthrough_plans_missing"),
    ({1: {"facts": {}, "plan": {}}}, None, None, "each host of the plans must be its inventory name, got 1"),
    ({}, {1: "/p/1.json"}, None, "each host of missing must be its inventory name, got 1"),
    ({"h": {"plan": {}}}, None, None, "the plan of h lacks 'facts' and 'plan'"),
    ({"h": "{}"}, None, None, "the plan of h lacks 'facts' and 'plan'"),
    ({"h": {"facts": {}, "plan": {}}}, None, None, "the plan file of h is not a plan of this version"),
    ({"h": {"facts": {}, "plan": {}}}, {"h": "/p/h.json"}, None, "h is both among the plans and among the hosts"),
    ({}, None, ["x"], "health must be the health_summary of playbooks/health.yml"),
])
def test_bad_input_named(plans, missing, health, needle):
    with pytest.raises(AnsibleFilterError, match=r"^fleet_report: ") as err:
        report.fleet_report(plans, missing=missing, health=health)
    assert needle in str(err.value)
    with pytest.raises(report.fleet.ReportError) as pure:  # the pure function's error, word for word
        report.fleet.fleet_report(plans, missing=missing, health=health)
    assert str(pure.value) == str(err.value)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=0, max_size=14))
def test_property_layout_keeps_every_group_and_device(sizes):
    groups = [{"devices": [{} for _ in range(n)]} for n in sizes]
    width, height = report.fleet._layout(groups)  # pylint: disable=protected-access
    for g in groups:
        assert 0 <= g["x"] and g["x"] + g["width"] <= width and g["y"] + g["height"] <= height
        assert len(g["devices"]) == 0 or g["devices"][-1]["y"] + g["devices"][-1]["height"] <= g["y"] + g["height"]
    assert (width, height) == (0, 0) if not sizes else width > 0 and height > 0


def render_markdown(data):
    """templates/fleet_report.md.j2 as ansible.builtin.template renders it (trim_blocks), with the filters it uses."""
    import os  # pylint: disable=import-outside-toplevel

    import jinja2  # pylint: disable=import-outside-toplevel
    from ansible.plugins.filter.core import FilterModule as Core  # pylint: disable=import-outside-toplevel

    from ogc_testlib import ROOT  # pylint: disable=import-outside-toplevel

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(Core().filters())
    env.filters.update({f"open_gpu_cloud.toolkit.{name}": filter_ for name, filter_ in report.FilterModule().filters().items()})
    return env.get_template("fleet_report.md.j2").render(report=data, ansible_managed="managed")


def test_markdown_shows_names_as_text_never_as_html_or_table_cells(seed, planner, host_facts):
    """An alias name Nova accepts (no ':' or ',') may hold '|' and HTML: the table keeps its columns and the HTML is
    shown, not rendered."""
    facts = host_facts("seed-v100")
    alias = "<img src=x onerror=alert(1)>|v100"
    plan = planner.passthrough_plan(facts, {"alias_names": {"10de:1db4": alias}}, "seed")
    text = render_markdown(report.fleet_report(loaded("seed", facts, plan)))
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;\\|v100" in text
    row = next(line for line in text.splitlines() if "onerror" in line and line.startswith("| "))
    assert len(row.replace("\\|", "").split("|")) == 7                   # five cells, as the header has
    plain = render_markdown(report.fleet_report(loaded("seed", *seed)))
    assert "| tesla-v100 | Tesla V100 PCIe 16GB | type-PCI | 4 | seed (4) |" in plain


def test_gpus_without_a_usable_reset_and_the_window_sizes_are_shown(seed, planner, host_facts):
    """The fleet lists the GPUs offered to Nova that the kernel has no reset for, and every device its largest 64-bit
    window and reset, as the planner's table has them; a plan stored before these fields shows none."""
    rtx = host_facts("consumer-rtx")
    plans = loaded("rtx", rtx, planner.passthrough_plan(rtx, {}, "rtx"))
    plans.update(loaded("seed", *seed))
    out = report.fleet_report(plans)
    assert out["without_reset"] == [{"host": "rtx", "address": "0000:01:00.0", "model": "GeForce RTX 2080 Ti Rev. A"},
                                    {"host": "rtx", "address": "0000:02:00.0", "model": "GeForce RTX 2080 Ti Rev. A"}]
    assert out["totals"]["gpus_without_reset"] == 2
    hosts = {h["host"]: h for h in out["hosts"]}
    assert (hosts["rtx"]["guest_phys_bits_needed"], hosts["seed"]["guest_phys_bits_needed"]) == (33, 36)
    devices = {d["address"]: d for g in hosts["seed"]["groups"] for d in g["devices"]}
    assert (devices["0000:27:00.0"]["window"], devices["0000:27:00.0"]["reset"]) == ("16G", "bus")
    assert (devices["0000:20:03.1"]["window"], devices["0000:20:03.1"]["reset"]) == ("?", "?")  # not in the facts
    assert {r["address"]: (r["window"], r["reset"]) for r in hosts["rtx"]["rows"]}["0000:02:00.0"] == ("256M", "none")
    text = render_markdown(out)
    assert "- **rtx** 0000:01:00.0 (GeForce RTX 2080 Ti Rev. A): the kernel has no reset for it alone" in text
    assert "| 0000:27:00.0 | Tesla V100 PCIe 16GB | 19 | nouveau | 16G | bus | nova |" in text
    assert "guest physical address bits needed: 36." in text
    # A plan and facts stored before the windows and resets were read: the report still lays them out.
    facts, plan = seed
    old_facts = dict(facts, devices=[{k: v for k, v in d.items() if k not in ("bars", "reset_methods", "resettable")}
                                     for d in facts["devices"]])
    old_plan = {k: v for k, v in plan.items() if k not in ("guest_phys_bits_needed", "ovmf_phys_bits_needed")}
    old = report.fleet_report(loaded("seed", old_facts, old_plan))
    assert old["without_reset"] == [] and old["hosts"][0]["guest_phys_bits_needed"] is None
    assert {r["window"] for r in old["hosts"][0]["rows"]} == {"?"}
    assert "None." in render_markdown(old).split("## GPUs offered without a usable reset")[1].split("##")[0]
