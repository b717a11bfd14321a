"""End to end with the real tools: foundation fixtures -> plans (playbooks/plan.yml) -> our
overrides (playbooks/nova.yml, with an operator override beside them) -> kolla-ansible's own
`genconfig --tags nova,nova-cell,placement` (playbooks/deploy.yml in genconfig mode, test-only stand-ins for
the two container-engine tasks) -> the rendered nova-compute / nova-api / nova-scheduler configs read
with Nova 2026.1's own code from the OpenStack venv (scripts/openstack-venv.sh).

genconfig is slow (~40 s alone, minutes on a busy machine): it runs once for all hosts."""

import json
import pathlib
import subprocess
import sys

import pytest

from nova_helpers import ROOT, run_playbook
from ogc_testlib import SCRIPT_ENV, openstack_python, write_inventory

pytestmark = pytest.mark.integration

HERE = pathlib.Path(__file__).resolve().parent
# Simulated GPU hosts: name -> foundation fixture.
HOSTS = {
    "seed-v100": "seed-v100",        # 6x V100 in 4 IOMMU groups: 4 for Nova
    "rtx-box": "consumer-rtx",       # consumer RTX cards with audio/USB functions
    "a100-t4": "a100-t4",            # two models: A100 (type-PF) and T4 (type-PCI)
    "intel-t4": "intel-pre-iommu",   # IOMMU off: nothing for Nova yet
}
CONTROLLER = "ctl1"
NOVA_DEFAULT_FILTERS = ["ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
                        "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("genconfig")
    gpu = {}
    for host, fixture in HOSTS.items():
        root = tmp / "hosts" / host
        subprocess.run([sys.executable, str(ROOT / "scripts/mock_sysfs.py"), "build",
                        str(ROOT / "fixtures/hosts" / (fixture + ".yml")), str(root)],
                       check=True, capture_output=True, text=True, env=SCRIPT_ENV)
        gpu[host] = {"passthrough_host_root": str(root), "passthrough_sysfs_root": str(root / "sys"),
                     "passthrough_procfs_root": str(root / "proc")}
    inv = write_inventory(tmp / "inventory.json", gpu, hosts={"localhost": {}},
                          groups={"control": {CONTROLLER: {}}, "network": {CONTROLLER: {}}, "monitoring": {CONTROLLER: {}}})

    rc, out, _ = run_playbook("plan.yml", inv, {"passthrough_plan_dir": str(tmp / "plans")})
    assert rc == 0, out
    plans = {h: json.loads((tmp / "plans" / (h + ".json")).read_text()) for h in HOSTS}

    config = tmp / "config"
    config.mkdir()
    (config / "nova.conf").write_text("[DEFAULT]\ncpu_allocation_ratio = 3.0\n")  # the operator's
    (config / "placement.conf").write_text("[DEFAULT]\ndebug = true\n")  # the operator's
    rc, out, _ = run_playbook("nova.yml", inv, {"nova_pci_config_node_custom_config": str(config),
                                                "passthrough_plan_dir": str(tmp / "plans")})
    assert rc == 0, out

    rc, out, _ = run_playbook("deploy.yml", inv, {
        "kolla_deploy_mode": "genconfig",
        "kolla_deploy_config_dir": str(tmp / "etc"),
        "kolla_deploy_node_custom_config": str(config),
        "kolla_deploy_log_dir": str(tmp / "logs"),
        "kolla_deploy_network_interface": "lo",
        "kolla_deploy_internal_vip_address": "127.0.0.10",
        "kolla_deploy_globals": {
            "enable_haproxy": False,
            "node_config_directory": str(tmp / "node") + "/{{ '{{' }} inventory_hostname {{ '}}' }}"},
        "kolla_deploy_genconfig_tags": ["nova", "nova-cell", "placement"],
        "kolla_deploy_action_plugins": [str(ROOT / "tests" / "standins" / "kolla")],
        "kolla_deploy_stream_to_tty": False})
    assert rc == 0, out + (tmp / "logs/genconfig.log").read_text()[-3000:]
    assert "deploying containers is skipped because no container engine is available" in out

    node = tmp / "node"
    files = {host: str(node / host / "nova-compute/nova.conf") for host in HOSTS}
    files.update({svc: str(node / CONTROLLER / svc / "nova.conf") for svc in ("nova-api", "nova-scheduler")})
    aliases = sorted({a["name"] for p in plans.values() for a in p["plan"]["aliases"]})
    request = tmp / "check.json"
    request.write_text(json.dumps({
        "files": files, "flavors": aliases + ["no-such-gpu"],
        "devices": {h: plans[h]["facts"]["devices"] for h in HOSTS},
        "numa": numa_cases(plans["seed-v100"])}))
    proc = subprocess.run([openstack_python(), str(HERE / "nova_config_check.py"), str(request)],
                          capture_output=True, text=True, timeout=600, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return {"plans": plans, "nova": json.loads(proc.stdout), "node": node, "config": config}


# GPU flavors of every shape the NUMA rule tells apart: 1 to 4 V100, each policy, on a guest without a NUMA topology,
# with one node (dedicated CPUs) and with two.
NUMA_FLAVORS = [{"name": f"x{count}-{policy}-{guest}", "vcpus": 4, "ram": 2048,
                 "extra_specs": {"pci_passthrough:alias": f"tesla-v100:{count}",
                                 "hw:pci_numa_affinity_policy": policy, **specs}}
                for count in range(1, 5) for policy in ("required", "legacy", "preferred", "socket")
                for guest, specs in (("plain", {}), ("one-node", {"hw:cpu_policy": "dedicated"}),
                                     ("two-nodes", {"hw:numa_nodes": "2"}))]


def numa_cases(seed):
    """The seed host's planned V100 (two on each of its two NUMA nodes) on a host with a socket per node and with
    one socket for both, and the same GPUs where the kernel knows no NUMA node."""
    selected = {d["address"]: d for d in seed["plan"]["selected"]}
    devices = [{"address": d["address"], "vendor_id": d["vendor_id"], "product_id": d["product_id"],
                "numa_node": d["numa_node"]} for d in seed["facts"]["devices"] if d["address"] in selected]
    return {"socket-per-node": {"file": "seed-v100", "devices": devices, "sockets": [0, 1], "flavors": NUMA_FLAVORS},
            "one-socket": {"file": "seed-v100", "devices": devices, "sockets": [0, 0], "flavors": NUMA_FLAVORS},
            "unknown-node": {"file": "seed-v100", "devices": [dict(d, numa_node=None) for d in devices],
                             "sockets": [0, 1], "flavors": NUMA_FLAVORS}}


def planned_aliases(plans):
    out = {}
    for p in plans.values():
        for a in p["plan"]["aliases"]:
            out[a["name"]] = a
    return out


from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import address_space as ADDRESS_SPACE
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import numa as NUMA
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement as PCI_PLACEMENT


def resource_class(alias_name):
    """The resource class nova_pci_config names a model's devices with (plugins/module_utils/nova/placement.py)."""
    return PCI_PLACEMENT.resource_class(alias_name)


def test_fixtures_give_distinct_layouts(rendered):
    """Guard the test's own premise: several layouts, two models on one host, one host with none."""
    plans = rendered["plans"]
    selected = {h: [d["address"] for d in p["plan"]["selected"]] for h, p in plans.items()}
    assert len(selected["seed-v100"]) == 4 and selected["intel-t4"] == []
    assert len({d["product_id"] for d in plans["a100-t4"]["plan"]["selected"]}) == 2
    assert {a["device_type"] for a in plans["a100-t4"]["plan"]["aliases"]} == {"type-PF", "type-PCI"}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_exactly_the_planned_devices_match_the_device_spec(rendered, host):
    nova = rendered["nova"][host]
    planned = sorted(d["address"] for d in rendered["plans"][host]["plan"]["selected"])
    assert nova["assignable"] == planned
    assert len(nova["device_spec"]) == len(planned)  # one entry per selected device
    every = {d["address"] for d in rendered["plans"][host]["facts"]["devices"]}
    assert set(planned) <= every and len(every) > len(planned)  # others exist and stay unmatched


@pytest.mark.parametrize("service", sorted(HOSTS) + ["nova-api", "nova-scheduler"])
def test_aliases_parse_with_the_planned_device_types(rendered, service):
    nova = rendered["nova"][service]
    assert "alias_error" not in nova
    expected = planned_aliases(rendered["plans"])
    assert sorted(nova["aliases"]) == sorted(expected)
    for name, alias in expected.items():
        (spec,) = nova["aliases"][name]["specs"]
        assert spec == {"vendor_id": alias["vendor_id"], "product_id": alias["product_id"],
                        "dev_type": alias["device_type"], "resource_class": resource_class(name)}
        assert nova["aliases"][name]["numa_policy"] == "preferred"  # nova_pci_config_numa_policy's default


@pytest.mark.parametrize("service", ["nova-api", "a100-t4"])
def test_flavor_alias_gives_a_valid_pci_request(rendered, service):
    requests = rendered["nova"][service]["requests"]
    for name, alias in planned_aliases(rendered["plans"]).items():
        (req,) = requests[name]
        assert req["count"] == 1 and req["alias_name"] == name
        assert req["spec"] == [{"vendor_id": alias["vendor_id"], "product_id": alias["product_id"],
                                "dev_type": alias["device_type"], "resource_class": resource_class(name)}]
    assert "no-such-gpu" in requests["no-such-gpu"]["error"]  # Nova's parser does reject


def test_the_numa_rule_refuses_exactly_the_flavors_nova_itself_would_never_place(rendered):
    """plugins/module_utils/nova/numa.py against Nova 2026.1's own placement code (nova_config_check.py numa_fit:
    numa_fit_instance_to_host over PciDeviceStats, on the seed host's rendered nova-compute configuration): for
    'required', 'legacy' and 'preferred' the rule refuses a flavor exactly when Nova never places it. The plans hold
    no sockets, so for 'socket' the rule agrees with Nova where one socket holds both nodes (or no node is known) and
    refuses nothing Nova would place where each node is a socket of its own."""
    cases = numa_cases(rendered["plans"]["seed-v100"])
    nova = rendered["nova"]["numa"]
    assert sum(nova["socket-per-node"].values()) < len(NUMA_FLAVORS)  # Nova does refuse some: a test with teeth
    for case, spec in cases.items():
        capacity = NUMA.gpu_nodes({"seed-v100": {"plan": {"selected": [
            {"alias": "tesla-v100", "numa_node": d["numa_node"]} for d in spec["devices"]]}}})
        for flavor in NUMA_FLAVORS:
            refused = bool(NUMA.flavor_problems([flavor], capacity))
            policy = flavor["extra_specs"]["hw:pci_numa_affinity_policy"]
            if policy == "socket" and case == "socket-per-node":
                assert not refused or not nova[case][flavor["name"]], flavor["name"]
            else:
                assert refused == (not nova[case][flavor["name"]]), (case, flavor["name"])


def test_scheduler_has_pci_passthrough_filter(rendered):
    filters = rendered["nova"]["nova-scheduler"]["filters"]
    assert filters["enabled"] == NOVA_DEFAULT_FILTERS + ["PciPassthroughFilter"]
    assert filters["available"] == ["nova.scheduler.filters.all_filters"]


def test_operator_override_merged_and_placement_on_the_compute_side(rendered):
    """The computes report to Placement by default; the scheduler waits for Placement to have the devices (no cloud
    here to ask), so nova_pci_config wrote no pci_in_placement."""
    for service in ("seed-v100", "nova-api", "nova-scheduler"):
        assert rendered["nova"][service]["cpu_allocation_ratio"] == 3.0
        assert rendered["nova"][service]["report_in_placement"] is True
        assert rendered["nova"][service]["pci_in_placement"] is False
    assert (rendered["config"] / "nova.conf").read_text().startswith("[DEFAULT]\ncpu_allocation_ratio = 3.0\n")


def test_placement_api_runs_the_candidate_bounds_kolla_merged(rendered):
    """seed-v100 offers four V100 in Placement: nova_pci_config's block in placement.conf (breadth-first, a limit of
    100000; no flavors known here and fewer than eight GPUs of a model, so no wide-tree optimisation) reaches
    placement-api's placement.conf through kolla-ansible's own merge, beside the operator's line, and Placement 15.0.0's
    own option definitions read it."""
    override = (rendered["config"] / "placement.conf").read_text()
    assert override.startswith("[DEFAULT]\ndebug = true\n") and "open-gpu-cloud nova_pci_config: managed block" in override
    merged = rendered["node"] / CONTROLLER / "placement-api" / "placement.conf"
    code = ("import json, sys\nfrom oslo_config import cfg\nimport placement.conf\nc = cfg.ConfigOpts()\n"
            "placement.conf.register_opts(c)\nc(['--config-file', sys.argv[1]], project='placement', "
            "default_config_files=[])\nprint(json.dumps([c.placement.max_allocation_candidates, "
            "c.placement.allocation_candidates_generation_strategy, c.workarounds.optimize_for_wide_provider_trees, "
            "c.debug]))")
    proc = subprocess.run([openstack_python(), "-c", code, str(merged)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [100000, "breadth-first", False, True]


def test_nova_s_libvirt_driver_gives_the_guest_the_address_bits_the_budget_asks_for(rendered, tmp_path):
    """The address-space budget of two A100 flavors over the a100-t4 host's real plan (its facts' windows: 64 GiB
    BAR1 and 32 MiB BAR3 each), and the image properties the project gives an image of each firmware: Nova 2026.1's
    libvirt driver (tests/helpers/nova_guest_xml.py, LibvirtDriver._get_guest_config over Nova's objects and its fake
    libvirt) writes exactly those bits into the guest's <cpu><maxphysaddr>, and nothing where the defaults do."""
    plans = rendered["plans"]
    (alias,) = {d["alias"] for d in plans["a100-t4"]["plan"]["selected"] if d["product_id"] == "20f1"}
    flavors = {"small": {"name": "a100.x2", "vcpus": 4, "ram": 16384,
                         "extra_specs": {"pci_passthrough:alias": f"{alias}:2"}},
               "big": {"name": "a100.x2.800g", "vcpus": 4, "ram": 800 * 1024,
                       "extra_specs": {"pci_passthrough:alias": f"{alias}:2"}}}
    cases, expected = {}, {}
    for size, flavor in flavors.items():
        budgets = ADDRESS_SPACE.budgets([flavor], {"a100-t4": plans["a100-t4"]})
        assert budgets and budgets[0]["hosts"][0]["aperture"] == 2 * 128 * (1 << 30)
        for firmware in ADDRESS_SPACE.FIRMWARES:
            properties = {"hw_machine_type": "q35", "hw_firmware_type": firmware,
                          **ADDRESS_SPACE.image_properties(budgets, firmware)}
            cases[f"{size}-{firmware}"] = {"flavor": flavor, "image_properties": properties}
            expected[f"{size}-{firmware}"] = properties.get("hw_maxphysaddr_bits")
    assert expected == {"small-bios": None, "small-uefi": 41, "big-bios": 41, "big-uefi": 41}
    request = tmp_path / "guests.json"
    request.write_text(json.dumps(cases))
    proc = subprocess.run([openstack_python(), str(ROOT / "tests" / "helpers" / "nova_guest_xml.py"), str(request)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    guests = json.loads(proc.stdout)
    for case, bits in expected.items():
        xml = guests[case]
        assert 'machine="q35"' in xml, xml
        found = [line.strip() for line in xml.splitlines() if "<maxphysaddr" in line]
        assert found == ([f'<maxphysaddr mode="emulate" bits="{bits}"/>'] if bits else []), (case, found)
