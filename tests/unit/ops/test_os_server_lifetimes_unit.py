"""os_server_lifetimes: policy validation, the decision, and the exact SDK calls (SDK mocked)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import pci_inventory
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import server_lifetimes
from openstack import exceptions as sdk_exceptions

NOW = "2026-11-21T12:00:00Z"
UTC = datetime.timezone.utc


def server(sid, project_id, hours_old, status="ACTIVE", metadata=None, task_state=None, name=None):
    created = datetime.datetime(2026, 11, 21, 12, tzinfo=UTC) - datetime.timedelta(hours=hours_old)
    return SimpleNamespace(id=sid, name=name or sid, project_id=project_id, status=status, task_state=task_state,
                           created_at=created.strftime("%Y-%m-%dT%H:%M:%SZ"), metadata=metadata or {})


PROJECTS = {"ci": "ci-id", "research": "research-id", "scratch": "scratch-id", "admin": "admin-id"}


@pytest.fixture
def cloud(conn):
    by_name = {name: SimpleNamespace(id=pid, name=name) for name, pid in PROJECTS.items()}
    by_id = {p.id: p for p in by_name.values()}
    conn.identity.find_project.side_effect = lambda ref: by_name.get(ref) or by_id.get(ref)
    conn.identity.projects.return_value = list(by_name.values())
    conn.servers = []
    conn.compute.servers.side_effect = lambda **kw: iter(conn.servers)
    state = {}

    def shelve(sid):
        state[sid] = "SHELVED_OFFLOADED"

    def delete(sid, ignore_missing=True):
        state[sid] = None

    def get(sid):
        if state.get(sid, "x") is None:
            raise sdk_exceptions.NotFoundException("gone")
        return SimpleNamespace(id=sid, status=state.get(sid, "ACTIVE"))

    conn.compute.shelve_server.side_effect = shelve
    conn.compute.delete_server.side_effect = delete
    conn.compute.get_server.side_effect = get
    return conn


BASE = dict(cloud="ogc-test", now=NOW, policies=[dict(project="ci", max_age_hours=6)])


def ids(entries):
    return [e["id"] for e in entries]


# ------------------------------------------------------------------ pure parts

def test_parse_time_forms():
    assert server_lifetimes.parse_time("2026-12-24") == datetime.datetime(2026, 12, 24, tzinfo=UTC)
    assert server_lifetimes.parse_time("2026-12-24T18:00:00Z") == datetime.datetime(2026, 12, 24, 18, tzinfo=UTC)
    assert server_lifetimes.parse_time("2026-12-24T19:00:00+01:00") == datetime.datetime(2026, 12, 24, 18, tzinfo=UTC)
    assert server_lifetimes.parse_time("2026-12-24T18:00:00") == datetime.datetime(2026, 12, 24, 18, tzinfo=UTC)
    for bad in ("", "tomorrow", "2026-13-01", None):
        with pytest.raises(ValueError):
            server_lifetimes.parse_time(bad)


def test_validate_policy_errors():
    errors = server_lifetimes.validate_policy([dict(project="ci", max_age_hours=0), dict(project="ci", max_age_hours=-3),
                                        dict(project=" ", max_age_hours=1)], -1, 0)
    assert errors == [
        "policies[0] (project ci): max_age_hours=0 must be a positive number of hours (e.g. 168 for a week)",
        "policies[1] (project ci): max_age_hours=-3 must be a positive number of hours (e.g. 168 for a week)",
        "policies[1] (project ci): project 'ci' is already declared in policies[0]; keep one item per project",
        "policies[2]: 'project' must be a project name or ID",
        "default_max_age_hours=-1 must be a positive number of hours, or null to leave projects without a policy alone",
        "timeout=0 must be a positive number of seconds",
    ]
    assert server_lifetimes.validate_policy([dict(project="ci", max_age_hours=0.5)], None, 10) == []


def test_exemption_kinds():
    now = server_lifetimes.parse_time(NOW)
    assert server_lifetimes.exemption({"ogc:exempt": "True"}, now, "ogc:exempt", "ogc:expires")[0] == "exempt"
    assert server_lifetimes.exemption({"ogc:exempt": "false"}, now, "ogc:exempt", "ogc:expires") == (None, None)
    kind, when = server_lifetimes.exemption({"ogc:expires": "2026-12-01"}, now, "ogc:exempt", "ogc:expires")
    assert kind == "expires" and when == datetime.datetime(2026, 12, 1, tzinfo=UTC)
    kind, why = server_lifetimes.exemption({"ogc:expires": "soon"}, now, "ogc:exempt", "ogc:expires")
    assert kind == "invalid" and "metadata ogc:expires='soon' is not an ISO 8601 date" in why
    assert server_lifetimes.exemption(None, now, "ogc:exempt", "ogc:expires") == (None, None)


# ------------------------------------------------------------------ module runs

def test_shelves_only_old_servers_of_the_policy_project(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7), server("young", "ci-id", 5), server("other", "research-id", 100)]
    result = run_module(lifetimes, BASE)
    assert result["changed"] is True
    assert ids(result["acted"]) == ["old"] == ids(result["would_act"])
    acted = result["acted"][0]
    assert acted["project"] == "ci" and acted["project_id"] == "ci-id" and acted["action"] == "shelve"
    assert acted["age_hours"] == 7.0 and acted["max_age_hours"] == 6.0
    assert acted["status"] == "SHELVED_OFFLOADED"
    assert acted["reason"] == "older than 6 h (project ci)"
    assert result["checked"] == 2  # research has no policy and no default
    cloud.compute.shelve_server.assert_called_once_with("old")
    cloud.compute.delete_server.assert_not_called()
    cloud.compute.servers.assert_called_once_with(details=True, all_projects=True)


def test_check_mode_changes_nothing(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7)]
    result = run_module(lifetimes, BASE, check_mode=True)
    assert result["changed"] is True
    assert result["acted"] == [] and ids(result["would_act"]) == ["old"]
    cloud.compute.shelve_server.assert_not_called()
    cloud.compute.delete_server.assert_not_called()
    cloud.compute.get_server.assert_not_called()


def test_already_shelved_is_unchanged(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7, status="SHELVED_OFFLOADED")]
    result = run_module(lifetimes, BASE)
    assert result["changed"] is False
    assert result["not_acted"][0]["reason"] == "already shelved (SHELVED_OFFLOADED)"
    cloud.compute.shelve_server.assert_not_called()


def test_busy_and_unshelvable_servers_skipped(lifetimes, cloud, run_module):
    cloud.servers = [server("busy", "ci-id", 7, task_state="rebooting"), server("broken", "ci-id", 7, status="ERROR")]
    result = run_module(lifetimes, BASE)
    assert result["changed"] is False
    reasons = {e["id"]: e["reason"] for e in result["not_acted"]}
    assert reasons == {"busy": "task in progress (rebooting)",
                       "broken": "Nova cannot shelve a server in state ERROR; delete it or repair it"}


def test_delete_action_and_default_policy(lifetimes, cloud, run_module):
    cloud.servers = [server("scratch-old", "scratch-id", 30), server("res-old", "research-id", 200),
                     server("res-young", "research-id", 100), server("scratch-broken", "scratch-id", 30, status="ERROR")]
    args = dict(cloud="ogc-test", now=NOW, policies=[dict(project="scratch", max_age_hours=24, action="delete")],
                default_max_age_hours=168)
    result = run_module(lifetimes, args)
    assert sorted(ids(result["acted"])) == ["res-old", "scratch-broken", "scratch-old"]
    actions = {e["id"]: e["action"] for e in result["acted"]}
    assert actions == {"scratch-old": "delete", "scratch-broken": "delete", "res-old": "shelve"}
    assert {e["id"]: e["status"] for e in result["acted"]}["scratch-old"] == "DELETED"
    cloud.compute.delete_server.assert_any_call("scratch-old", ignore_missing=True)
    cloud.compute.shelve_server.assert_called_once_with("res-old")
    assert [e["reason"] for e in result["acted"] if e["id"] == "res-old"] == ["older than 168 h (project (default))"]


def test_policy_by_project_id_and_default_action(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 2)]
    args = dict(cloud="ogc-test", now=NOW, default_action="delete", policies=[dict(project="ci-id", max_age_hours=1.5)])
    result = run_module(lifetimes, args)
    assert result["acted"][0]["action"] == "delete" and result["acted"][0]["project"] == "ci"


def test_exempt_and_expiry(lifetimes, cloud, run_module):
    cloud.servers = [
        server("flagged", "ci-id", 50, metadata={"ogc:exempt": "true"}),
        server("flagged-young", "ci-id", 1, metadata={"ogc:exempt": "true"}),
        server("kept", "ci-id", 50, metadata={"ogc:expires": "2026-12-24"}),
        server("expired-young", "ci-id", 1, metadata={"ogc:expires": "2026-11-21T11:00:00Z"}),
        server("garbled", "ci-id", 50, metadata={"ogc:expires": "next week"}),
    ]
    result = run_module(lifetimes, BASE)
    assert sorted(ids(result["acted"])) == ["expired-young", "garbled"]
    exempt = {e["id"]: e["reason"] for e in result["exempt"]}
    assert exempt == {"flagged": "metadata ogc:exempt=true",
                      "kept": "metadata ogc:expires: kept until 2026-12-24T00:00:00Z"}
    assert [e["reason"] for e in result["acted"] if e["id"] == "expired-young"] == [
        "expired at 2026-11-21T11:00:00Z (metadata ogc:expires)"]
    assert ids(result["invalid_metadata"]) == ["garbled"]
    shelved = sorted(c.args[0] for c in cloud.compute.shelve_server.call_args_list)
    assert shelved == ["expired-young", "garbled"]


def test_custom_exempt_key(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7, metadata={"keep": "yes", "ogc:exempt": "true"})]
    result = run_module(lifetimes, dict(BASE, exempt_key="keep"))
    assert ids(result["exempt"]) == ["old"]
    result = run_module(lifetimes, dict(BASE, exempt_key="other"))
    assert ids(result["acted"]) == ["old"]


def test_unknown_project_fails_before_reading_servers(lifetimes, cloud, run_module):
    result = run_module(lifetimes, dict(BASE, policies=[dict(project="ci", max_age_hours=6),
                                                        dict(project="nope", max_age_hours=6)]))
    assert result["failed"] is True
    assert "lifetime policy names project(s) nope that do not exist in cloud 'ogc-test'; nothing was changed" in result["msg"]
    cloud.compute.servers.assert_not_called()
    cloud.compute.shelve_server.assert_not_called()


@pytest.mark.parametrize("args, expected", [
    (dict(policies=[dict(project="ci", max_age_hours=-1)]), "policies[0] (project ci): max_age_hours=-1.0 must be a positive"),
    (dict(policies=[dict(project="ci", max_age_hours=0)]), "policies[0] (project ci): max_age_hours=0.0 must be a positive"),
    (dict(policies=[], default_max_age_hours=0), "default_max_age_hours=0.0 must be a positive number"),
    (dict(policies=[]), "nothing to enforce: give policies"),
    (dict(now="yesterday"), "now='yesterday' is not an ISO 8601 date-time"),
    (dict(policies=[dict(project="ci", max_age_hours=1, action="hibernate")]), "value of action must be one of: shelve, delete"),
    (dict(default_action="stop"), "value of default_action must be one of: shelve, delete"),
])
def test_bad_input_fails_before_any_api_call(lifetimes, cloud, run_module, args, expected):
    result = run_module(lifetimes, dict(BASE, **args))
    assert result["failed"] is True
    assert expected in result["msg"]
    assert cloud.connect_mock.call_count == 0
    cloud.identity.find_project.assert_not_called()


def test_wait_reports_error_state(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7)]
    cloud.compute.get_server.side_effect = lambda sid: SimpleNamespace(id=sid, status="ERROR")
    result = run_module(lifetimes, BASE)
    assert result["failed"] is True
    assert "server old (old, project ci) went to ERROR while being shelved" in result["msg"]
    assert "Already done in this run: updated old" in result["msg"]


def test_wait_times_out(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7)]
    cloud.compute.get_server.side_effect = lambda sid: SimpleNamespace(id=sid, status="ACTIVE")
    result = run_module(lifetimes, dict(BASE, timeout=1))
    assert result["failed"] is True
    assert "timed out after 1 s waiting for old (shelve, now ACTIVE)" in result["msg"]


def test_no_wait_does_not_poll(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7)]
    result = run_module(lifetimes, dict(BASE, wait=False))
    assert ids(result["acted"]) == ["old"]
    cloud.compute.get_server.assert_not_called()


def test_api_error_names_server_and_message(lifetimes, cloud, run_module):
    cloud.servers = [server("old", "ci-id", 7, name="runner-1")]
    cloud.compute.shelve_server.side_effect = sdk_exceptions.ConflictException("Cannot 'shelve' instance while it is in vm_state building")
    result = run_module(lifetimes, BASE)
    assert result["failed"] is True
    assert "shelving server runner-1 (old) failed:" in result["msg"]
    assert "Cannot 'shelve' instance" in result["msg"]


def test_unparsable_created_at_is_skipped(lifetimes, cloud, run_module):
    bad = server("odd", "ci-id", 7)
    bad.created_at = "garbage"
    cloud.servers = [bad]
    result = run_module(lifetimes, BASE)
    assert result["changed"] is False
    assert result["not_acted"][0]["reason"] == "created_at 'garbage' cannot be parsed"


def test_deleted_servers_ignored(lifetimes, cloud, run_module):
    cloud.servers = [server("gone", "ci-id", 70, status="SOFT_DELETED")]
    result = run_module(lifetimes, BASE)
    assert result["checked"] == 0 and result["changed"] is False


# ------------------------------------------------------------------ os_pci_inventory (pure part)

def test_pci_inventory_summary():
    providers = [{"uuid": "root", "name": "gpu01", "root_provider_uuid": "root"},
                 {"uuid": "d1", "name": "gpu01_0000:27:00.0", "root_provider_uuid": "root"},
                 {"uuid": "d2", "name": "gpu01_0000:44:00.0", "root_provider_uuid": "root"}]
    inventories = {"root": {"VCPU": {"total": 64}}, "d1": {"CUSTOM_PCI_10DE_1DB4": {"total": 1}},
                   "d2": {"CUSTOM_PCI_10DE_1DB4": {"total": 1, "reserved": 0}}}
    usages = {"d1": {"CUSTOM_PCI_10DE_1DB4": 1}}
    hosts, devices = pci_inventory.summarise(providers, inventories, usages, ["CUSTOM_PCI_*"])
    assert hosts == {"gpu01": {"CUSTOM_PCI_10DE_1DB4": {"total": 2, "used": 1, "reserved": 0, "free": 1}}}
    assert [(d["name"], d["used"]) for d in devices] == [("gpu01_0000:27:00.0", 1), ("gpu01_0000:44:00.0", 0)]
    # Without the allocations (not read), no consumer is known: a used device is in use.
    assert [d["state"] for d in devices] == ["in_use", "free"]
    assert pci_inventory.summarise(providers, inventories, usages, ["PGPU"]) == ({}, [])
