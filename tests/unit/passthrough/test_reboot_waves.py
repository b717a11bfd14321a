"""plugins/filter/reboot_waves.py: wave sizes, waves, and the refusal of bad batch values."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ogc_testlib import load_source, collection_plugin

waves = collection_plugin("filter", "reboot_waves")


@pytest.mark.parametrize("batch, fleet, size", [
    (1, 6, 1), (2, 6, 2), (10, 6, 6), ("50%", 6, 3), ("10%", 6, 1), ("100%", 24, 24), (" 25 % ", 96, 24),
    ("34%", 3, 1),
])
def test_wave_size(batch, fleet, size):
    assert waves.wave_size(batch, fleet) == size


@pytest.mark.parametrize("batch, message", [
    (0, "passthrough_rollout_reboot_batch=0 must be at least 1"),
    (-2, "passthrough_rollout_reboot_batch=-2 must be at least 1"),
    (True, "passthrough_rollout_reboot_batch=True (bool) must be a positive number of hosts"),
    (1.5, "passthrough_rollout_reboot_batch=1.5 (float) must be a positive number of hosts"),
    (None, "passthrough_rollout_reboot_batch=None (NoneType) must be a positive number of hosts"),
    ([2], "passthrough_rollout_reboot_batch=[2] (list) must be a positive number of hosts"),
    ("0%", "passthrough_rollout_reboot_batch='0%' must be a percentage from 1% to 100%"),
    ("150%", "passthrough_rollout_reboot_batch='150%' must be a percentage from 1% to 100%"),
    ("2", "passthrough_rollout_reboot_batch='2' must be a percentage from 1% to 100% (e.g. \"10%\") or a positive int"),
    ("half", "passthrough_rollout_reboot_batch='half' must be a percentage"),
])
def test_bad_batch_is_refused(batch, message):
    with pytest.raises(AnsibleFilterError) as err:
        waves.wave_size(batch, 6)
    assert message in str(err.value)


@pytest.mark.parametrize("hosts, fleet", [("h1", 3), ([1, 2], 3), (["h1"], 0), (["h1"], True)])
def test_bad_hosts_or_fleet_are_refused(hosts, fleet):
    with pytest.raises(AnsibleFilterError):
        waves.reboot_waves(hosts, 1, fleet)


def test_waves_example():
    hosts = [f"h{i}" for i in range(1, 7)]
    assert waves.reboot_waves(hosts, 2, 6) == dict(size=2, serial=[1, 2],
                                                   waves=[["h1"], ["h2", "h3"], ["h4", "h5"], ["h6"]])
    assert waves.reboot_waves([], "50%", 6) == dict(size=3, serial=[1, 3], waves=[])


@given(st.lists(st.uuids().map(str), unique=True, max_size=40),
       st.one_of(st.integers(1, 50), st.integers(1, 100).map(lambda p: f"{p}%")), st.integers(1, 200))
def test_waves_properties(hosts, batch, fleet):
    out = waves.reboot_waves(hosts, batch, fleet)
    # Every host exactly once, in order; the canary wave is one host; no wave is larger than the size.
    assert [h for wave in out["waves"] for h in wave] == hosts
    if hosts:
        assert out["waves"][0] == hosts[:1]
    assert all(0 < len(wave) <= out["size"] for wave in out["waves"])
    assert 1 <= out["size"] <= fleet and out["serial"] == [1, out["size"]]
    # Ansible's serial [1, size] cuts the hosts into the same waves.
    cuts, rest, sizes = [], list(hosts), [1] + [out["size"]] * len(hosts)
    for size in sizes:
        if not rest:
            break
        cuts.append(rest[:size])
        rest = rest[size:]
    assert cuts == out["waves"]


def test_batch_errors_name_the_host_or_are_empty():
    assert waves.batch_errors("25%", 24, "gpu-001") == []
    assert waves.batch_errors(2, 6, "gpu-001") == []
    errors = waves.batch_errors("half", 6, "gpu-001")
    assert len(errors) == 1 and errors[0].startswith("gpu-001: passthrough_rollout_reboot_batch='half' must be a percentage")


@given(batch=st.one_of(st.integers(-5, 50), st.text(max_size=6), st.none(), st.booleans()), fleet=st.integers(1, 100))
def test_batch_errors_agree_with_the_wave_size(batch, fleet):
    try:
        waves.wave_size(batch, fleet)
        good = True
    except AnsibleFilterError:
        good = False
    assert (waves.batch_errors(batch, fleet, "h") == []) == good
