"""plugins/module_utils/kolla/deploy_state.py: kolla-ansible's steps from what each host got last; a limited run
compares and records its hosts only, so its second run does nothing and the hosts it left take their step later."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.kolla import deploy_state as ds

STEPS = ["install-deps", "bootstrap-servers", "prechecks", "deploy", "post-deploy"]
RECONFIGURE = ["prechecks", "reconfigure", "post-deploy"]


def now(config="c1", hosts="h1", mode="full", version="22.2.0"):
    return {"mode": mode, "version": version, "hosts": hosts, "config": config}


def plan(last, current, every, targets=()):
    return ds.plan_steps(last, current, every, list(targets), STEPS, RECONFIGURE)


def test_first_run_deploys_then_nothing_then_reconfigures():
    first = plan({}, now(), ["c", "g1"])
    assert first["steps"] == STEPS and first["limit"] == []
    assert plan(first["state"], now(), ["c", "g1"])["steps"] == []
    assert plan(first["state"], now(config="c2"), ["c", "g1"])["steps"] == RECONFIGURE


def test_a_limited_run_deploys_its_hosts_and_records_only_them():
    state = plan({}, now(), ["c", "g1"])["state"]
    # g2 joins: the hosts' digest changes; the run is limited to g2 and the control host.
    added = plan(state, now(hosts="h2", config="c2"), ["c", "g1", "g2"], ["c", "g2"])
    assert added["steps"] == STEPS and added["limit"] == ["c", "g2"]
    assert added["state"]["hosts"]["g1"] == now()  # left as it was
    again = plan(added["state"], now(hosts="h2", config="c2"), ["c", "g1", "g2"], ["c", "g2"])
    assert again["steps"] == []
    # The next unlimited run brings g1 up to date (the new host list, the new aliases).
    whole = plan(again["state"], now(hosts="h2", config="c2"), ["c", "g1", "g2"])
    assert whole["steps"] == STEPS and whole["limit"] == []
    assert plan(whole["state"], now(hosts="h2", config="c2"), ["c", "g1", "g2"])["steps"] == []


def test_a_removed_host_leaves_the_record():
    state = plan({}, now(), ["c", "g1", "g2"])["state"]
    after = plan(state, now(hosts="h2"), ["c", "g1"])
    assert sorted(after["state"]["hosts"]) == ["c", "g1"]


def test_the_first_format_stands_for_every_host():
    legacy = now()
    assert plan(legacy, now(), ["c", "g1"])["steps"] == []
    assert plan(legacy, now(config="c2"), ["c", "g1"], ["g1"])["steps"] == RECONFIGURE


def test_genconfig_runs_on_any_difference_only():
    first = plan({}, now(mode="genconfig"), ["c"])
    assert ds.plan_steps({}, now(mode="genconfig"), ["c"], [], ["genconfig"], RECONFIGURE)["steps"] == ["genconfig"]
    assert ds.plan_steps(first["state"], now(mode="genconfig"), ["c"], [], ["genconfig"], RECONFIGURE)["steps"] == []
    assert ds.plan_steps(first["state"], now(mode="genconfig", config="x"), ["c"], [], ["genconfig"],
                         RECONFIGURE)["steps"] == ["genconfig"]


def test_an_inventory_without_kolla_hosts_is_recorded_too():
    first = plan({}, now(), [])
    assert first["steps"] == STEPS and plan(first["state"], now(), [])["steps"] == []


def test_install_deps_and_post_deploy_take_no_limit():
    assert plan({}, now(), ["c"], ["c"])["unlimited_steps"] == ["install-deps", "post-deploy"]


def test_now_must_be_complete():
    with pytest.raises(ValueError, match="now must hold mode, version, hosts, config"):
        plan({}, {"mode": "full"}, ["c"])


HOSTS = ["c", "g1", "g2", "g3"]


@settings(max_examples=80, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["h1", "h2"]),
                               st.lists(st.sampled_from(HOSTS), unique=True, max_size=3)), min_size=1, max_size=5))
def test_a_run_repeated_does_nothing_and_records_exactly_its_hosts(runs):
    state = {}
    for config, hosts, targets in runs:
        result = plan(state, now(config=config, hosts=hosts), HOSTS, targets)
        chosen = targets or HOSTS
        assert all(result["state"]["hosts"][h] == now(config=config, hosts=hosts) for h in chosen)
        assert result["limit"] == [h for h in targets]
        untouched = {h: r for h, r in state.get("hosts", {}).items() if h not in chosen}
        assert all(result["state"]["hosts"][h] == r for h, r in untouched.items())
        state = result["state"]
        assert plan(state, now(config=config, hosts=hosts), HOSTS, targets)["steps"] == []
