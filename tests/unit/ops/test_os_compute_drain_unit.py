"""os_compute_drain: the pure decisions (examples and properties) and the exact SDK calls (SDK mocked).
The same module against the real Nova API: tests/integration/ops/test_fleet_drain.py."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import collection_module

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import compute_drain  # noqa: E402

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 21, 12, tzinfo=UTC)
STATUSES = ["ACTIVE", "SHUTOFF", "PAUSED", "SUSPENDED", "SHELVED", "SHELVED_OFFLOADED", "ERROR", "BUILD", "RESCUE",
            "DELETED", "SOFT_DELETED", "VERIFY_RESIZE"]


def srv(sid, status="ACTIVE", metadata=None, task_state=None):
    return dict(id=sid, name=sid, project_id="p", status=status, task_state=task_state, metadata=metadata or {})


@pytest.fixture(scope="module")
def drain_module():
    return collection_module("os_compute_drain")


# ------------------------------------------------------------------ pure parts

def test_classify_examples():
    servers = [srv("run"), srv("off", "SHUTOFF"), srv("shelving", "ACTIVE", task_state="shelving"),
               srv("exempt", metadata={"ogc:exempt": "yes"}), srv("kept", metadata={"ogc:expires": "2026-12-01"}),
               srv("expired", metadata={"ogc:expires": "2026-11-01"}), srv("bad", metadata={"ogc:expires": "soon"}),
               srv("err", "ERROR"), srv("gone", "SHELVED_OFFLOADED")]
    out = compute_drain.classify(servers, "shelve", NOW)
    assert [s["id"] for s in out["idle"]] == ["off", "gone"]
    assert [s["id"] for s in out["blocking"]] == ["run", "shelving", "exempt", "kept", "expired", "bad", "err"]
    # A task in progress, ERROR (Nova cannot shelve it) and exempt servers are not shelved; an expired or
    # unparsable expiry is no exemption (os_server_lifetimes' rule).
    assert [s["id"] for s in out["to_shelve"]] == ["run", "expired", "bad"]
    assert {s["id"]: s["reason"] for s in out["exempt"]} == {
        "exempt": "metadata ogc:exempt=yes", "kept": "metadata ogc:expires: kept until 2026-12-01T00:00:00Z"}
    wait = compute_drain.classify(servers, "wait", NOW)
    assert wait["blocking"] == out["blocking"] and wait["to_shelve"] == [] and wait["exempt"] == []


def test_classify_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="mode 'evacuate' is not one of wait, shelve, skip"):
        compute_drain.classify([], "evacuate", NOW)


server_strategy = st.builds(
    srv, sid=st.uuids().map(str), status=st.sampled_from(STATUSES),
    metadata=st.dictionaries(st.sampled_from(["ogc:exempt", "ogc:expires", "other"]),
                             st.sampled_from(["true", "no", "2026-12-01", "2026-01-01", "x"]), max_size=2),
    task_state=st.sampled_from([None, None, "shelving", "rebooting"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(server_strategy, max_size=8), st.sampled_from(compute_drain.MODES))
def test_classify_properties(servers, mode):
    out = compute_drain.classify(servers, mode, NOW)
    ids = lambda key: [s["id"] for s in out[key]]  # noqa: E731
    # Every server is either idle or blocking, never both; shelve and exempt are subsets of blocking, disjoint.
    assert sorted(ids("idle") + ids("blocking")) == sorted(s["id"] for s in servers)
    assert set(ids("to_shelve")) <= set(ids("blocking")) and set(ids("exempt")) <= set(ids("blocking"))
    assert not set(ids("to_shelve")) & set(ids("exempt"))
    # Only shelve mode shelves; it shelves only what Nova can shelve right now.
    if mode != "shelve":
        assert out["to_shelve"] == [] and out["exempt"] == []
    for server in out["to_shelve"]:
        assert server["status"] in compute_drain.SHELVABLE and not server["task_state"]
    # A server in a running state is never idle.
    for server in servers:
        if server["status"] not in compute_drain.IDLE:
            assert server["id"] in ids("blocking")


@pytest.mark.parametrize("status, reason, state, expected", [
    ("enabled", None, "drained", "disable"),
    ("disabled", "open-gpu-cloud: reboot", "drained", None),
    ("disabled", "hardware repair", "drained", "foreign"),
    ("disabled", None, "drained", "foreign"),
    ("enabled", None, "enabled", None),
    ("disabled", "open-gpu-cloud: reboot", "enabled", "enable"),
    ("disabled", "hardware repair", "enabled", "foreign"),
])
def test_service_action(status, reason, state, expected):
    assert compute_drain.service_action(status, reason, state, "open-gpu-cloud:") == expected


@given(st.sampled_from(["enabled", "disabled"]), st.one_of(st.none(), st.text(max_size=20)))
def test_service_action_never_enables_what_it_did_not_disable(status, reason):
    """Whatever the service's state, the enabling run enables only a service with this module's reason, and a
    drain never takes over a service someone else disabled."""
    action = compute_drain.service_action(status, reason, "enabled", "open-gpu-cloud:")
    if action == "enable":
        assert status == "disabled" and reason.startswith("open-gpu-cloud:")
    assert compute_drain.service_action(status, reason, "drained", "open-gpu-cloud:") in (
        "disable" if status == "enabled" else None, "foreign")


@pytest.mark.parametrize("params, message", [
    (dict(host=" "), "host must be the compute host's name as Nova knows it"),
    (dict(reason="reboot"), "reason 'reboot' must start with owner_prefix 'open-gpu-cloud:'"),
    (dict(owner_prefix=""), "owner_prefix must not be empty"),
    (dict(timeout=0), "timeout=0 must be a positive number of seconds"),
    (dict(now="tomorrow"), "now='tomorrow' is not an ISO 8601 date-time"),
])
def test_invalid_parameters_fail_before_any_call(drain_module, run_module, conn, params, message):
    args = dict(dict(cloud="ogc-test", host="gpu-1"), **params)
    result = run_module(drain_module, args)
    assert result["failed"] is True and message in result["msg"]
    assert "nothing was read or changed" in result["msg"]
    assert conn.compute.mock_calls == []


def test_mode_must_be_a_known_choice(drain_module, run_module, conn):
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", mode="evacuate"))
    assert result["failed"] is True and "value of mode must be one of: wait, shelve, skip" in result["msg"]
    assert conn.compute.mock_calls == []


# ------------------------------------------------------------------ the SDK calls

@pytest.fixture
def nova(conn):
    """A compute service on gpu-1 (enabled) and the servers in conn.state; shelving makes a server SHELVED."""
    service = SimpleNamespace(id="svc-1", host="gpu-1", binary="nova-compute", status="enabled", state="up",
                              disabled_reason=None)
    conn.service = service
    conn.state = {}
    conn.compute.services.side_effect = lambda **kw: iter([service] if kw.get("host") == "gpu-1" else [])
    conn.compute.servers.side_effect = lambda **kw: iter(
        [SimpleNamespace(**s) for s in conn.state.values()] if kw.get("compute_host") == "gpu-1" else [])

    def disable(svc, host, binary, disabled_reason=None):
        service.status, service.disabled_reason = "disabled", disabled_reason

    def enable(svc, host, binary):
        service.status, service.disabled_reason = "enabled", None

    def shelve(sid):
        conn.state[sid]["status"] = "SHELVED_OFFLOADED"

    conn.compute.disable_service.side_effect = disable
    conn.compute.enable_service.side_effect = enable
    conn.compute.shelve_server.side_effect = shelve
    return conn


def test_not_a_compute_is_left_alone(drain_module, run_module, nova):
    result = run_module(drain_module, dict(cloud="ogc-test", host="new-host"))
    assert result["changed"] is False and result["is_compute"] is False and result["outcome"] == "not_compute"
    assert not nova.compute.disable_service.called


def test_idle_host_is_disabled_then_enabled(drain_module, run_module, nova):
    reason = "open-gpu-cloud: reboot for PCI passthrough"
    check = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", reason=reason), check_mode=True)
    assert check["changed"] is True and check["outcome"] == "drained" and not nova.compute.disable_service.called
    drained = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", reason=reason))
    assert drained["changed"] is True and drained["outcome"] == "drained"
    nova.compute.disable_service.assert_called_once_with(nova.service, "gpu-1", "nova-compute",
                                                         disabled_reason=reason)
    assert drained["service"]["status"] == "disabled" and drained["service"]["disabled_reason"] == reason
    again = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", reason=reason))
    assert again["changed"] is False and nova.compute.disable_service.call_count == 1
    enabled = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", state="enabled"))
    assert enabled["changed"] is True and enabled["service"]["status"] == "enabled"
    nova.compute.enable_service.assert_called_once_with(nova.service, "gpu-1", "nova-compute")
    assert run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", state="enabled"))["changed"] is False


def test_foreign_disable_is_kept(drain_module, run_module, nova):
    nova.service.status, nova.service.disabled_reason = "disabled", "RMA: PSU replacement"
    drained = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1"))
    assert drained["changed"] is False and drained["foreign_reason"] == "RMA: PSU replacement"
    enabled = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", state="enabled"))
    assert enabled["changed"] is False and enabled["outcome"] == "left_disabled"
    assert not nova.compute.disable_service.called and not nova.compute.enable_service.called


def test_shelve_mode_shelves_and_the_exempt_one_times_out(drain_module, run_module, nova):
    nova.state = {"a": srv("a"), "x": srv("x", metadata={"ogc:exempt": "true"})}
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", mode="shelve", timeout=1))
    nova.compute.shelve_server.assert_called_once_with("a")
    assert result["failed"] is True and result["changed"] is True
    assert "gpu-1: still running on it after 1 s: x (x, ACTIVE)" in result["msg"]
    assert "x (x, ACTIVE) is exempt from shelving by metadata" in result["msg"]
    assert "stays disabled" in result["msg"] and "Already done in this run: updated a (shelved), disabled gpu-1" in result["msg"]


def test_skip_mode_leaves_a_busy_host_alone(drain_module, run_module, nova):
    nova.state = {"a": srv("a")}
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", mode="skip"))
    assert result["changed"] is False and result["outcome"] == "skipped"
    assert [s["id"] for s in result["blocking"]] == ["a"]
    assert not nova.compute.disable_service.called and not nova.compute.shelve_server.called


def test_unreachable_nova_fails_before_disabling(drain_module, run_module, nova):
    nova.compute.services.side_effect = ConnectionRefusedError("[Errno 111] Connection refused")
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1"))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == (
        "cannot list the compute services of gpu-1: Nova's API cannot be reached (ConnectionRefusedError: [Errno "
        "111] Connection refused); nothing was disabled. Check that nova-api runs and that the cloud's catalog (or "
        "its compute endpoint override) points at it")
    assert not nova.compute.disable_service.called


def test_api_error_fails_before_disabling(drain_module, run_module, nova):
    from openstack import exceptions as sdk_exceptions  # pylint: disable=import-outside-toplevel

    nova.compute.servers.side_effect = sdk_exceptions.HttpException("Service Unavailable", response=SimpleNamespace(status_code=503, headers={}, text="", json=dict))
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1"))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("listing servers on host gpu-1 failed: HTTP 503")
    assert not nova.compute.disable_service.called


def test_a_rerun_waits_for_the_host_an_earlier_run_disabled(drain_module, run_module, nova):
    reason = "open-gpu-cloud: host reboot"
    nova.service.status, nova.service.disabled_reason = "disabled", reason
    nova.state = {"a": srv("a")}
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", timeout=1))
    assert result["failed"] is True and result["changed"] is False
    assert "gpu-1: still running on it after 1 s: a (a, ACTIVE)" in result["msg"]
    assert not nova.compute.disable_service.called


def test_skip_mode_enables_again_when_a_server_landed_meanwhile(drain_module, run_module, nova):
    landed = iter([[], [srv("late")]])
    nova.compute.servers.side_effect = lambda **kw: iter([SimpleNamespace(**s) for s in next(landed)])
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", mode="skip"))
    assert result["changed"] is True and result["outcome"] == "skipped"
    assert [s["id"] for s in result["blocking"]] == ["late"]
    assert result["service"]["status"] == "enabled"
    nova.compute.disable_service.assert_called_once()
    nova.compute.enable_service.assert_called_once_with(nova.service, "gpu-1", "nova-compute")


def test_check_mode_of_a_busy_drain_says_would_drain(drain_module, run_module, nova):
    nova.state = {"a": srv("a")}
    result = run_module(drain_module, dict(cloud="ogc-test", host="gpu-1", mode="shelve"), check_mode=True)
    assert result["changed"] is True and result["outcome"] == "would_drain"
    assert [s["id"] for s in result["would_shelve"]] == ["a"] and result["shelved"] == []
    assert not nova.compute.disable_service.called and not nova.compute.shelve_server.called
