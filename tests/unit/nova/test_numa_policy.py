"""module_utils/nova/numa.py: what PCI NUMA affinity a GPU flavor can get from where the plans put the GPUs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import numa
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias


def plans(**hosts):
    """{host: {plan: {selected}}} with, per host, a list of (alias, numa_node)."""
    return {host: {"facts": {}, "plan": {"selected": [{"alias": a, "numa_node": n} for a, n in devices]}}
            for host, devices in hosts.items()}


# The seed host: four V100, two on each of its two NUMA nodes; a lab host whose kernel knows no node.
FLEET = plans(seed=[("tesla-v100", 0), ("tesla-v100", 0), ("tesla-v100", 1), ("tesla-v100", 1)],
              lab=[("rtx-a4000", None), ("rtx-a4000", None)])
CAPACITY = numa.gpu_nodes(FLEET)


def flavor(count, alias="tesla-v100", **specs):
    return {"name": f"gpu.x{count}", "extra_specs": {"pci_passthrough:alias": f"{alias}:{count}", **specs}}


def test_where_the_gpus_sit_by_alias_host_and_node():
    assert CAPACITY == {"tesla-v100": {"seed": {0: 2, 1: 2}}, "rtx-a4000": {"lab": {None: 2}}}
    assert numa.gpu_nodes(plans(h=[("a", -1), ("a", True), ("a", 3)])) == {"a": {"h": {None: 2, 3: 1}}}


@pytest.mark.parametrize("specs, nodes", [
    ({}, (None, None)),
    ({"hw:cpu_policy": "shared"}, (None, None)),
    ({"hw:cpu_policy": "dedicated"}, (1, "hw:cpu_policy=dedicated")),
    ({"hw:cpu_policy": "mixed"}, (1, "hw:cpu_policy=mixed")),
    ({"resources:PCPU": "4"}, (1, "resources:PCPU=4")),
    ({"hw:mem_page_size": "large"}, (1, "hw:mem_page_size=large")),
    ({"hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"}, (2, "hw:numa_nodes=2")),
    ({"hw:numa_nodes": 1}, (1, "hw:numa_nodes=1")),
])
def test_a_guest_has_a_numa_topology_only_when_its_flavor_asks_for_one(specs, nodes):
    assert numa.guest_numa_nodes(specs) == nodes


def test_required_on_a_one_node_guest_is_refused_where_no_host_has_the_gpus_on_one_node_with_the_arithmetic():
    flavors = [flavor(2, **{"hw:cpu_policy": "dedicated", "hw:pci_numa_affinity_policy": "required"}),
               flavor(4, **{"hw:cpu_policy": "dedicated", "hw:pci_numa_affinity_policy": "required"})]
    (problem,) = numa.flavor_problems(flavors, CAPACITY)
    assert problem == (
        "flavors[1] (gpu.x4): asks for 4 x tesla-v100 with PCI NUMA affinity policy 'required' (its "
        "hw:pci_numa_affinity_policy) on a guest of 1 NUMA node(s) (hw:cpu_policy=dedicated), which takes devices on "
        "those nodes, never one of unknown node; no GPU host holds that: seed has tesla-v100 node 0 x2, node 1 x2. "
        "Nova would never schedule it. Give the flavor hw:pci_numa_affinity_policy=preferred, or hw:numa_nodes with "
        "as many nodes as the GPUs span, or ask for fewer GPUs")
    # The advice followed: two guest nodes, or preferred.
    assert numa.flavor_problems([flavor(4, **{"hw:numa_nodes": "2", "hw:pci_numa_affinity_policy": "required"})],
                                CAPACITY) == []
    assert numa.flavor_problems([flavor(4, **{"hw:cpu_policy": "dedicated",
                                              "hw:pci_numa_affinity_policy": "preferred"})], CAPACITY) == []


def test_the_alias_policy_applies_when_the_flavor_sets_none_and_only_to_guests_with_a_numa_topology():
    required = {"tesla-v100": "required"}
    assert numa.flavor_problems([flavor(4)], CAPACITY, required) == []  # no NUMA topology: no policy applies
    (problem,) = numa.flavor_problems([flavor(4, **{"hw:mem_page_size": "large"})], CAPACITY, required)
    assert "policy 'required' (the numa_policy of its alias in Nova's [pci] alias)" in problem
    assert numa.flavor_problems([flavor(4, **{"hw:mem_page_size": "large"})], CAPACITY, {"tesla-v100": "preferred"}) \
        == []
    # The flavor's own policy wins over the alias's (nova/pci/request.py: affinity_policy or numa_policy).
    assert numa.flavor_problems([flavor(4, **{"hw:mem_page_size": "large",
                                              "hw:pci_numa_affinity_policy": "preferred"})], CAPACITY, required) == []


def test_gpus_of_unknown_node_never_meet_required_or_socket_and_always_meet_legacy():
    dedicated = {"hw:cpu_policy": "dedicated"}
    for policy in ("required", "socket"):
        (problem,) = numa.flavor_problems([flavor(1, "rtx-a4000", **dedicated, **{numa.POLICY_SPEC: policy})],
                                          CAPACITY)
        assert f"policy '{policy}'" in problem and "lab has rtx-a4000 no known node x2" in problem
    assert numa.flavor_problems([flavor(2, "rtx-a4000", **dedicated, **{numa.POLICY_SPEC: "legacy"})], CAPACITY) == []
    # Nova's default for an alias without numa_policy is legacy.
    assert numa.flavor_problems([flavor(2, "rtx-a4000", **dedicated)], CAPACITY, {}) == []


def test_socket_counts_every_known_node_of_a_host():
    specs = {"hw:cpu_policy": "dedicated", numa.POLICY_SPEC: "socket"}
    assert numa.flavor_problems([flavor(4, **specs)], CAPACITY) == []
    assert numa.flavor_problems([flavor(5, **specs)], CAPACITY) != []


def test_other_shapes_and_aliases_are_left_to_the_other_checks():
    assert numa.flavor_problems(["x", {"name": "a"}, {"extra_specs": ["x"]}, flavor(1, "h100"),
                                 {"name": "bad", "extra_specs": {"pci_passthrough:alias": "v100"}}], CAPACITY) == []
    assert numa.flavor_problems("not a list", CAPACITY) == []


@given(nodes=st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=3)), min_size=1, max_size=8),
       count=st.integers(min_value=1, max_value=9), guest=st.integers(min_value=1, max_value=4),
       policy=st.sampled_from(numa.POLICIES))
@settings(max_examples=300, deadline=None)
def test_a_flavor_is_refused_exactly_when_no_choice_of_guest_nodes_holds_its_gpus(nodes, count, guest, policy):
    capacity = numa.gpu_nodes(plans(h=[("a", n) for n in nodes]))
    problems = numa.flavor_problems([flavor(count, "a", **{"hw:numa_nodes": str(guest), numa.POLICY_SPEC: policy})],
                                    capacity)
    known = {n: nodes.count(n) for n in set(nodes) if n is not None}
    unknown = nodes.count(None)
    if policy == "preferred":
        fits = True
    elif policy == "socket":
        fits = sum(known.values()) >= count
    else:  # the guest's nodes land on the host's nodes holding the most GPUs
        fits = sum(sorted(known.values(), reverse=True)[:guest]) + (unknown if policy == "legacy" else 0) >= count
    assert (problems == []) == fits, (known, unknown, count, guest, policy, problems)


@pytest.mark.parametrize("flavor, request_", [
    ({"extra_specs": {"pci_passthrough:alias": "a:2, b:1"}}, [("a", 2), ("b", 1)]),
    ({"extra_specs": {"hw:cpu_policy": "dedicated"}}, []),       # no GPUs
    ({"extra_specs": {"pci_passthrough:alias": "a"}}, []),        # malformed: the cloud phase names it
    ({"extra_specs": ["pci_passthrough:alias"]}, []), ({"name": "x"}, []), ("not a flavor", []),
])
def test_one_reader_of_a_declared_flavor_s_pci_request(flavor, request_):
    """pci/alias.py flavor_request: what the NUMA rule, the address-space budget and Placement's bounds read."""
    assert pci_alias.flavor_request(flavor) == request_
