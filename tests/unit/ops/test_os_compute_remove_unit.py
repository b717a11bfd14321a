"""os_compute_remove: the pure decisions (examples and properties). The same module against real Nova and Placement
services: the removal journey in tests/integration/site/test_site_end_to_end.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import compute_removal  # noqa: E402

HOST = "gpu-007"
DOWN = dict(id="svc-1", status="disabled", state="down", forced_down=False)
UP = dict(DOWN, status="enabled", state="up")


def srv(sid, status="ACTIVE", project="p1"):
    return dict(id=sid, name=f"vm-{sid}", project_id=project, status=status, task_state=None, metadata={})


def rp(uuid, name, parent=None, consumers=()):
    return dict(uuid=uuid, name=name, parent=parent, consumers=list(consumers))


TREE = [rp("c2", f"{HOST}_0000:44:00.0", "root"), rp("root", HOST), rp("c1", f"{HOST}_0000:27:00.0", "root")]


def test_a_host_with_servers_is_refused_naming_each_and_nothing_is_planned():
    problem, actions = compute_removal.judge(HOST, "nova-compute", DOWN, [srv("a"), srv("b", "SHUTOFF", "p2")], TREE)
    assert actions == []
    assert problem.startswith("gpu-007: 2 servers still on it: vm-a (a, ACTIVE, project p1), "
                              "vm-b (b, SHUTOFF, project p2).")
    assert "Nothing was changed" in problem and "shelve" in problem


def test_a_server_whose_deletion_is_unfinished_is_named_with_how_to_finish_it():
    """Nova's compute marks a server DELETED before it frees its allocation and destroys its record; a nova-compute
    stopped in between leaves it so (Nova counts it, and refuses to delete the service)."""
    problem, actions = compute_removal.judge(HOST, "nova-compute", DOWN, [srv("d", "DELETED")], TREE)
    assert actions == [] and "still on it" not in problem
    assert problem.startswith("gpu-007: 1 deleted server whose deletion its nova-compute has not finished: "
                              "vm-d (d, DELETED, project p1).")
    assert "openstack server list --all-projects --host gpu-007" in problem and "openstack server delete <id>" in problem
    assert problem.endswith('Nothing was changed (docs/operator-guide.md, "Removing a GPU host")')
    both, _ = compute_removal.judge(HOST, "nova-compute", DOWN, [srv("d", "DELETED"), srv("a")], TREE)
    assert both.startswith("gpu-007: 1 server still on it: vm-a (a, ACTIVE, project p1).") and "vm-d (d, DELETED" in both


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ACTIVE", "SHUTOFF", "ERROR", "DELETED", "SHELVED"]), min_size=1, max_size=6))
def test_every_server_on_the_host_is_named_once_whatever_its_status(statuses):
    servers = [srv(str(n), status) for n, status in enumerate(statuses)]
    problem, actions = compute_removal.judge(HOST, "nova-compute", DOWN, servers, TREE)
    assert actions == [] and problem.endswith("Nothing was changed (docs/operator-guide.md, \"Removing a GPU host\")")
    for server in servers:
        assert problem.count(f"vm-{server['id']} ({server['id']}, {server['status']}, project p1)") == 1
    assert ("has not finished" in problem) == ("DELETED" in statuses)


def test_a_service_still_up_is_refused_unless_the_look_is_before_the_stop():
    problem, actions = compute_removal.judge(HOST, "nova-compute", UP, [], TREE)
    assert "still reports its nova-compute service up" in problem and "kolla-ansible stop" in problem
    assert actions == []
    problem, actions = compute_removal.judge(HOST, "nova-compute", UP, [], TREE, expect_down=False)
    assert problem is None and actions[0].item == "nova-compute service of gpu-007"
    forced = dict(UP, forced_down=True)
    assert compute_removal.judge(HOST, "nova-compute", forced, [], TREE)[0] is None


def test_allocations_against_a_provider_are_refused_naming_the_consumers():
    tree = [rp("root", HOST), rp("c1", f"{HOST}_0000:27:00.0", "root", ["cons-9"])]
    problem, _ = compute_removal.judge(HOST, "nova-compute", DOWN, [], tree)
    assert "gpu-007_0000:27:00.0 (c1): cons-9" in problem


def test_the_plan_deletes_the_service_then_the_providers_children_first():
    problem, actions = compute_removal.judge(HOST, "nova-compute", DOWN, [], TREE)
    assert problem is None
    assert [a.item for a in actions] == ["nova-compute service of gpu-007",
                                         "resource provider gpu-007_0000:27:00.0",
                                         "resource provider gpu-007_0000:44:00.0", "resource provider gpu-007"]
    assert all(a.writes for a in actions)


def test_a_host_already_removed_plans_nothing():
    assert compute_removal.judge(HOST, "nova-compute", None, [], []) == (None, [])
    plan = compute_removal.make_plan(dict(host=HOST, binary="nova-compute", expect_down=True), {},
                                     dict(service=None, servers=[], providers=[]))
    assert plan.actions == [] and plan.details == {"outcome": "absent"} and not plan.changed


def test_the_diff_names_the_service_and_the_providers():
    before, after = compute_removal.diff_sides(HOST, "nova-compute", DOWN, TREE)
    assert before == {"nova-compute service": "gpu-007 (id svc-1, disabled, down)",
                      "resource providers": ["gpu-007_0000:27:00.0", "gpu-007_0000:44:00.0", "gpu-007"]}
    assert after == {}


def test_parameters_are_checked_before_any_call():
    assert compute_removal.validate(dict(host=" ", down_timeout=-1)) == [
        "host must be the compute host's name as Nova knows it (openstack compute service list)",
        "down_timeout=-1 must be 0 (do not wait) or a positive number of seconds to wait for Nova to see the "
        "stopped service down"]
    declared, problem = compute_removal.prepare(dict(host="", down_timeout=0))
    assert declared is None and problem["msg"].startswith("invalid parameters, nothing was read or changed")


@st.composite
def trees(draw):
    """A provider tree: each provider's parent is an earlier one (the first is the root)."""
    size = draw(st.integers(min_value=1, max_value=8))
    providers = [rp("p0", HOST)]
    for index in range(1, size):
        parent = draw(st.integers(min_value=0, max_value=index - 1))
        providers.append(rp(f"p{index}", f"{HOST}_{index}", f"p{parent}"))
    return draw(st.permutations(providers))


@settings(max_examples=100, deadline=None)
@given(trees())
def test_children_first_properties(providers):
    ordered = compute_removal.children_first(providers)
    assert sorted(p["uuid"] for p in ordered) == sorted(p["uuid"] for p in providers)
    position = {p["uuid"]: i for i, p in enumerate(ordered)}
    for provider in providers:
        if provider["parent"] is not None:
            assert position[provider["uuid"]] < position[provider["parent"]]


@settings(max_examples=100, deadline=None)
@given(trees(), st.lists(st.sampled_from(["ACTIVE", "SHUTOFF", "ERROR"]), max_size=3),
       st.sampled_from([None, DOWN, UP]), st.booleans())
def test_judge_properties(providers, statuses, service, expect_down):
    servers = [srv(str(i), s) for i, s in enumerate(statuses)]
    problem, actions = compute_removal.judge(HOST, "nova-compute", service, servers, providers, expect_down)
    # A refusal plans nothing; a server on the host always refuses; otherwise every provider and the service go.
    if problem is not None:
        assert actions == []
    if servers:
        assert problem is not None and actions == []
    if problem is None:
        assert len(actions) == len(providers) + (service is not None)


class _Response:
    def __init__(self, status_code, body):
        self.status_code, self._body, self.text = status_code, body, str(body)

    def json(self):
        return self._body


class _Api:
    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def get(self, path, **kwargs):
        self.calls.append((path, kwargs))
        return self.answers[path]


class _Cloud:
    """The part of CloudModule the provider lookup uses: call() and conn.compute / conn.placement."""

    def __init__(self, compute, placement):
        self.conn = type("Conn", (), {"compute": compute, "placement": placement})()

    @staticmethod
    def call(_action, _resource, func, *args, **kwargs):
        return func(*args, **kwargs)

    @staticmethod
    def fail(msg, **_extra):
        raise AssertionError(msg)


def test_the_host_providers_come_from_the_hypervisor_list_of_2_87_without_uptime():
    """From 2.88 Nova asks a compute it believes up for its uptime over RPC, and a just-stopped one makes the
    list fail with HTTP 500: the lookup asks for 2.87, where the detailed list names the service and has no uptime."""
    compute = _Api({"/os-hypervisors/detail": _Response(200, {"hypervisors": [
        {"id": "rp-a", "service": {"host": HOST}}, {"id": "rp-b", "service": {"host": "other"}}]})})
    placement = _Api({})
    assert compute_removal.root_providers(_Cloud(compute, placement), HOST) == ["rp-a"]
    assert compute.calls == [("/os-hypervisors/detail", {"microversion": "2.87", "raise_exc": False})]
    # A host whose service is gone already: its root provider by name.
    compute = _Api({"/os-hypervisors/detail": _Response(200, {"hypervisors": []})})
    placement = _Api({f"/resource_providers?name={HOST}": _Response(200, {"resource_providers": [{"uuid": "rp-c"}]})})
    assert compute_removal.root_providers(_Cloud(compute, placement), HOST) == ["rp-c"]
