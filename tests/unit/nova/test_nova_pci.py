"""Unit tests for plugins/filter/nova_pci.py: every branch, error branches with the bad input."""

import importlib.util
import json
import pathlib
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ogc_testlib import collection_plugin, openstack_python

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import override_ini

ROOT = pathlib.Path(__file__).resolve().parents[3]
nova_pci = collection_plugin("filter", "nova_pci")

BEGIN = "# BEGIN open-gpu-cloud nova_pci"
END = "# END open-gpu-cloud nova_pci"


def dev(address, product="1db4", vendor="10de", device_type="type-PCI", alias="tesla-v100"):
    return {"address": address, "vendor_id": vendor, "product_id": product,
            "device_type": device_type, "alias": alias, "iommu_group": "1", "numa_node": 0,
            "model": "x"}


def alias(name="tesla-v100", product="1db4", vendor="10de", device_type="type-PCI"):
    return {"name": name, "vendor_id": vendor, "product_id": product, "device_type": device_type}


def plan(host, selected=(), aliases=()):
    return {"host": host, "selected": list(selected), "aliases": list(aliases)}


V100 = plan("seed-v100", [dev("0000:27:00.0"), dev("0000:a3:00.0")], [alias()])
A100 = plan("a100-host", [dev("0000:41:00.0", "20b5", device_type="type-PF", alias="a100")],
            [alias("a100", "20b5", device_type="type-PF")])


# --- nova_pci_aliases -------------------------------------------------------------------------

def test_aliases_one_per_model_sorted():
    twin = plan("seed-v100-b", [dev("0000:01:00.0")], [alias()])
    assert nova_pci.nova_pci_aliases({"seed-v100": V100, "a100-host": A100, "seed-v100-b": twin}) == [
        alias("a100", "20b5", device_type="type-PF"), alias()]


def test_aliases_two_models_on_one_host_give_two_aliases():
    mixed = plan("mixed", [dev("0000:01:00.0"), dev("0000:02:00.0", "2204", alias="rtx3090")],
                 [alias(), alias("rtx3090", "2204")])
    assert [a["name"] for a in nova_pci.nova_pci_aliases({"mixed": mixed})] == ["rtx3090", "tesla-v100"]


def test_aliases_empty_plans_and_host_without_aliases():
    assert nova_pci.nova_pci_aliases({}) == []
    assert nova_pci.nova_pci_aliases({"h": {"selected": []}}) == []


def test_aliases_same_name_different_models_names_both_hosts():
    other = plan("rtx-box", [dev("0000:01:00.0", "2204")], [alias("tesla-v100", "2204")])
    with pytest.raises(AnsibleFilterError) as err:
        nova_pci.nova_pci_aliases({"seed-v100": V100, "rtx-box": other})
    msg = str(err.value)
    assert "alias name tesla-v100" in msg and "rtx-box" in msg and "seed-v100" in msg
    assert "10de:1db4" in msg and "10de:2204" in msg and "alias_names" in msg


def test_aliases_same_model_different_device_types():
    sriov = plan("v100-pf", [dev("0000:01:00.0", device_type="type-PF")], [alias(device_type="type-PF")])
    with pytest.raises(AnsibleFilterError, match=r"type-PCI on host seed-v100 but type-PF on host v100-pf"):
        nova_pci.nova_pci_aliases({"seed-v100": V100, "v100-pf": sriov})


def test_aliases_same_model_different_names():
    renamed = plan("v100-b", [dev("0000:01:00.0", alias="v100")], [alias("v100")])
    with pytest.raises(AnsibleFilterError, match=r"called tesla-v100 on host seed-v100 but v100 on host v100-b"):
        nova_pci.nova_pci_aliases({"seed-v100": V100, "v100-b": renamed})


@pytest.mark.parametrize("bad, needle", [
    ("not a dict", "plans must be a mapping"),
    ({"h": ["x"]}, "plan of host h must be a mapping"),
    ({"h": plan("other")}, "plan given for host h says it belongs to host other"),
    ({"h": {"aliases": "tesla"}}, "plan.aliases must be a list"),
    ({"h": {"aliases": ["tesla"]}}, "an alias must be a mapping"),
    ({"h": {"aliases": [alias("bad:name")]}}, "alias name 'bad:name' is not usable in a flavor extra spec: an alias name cannot contain ':'"),
    ({"h": {"aliases": [alias(vendor="10DE")]}}, "vendor_id '10DE'"),
    ({"h": {"aliases": [alias(product=None)]}}, "product_id None"),
    ({"h": {"aliases": [alias(device_type="type-VDPA")]}}, "device_type 'type-VDPA'"),
])
def test_aliases_bad_input(bad, needle):
    with pytest.raises(AnsibleFilterError) as err:
        nova_pci.nova_pci_aliases(bad)
    assert needle in str(err.value)


# --- nova_pci_device_spec ---------------------------------------------------------------------

def test_device_spec_exactly_selected_sorted():
    p = plan("seed-v100", [dev("0000:a3:00.0"), dev("0000:27:00.0")])
    assert nova_pci.nova_pci_device_spec(p, "seed-v100") == [
        {"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4"},
        {"address": "0000:a3:00.0", "vendor_id": "10de", "product_id": "1db4"}]


def test_device_spec_nothing_selected():
    assert nova_pci.nova_pci_device_spec(plan("h"), "h") == []
    assert nova_pci.nova_pci_device_spec({"selected": None}, "h") == []


@pytest.mark.parametrize("selected, needle", [
    ("0000:27:00.0", "plan.selected must be a list"),
    (["0000:27:00.0"], "a selected device must be a mapping"),
    ([dev("27:00.0")], "address '27:00.0' is not a full PCI address"),
    ([dev("0000:27:00.0"), dev("0000:27:00.0")], "device 0000:27:00.0 is selected twice"),
    ([dev("0000:27:00.0", product="1DB4")], "device 0000:27:00.0 has product_id '1DB4'"),
])
def test_device_spec_bad_input(selected, needle):
    with pytest.raises(AnsibleFilterError) as err:
        nova_pci.nova_pci_device_spec({"selected": selected}, "gpu7")
    assert needle in str(err.value) and "gpu7" in str(err.value)


def test_device_spec_plan_of_other_host():
    with pytest.raises(AnsibleFilterError, match="belongs to host seed-v100"):
        nova_pci.nova_pci_device_spec(V100, "gpu7")


# --- scheduler filters ------------------------------------------------------------------------

def test_enabled_filters_defaults_plus_pci():
    assert nova_pci.nova_pci_enabled_filters() == [
        "ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
        "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter", "PciPassthroughFilter"]


def test_enabled_filters_extra_appended_without_duplicates():
    assert nova_pci.nova_pci_enabled_filters(["NUMATopologyFilter", "ComputeFilter"])[-2:] == [
        "PciPassthroughFilter", "NUMATopologyFilter"]


@pytest.mark.parametrize("bad", ["NUMATopologyFilter", [""], [3]])
def test_enabled_filters_bad_extra(bad):
    with pytest.raises(AnsibleFilterError, match="list of filter class names"):
        nova_pci.nova_pci_enabled_filters(bad)


def test_available_filters():
    assert nova_pci.nova_pci_available_filters() == ["nova.scheduler.filters.all_filters"]


def test_pinned_defaults_match_novas_own_option():
    """The pinned list must be Nova 2026.1's own default (read from nova.conf in the venv)."""
    code = ("import json; from nova.conf import scheduler as s; "
            "o = {x.name: x.default for x in s.filter_scheduler_opts}; "
            "print(json.dumps([o['enabled_filters'], o['available_filters']]))")
    out = subprocess.run([openstack_python(), "-c", code], check=True, capture_output=True,
                         text=True, cwd="/").stdout
    enabled, available = json.loads(out)
    assert list(nova_pci.NOVA_DEFAULT_ENABLED_FILTERS) == enabled
    assert list(nova_pci.NOVA_AVAILABLE_FILTERS) == available


# --- nova_pci_override_check ------------------------------------------------------------------

ALIASES = [alias()]


def check(files, hosts=("seed-v100",), controllers=("ctl1",)):
    return nova_pci.nova_pci_override_check(files, list(hosts), ALIASES, BEGIN, END, list(controllers))


def test_check_clean_operator_files_and_our_block_ignored():
    files = {
        "global.conf": "[DEFAULT]\ndebug = True\n",
        "nova.conf": "[DEFAULT]\n# a comment\n; another\n{% if x %}\ncpu_allocation_ratio = 4.0\n"
                     "{% endif %}\n" + BEGIN + "\n[pci]\nalias = {}\ndevice_spec = {}\n"
                     "[filter_scheduler]\nenabled_filters = ComputeFilter\n" + END + "\n",
        "nova/seed-v100/nova.conf": BEGIN + "\n[pci]\ndevice_spec = {\"address\": \"x\"}\n" + END + "\n",
    }
    assert check(files) == {"conflicts": [], "operator_filters": {}, "report_in_placement": False,
                            "pci_in_placement": False}


def test_check_device_spec_in_host_file_is_conflict():
    files = {"nova/seed-v100/nova-compute.conf": "[pci]\ndevice_spec = {\"vendor_id\": \"10de\"}\n"}
    (msg,) = check(files)["conflicts"]
    assert msg.startswith("nova/seed-v100/nova-compute.conf line 2 sets [pci] device_spec")
    assert "seed-v100" in msg and "Remove the key" in msg


def test_check_deprecated_whitelist_in_global_file_is_conflict_per_host():
    files = {"global.conf": "[pci]\npassthrough_whitelist = {}\n"}
    res = check(files, hosts=("a", "b"))["conflicts"]
    assert len(res) == 2 and all("passthrough_whitelist" in m for m in res)


def test_check_device_spec_for_unmanaged_host_is_fine():
    files = {"nova/other/nova.conf": "[pci]\ndevice_spec = {}\n"}
    assert check(files)["conflicts"] == []


def test_check_enabled_filters_without_pci_filter():
    files = {"nova/nova-scheduler.conf": "[filter_scheduler]\nenabled_filters = ComputeFilter, ImagePropertiesFilter\n"}
    (msg,) = check(files)["conflicts"]
    assert "nova/nova-scheduler.conf line 2 sets [filter_scheduler] enabled_filters" in msg
    assert "Add PciPassthroughFilter" in msg


def test_check_enabled_filters_on_controller_host_file():
    files = {"nova/ctl1/nova.conf": "[filter_scheduler]\nenabled_filters = ComputeFilter\n"}
    assert "nova/ctl1/nova.conf" in check(files)["conflicts"][0]


def test_check_operator_filters_with_pci_filter_are_kept():
    files = {"nova.conf": "[filter_scheduler]\nenabled_filters = ComputeFilter,PciPassthroughFilter\n"}
    res = check(files)
    assert res["conflicts"] == []
    assert res["operator_filters"] == {"nova.conf": ["ComputeFilter", "PciPassthroughFilter"]}


def test_check_operator_alias_in_same_file_adds():
    files = {"nova.conf": '[pci]\nalias = {"name": "my-nic", "vendor_id": "8086", "product_id": "1572"}\n'
                          'alias = not json\n'}
    assert check(files)["conflicts"] == []


def test_check_operator_alias_with_our_name():
    files = {"nova.conf": '[pci]\nalias = {"name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4"}\n'}
    (msg,) = check(files)["conflicts"]
    assert "defines [pci] alias tesla-v100" in msg


def test_check_operator_alias_in_other_file():
    files = {"nova/nova-api.conf": '[pci]\nalias = {"name": "x"}\n'}
    (msg,) = check(files)["conflicts"]
    assert msg.startswith("nova/nova-api.conf line 2 sets [pci] alias") and "Move it into nova.conf" in msg


def test_check_continuation_and_keyless_lines_skipped():
    files = {"nova.conf": "[pci]\nalias = {}\n    device_spec = {}\nnonsense line\n"}
    assert check(files)["conflicts"] == []


@pytest.mark.parametrize("value, expected", [("True", True), ("false", False)])
def test_check_reads_report_in_placement_from_our_block(value, expected):
    files = {"nova.conf": f"{BEGIN}\n[pci]\nreport_in_placement = {value}\n{END}\n"}
    assert check(files)["report_in_placement"] is expected


@pytest.mark.parametrize("args, needle", [
    (("x", ["h"]), "files must be a mapping"),
    (({}, "h"), "hosts must be a list"),
    (({"nova.conf": None}, ["h"]), "content of nova.conf must be text"),
])
def test_check_bad_input(args, needle):
    with pytest.raises(AnsibleFilterError, match=needle):
        nova_pci.nova_pci_override_check(*args, ALIASES, BEGIN, END)


def test_filter_module_exports():
    names = nova_pci.FilterModule().filters()
    assert set(names) == {"nova_pci_aliases", "nova_pci_device_spec", "nova_pci_enabled_filters",
                          "nova_pci_available_filters", "nova_pci_override_check", "nova_pci_release_features",
                          "nova_pci_fleet_specs", "nova_pci_placement_missing", "nova_pci_hypervisor_names"}


# --- section names and keys as oslo.config reads them ----------------------------------------------

@pytest.mark.parametrize("header", ["[PCI]", "[Pci]", "[pci]"])
def test_check_section_names_are_oslo_groups(header):
    """oslo.config lowercases every group name but DEFAULT (cfg._normalize_group_name): [PCI] is [pci]."""
    files = {"nova/seed-v100/nova-compute.conf": header + "\ndevice_spec = {\"vendor_id\": \"10de\"}\n",
             "nova/nova-scheduler.conf": header.replace("PCI", "FILTER_SCHEDULER").replace("Pci", "Filter_Scheduler")
             .replace("pci", "filter_scheduler") + "\nenabled_filters = ComputeFilter\n"}
    conflicts = check(files)["conflicts"]
    assert len(conflicts) == 2
    assert conflicts[0].startswith("nova/seed-v100/nova-compute.conf line 2 sets [pci] device_spec")
    assert "enabled_filters = ComputeFilter without PciPassthroughFilter" in conflicts[1]


def test_check_colon_assignments_count_like_oslo():
    files = {"nova/seed-v100/nova.conf": "[pci]\ndevice_spec: {\"vendor_id\": \"10de\"}\n"}
    (msg,) = check(files)["conflicts"]
    assert "line 2 sets [pci] device_spec" in msg


def test_oslo_group_names_match_oslo_config_itself():
    """The same answers as oslo.config itself (the OpenStack services venv, built or waited for: never skipped)."""
    names = ["PCI", "pci", "DEFAULT", "Default", "default", "Filter_Scheduler", " pci "]
    code = "import json, sys; from oslo_config import cfg; print(json.dumps([cfg._normalize_group_name(n) for n in json.loads(sys.argv[1])]))"
    out = subprocess.run([openstack_python(), "-c", code, json.dumps(names)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert json.loads(out) == [override_ini.oslo_group_name(n) for n in names]


# --- PCI in Placement ------------------------------------------------------------------------


def test_placement_aliases_and_specs_name_the_model_class_and_traits():
    aliases = nova_pci.nova_pci_aliases({"seed-v100": V100, "a100-host": A100}, "required", True)
    assert aliases == [
        {"name": "a100", "vendor_id": "10de", "product_id": "20b5", "device_type": "type-PF",
         "numa_policy": "required", "resource_class": "CUSTOM_GPU_A100"},
        {"name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI",
         "numa_policy": "required", "resource_class": "CUSTOM_GPU_TESLA_V100"}]
    specs = nova_pci.nova_pci_device_spec(V100, "seed-v100", True, True)
    assert specs[0] == {"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4",
                        "resource_class": "CUSTOM_GPU_TESLA_V100", "traits": "CUSTOM_GPU_10DE_1DB4,CUSTOM_NUMA_NODE_0",
                        "one_time_use": "true"}
    assert nova_pci.nova_pci_fleet_specs({"seed-v100": V100}, True) == {
        "seed-v100": nova_pci.nova_pci_device_spec(V100, "seed-v100", True)}


def test_two_aliases_with_one_resource_class_are_refused():
    twin = plan("b", [dev("0000:01:00.0", "20b5", alias="tesla_v100")], [alias("tesla_v100", "20b5")])
    with pytest.raises(AnsibleFilterError, match="aliases tesla-v100 and tesla_v100 both give the resource class "
                                                 "CUSTOM_GPU_TESLA_V100"):
        nova_pci.nova_pci_aliases({"seed-v100": V100, "b": twin}, None, True)
    # Without Placement the two names do not meet.
    assert len(nova_pci.nova_pci_aliases({"seed-v100": V100, "b": twin})) == 2


def test_bad_numa_policy_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="fix nova_pci_config_numa_policy"):
        nova_pci.nova_pci_aliases({"seed-v100": V100}, "strict")


def test_release_features_filter_reports_the_error_instead_of_raising():
    assert nova_pci.nova_pci_release_features("2026.1") == dict(report=True, schedule=True, one_time_use=True,
                                                                 error="")
    assert "not a release this project knows" in nova_pci.nova_pci_release_features("v26")["error"]


def test_hypervisor_names():
    hostvars = {"a": {"nova_hypervisor_hostname": "a.example"}, "b": {"health_nova_host": "b.hv"}, "c": {}}
    assert nova_pci.nova_pci_hypervisor_names(["a", "b", "c", "d"], hostvars, {"c": "c.override"}) == {
        "a": "a.example", "b": "b.hv", "c": "c.override", "d": "d"}
    with pytest.raises(AnsibleFilterError, match="fix nova_hypervisor_hostname"):
        nova_pci.nova_pci_hypervisor_names(["a"], {"a": {"nova_hypervisor_hostname": 5}})


@pytest.mark.parametrize("path, section, key", [
    ("nova.conf", "pci", "report_in_placement"), ("nova/nova-scheduler.conf", "filter_scheduler", "pci_in_placement"),
    ("nova/seed-v100/nova.conf", "pci", "report_in_placement")])
def test_operator_placement_switches_are_conflicts(path, section, key):
    (msg,) = check({path: f"[{section}]\n{key} = true\n"})["conflicts"]
    assert f"{path} line 2 sets [{section}] {key} = true" in msg and "nova_pci_config_placement" in msg


def test_check_reads_both_switches_from_our_block():
    files = {"nova.conf": f"{BEGIN}\n[pci]\nreport_in_placement = true\n[filter_scheduler]\npci_in_placement = true\n{END}\n"}
    got = check(files)
    assert got["report_in_placement"] is True and got["pci_in_placement"] is True and got["conflicts"] == []
