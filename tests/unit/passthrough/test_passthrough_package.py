"""plugins/module_utils/passthrough/ (imported through the planner's filter module, the `planner` fixture, which
joins module_utils/): pure logic that raises its own PlanError, and filters that are thin adapters
over it (plugins/filter/passthrough_plan.py), word for word."""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import COLLECTION, ROOT

# Policies and facts of every shape, well formed or not: numbers for ids, unknown keys, non-booleans.
_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 5000), st.text(max_size=12),
                    st.sampled_from(["10de", "0x10de", "27:00.0", "0000:27:00.0", "yes", "10de:1db4"]))
_policies = st.one_of(_values, st.dictionaries(
    st.sampled_from(["vendors", "alias_names", "exclude", "keep_on_host", "allow_unsafe_interrupts",
                     "amd_iommu_on", "colour"]),
    st.one_of(_values, st.lists(_values, max_size=3), st.dictionaries(st.sampled_from(["10de:1db4", 4318]), _values,
                                                                       max_size=2)),
    max_size=4))
_facts = st.one_of(_values, st.fixed_dictionaries({"devices": st.just([]), "iommu_enabled": st.booleans()}),
                   st.dictionaries(st.sampled_from(["devices", "iommu_enabled"]), _values, max_size=2))


def test_the_package_knows_nothing_of_ansible_errors():
    paths = glob.glob(os.path.join(COLLECTION, "plugins", "module_utils", "passthrough", "*.py"))
    assert len(paths) >= 7
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            assert "ansible.errors" not in handle.read(), path


@settings(max_examples=150, deadline=None)
@given(facts=_facts, policy=_policies)
def test_the_filter_raises_exactly_what_the_planner_raises(planner, facts, policy):
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError  # pylint: disable=import-outside-toplevel
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough.planner import passthrough_plan  # pylint: disable=import-outside-toplevel
    try:
        expected = passthrough_plan(facts, policy, "h1")
    except PlanError as exc:
        with pytest.raises(planner.AnsibleFilterError) as caught:
            planner.passthrough_plan(facts, policy, "h1")
        assert str(caught.value) == str(exc) and str(exc).startswith("passthrough_plan: host h1: ")
    else:
        assert planner.passthrough_plan(facts, policy, "h1") == expected
        assert planner.policy_errors(policy, "h1") == []
