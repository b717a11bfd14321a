"""plugins/module_utils/common/run_scope.py: which GPU hosts a run acts on, and the refusal of a limit that leaves
out the control host (every play on localhost would run on no host and the run end green), with the limit that keeps
it; the limit it suggests is checked against Ansible's own evaluation of host patterns."""

import pytest
from ansible.inventory.manager import InventoryManager, split_host_pattern
from ansible.parsing.dataloader import DataLoader
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import run_scope as rs
from ogc_testlib import collection_plugin

scope_filter = collection_plugin("filter", "run_scope")

GROUPS = {"all": ["g1", "g2", "g3", "c1"], "ungrouped": [], "gpu_hosts": ["g1", "g2", "g3"], "control": ["c1"],
          "network": ["c1"]}


def kept(tmp_path, limit):
    """The hosts Ansible keeps for a play on all:localhost under LIMIT (what ansible_play_hosts_all holds)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_hosts: {hosts: {g1: {}, g2: {}, g3: {}}}\n"
                         "    control: {hosts: {c1: {}}}\n    network: {hosts: {c1: {}}}\n")
    manager = InventoryManager(DataLoader(), sources=[str(inventory)])
    if limit:
        manager.subset(limit)
    return [host.name for host in manager.get_hosts("all:localhost")]


def scope(tmp_path, limit, **kwargs):
    return scope_filter.run_scope(kept(tmp_path, limit), GROUPS, limit, "site.yml", ["/srv/inv"], **kwargs)


def test_no_limit_acts_on_every_gpu_host(tmp_path):
    got = scope(tmp_path, None)
    assert got == {"limited": False, "control_host": True, "gpu_hosts": ["g1", "g2", "g3"], "kolla_hosts": [],
                   "errors": []}


def test_a_limit_with_the_control_host_acts_on_its_gpu_hosts(tmp_path):
    got = scope(tmp_path, "g2,localhost")
    assert got["errors"] == [] and got["gpu_hosts"] == ["g2"] and got["limited"]
    # kolla-ansible: the run's hosts and the control group (nova-api reads the aliases), control first.
    assert got["kolla_hosts"] == ["c1", "g2"]


@pytest.mark.parametrize("limit, suggested", [
    ("g2", "g2,localhost"),
    ("gpu_hosts", "gpu_hosts,localhost"),
    ("g1:g2", "g1,g2,localhost"),
    ("!g1", "all,localhost,!g1"),
    ("all:!g1", "all,!g1,localhost"),
    ("gpu_hosts:&g*", "g1,g2,g3,localhost"),
])
def test_a_limit_without_the_control_host_is_refused_with_one_that_keeps_it(tmp_path, limit, suggested):
    got = scope(tmp_path, limit)
    assert len(got["errors"]) == 1
    message = got["errors"][0]
    assert f"the limit '{limit}' leaves out the control host (localhost)" in message
    assert "Nothing was changed" in message
    assert message.endswith(f"ansible-playbook site.yml -i /srv/inv --limit '{suggested}'")
    # Following the advice: Ansible keeps the same hosts and the control host.
    before = set(kept(tmp_path, limit))
    after = set(kept(tmp_path, suggested))
    assert after == before | {"localhost"}


def test_the_refusal_names_the_gpu_hosts_it_would_have_skipped(tmp_path):
    assert "they would run on no host for g1, g3" in scope(tmp_path, "g1,g3")["errors"][0]


def test_a_playbook_without_control_plays_takes_any_limit(tmp_path):
    got = scope(tmp_path, "g2", needs_control_host=False)
    assert got["errors"] == [] and got["gpu_hosts"] == ["g2"] and not got["control_host"]


def test_an_inventory_without_gpu_hosts_is_refused_where_they_are_needed():
    groups = {"all": ["c1"], "control": ["c1"], "gpu-hosts": ["g1"]}
    got = rs.run_scope(["c1", "localhost"], groups, None, [], "site.yml", ["/srv/inv"])
    assert got["errors"] == [
        "the inventory (/srv/inv) has no host in the group gpu_hosts: every phase of site.yml would run on no GPU "
        "host and the run would end green having done nothing. Put the GPU servers in gpu_hosts "
        "(docs/operator-guide.md, section 1)."]
    assert rs.run_scope(["c1", "localhost"], groups, None, [], "playbooks/cloud.yml", needs_gpu_hosts=False)[
        "errors"] == []


@pytest.mark.parametrize("bad", ["g1", [1], None])
def test_wrong_types_are_refused(bad):
    with pytest.raises(ValueError, match="must be a list of host names"):
        rs.run_scope(bad, GROUPS)


NAMES = st.sampled_from(["g1", "g2", "g3", "c1", "gpu_hosts", "control", "all", "g*"])
PATTERN = st.tuples(st.sampled_from(["", "!", "&"]), NAMES).map("".join)


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(PATTERN, min_size=1, max_size=3))
def test_the_suggested_limit_keeps_what_the_limit_kept_and_the_control_host(tmp_path_factory, parts):
    """Any limit Ansible accepts: the suggestion keeps the same inventory hosts, plus the control host."""
    tmp_path = tmp_path_factory.mktemp("limit")
    limit = ",".join(parts)
    before = kept(tmp_path, limit)
    if not before:
        return  # Ansible itself refuses a limit that keeps no host
    suggested = rs.limit_with_control_host(limit, split_host_pattern(limit), before)
    assert set(kept(tmp_path, suggested)) == set(before) | {"localhost"}
