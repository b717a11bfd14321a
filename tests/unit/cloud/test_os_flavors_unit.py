"""os_flavors: validation, the difference function, and the exact SDK calls of a run (SDK mocked)."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest


def flavor(name, vcpus=4, ram=2048, disk=20, ephemeral=0, swap=0, is_public=True, extra_specs=None,
           id=None, description=None):  # pylint: disable=redefined-builtin
    return SimpleNamespace(name=name, id=id or name + "-id", vcpus=vcpus, ram=ram, disk=disk, ephemeral=ephemeral,
                           swap=swap, is_public=is_public, extra_specs=dict(extra_specs or {}),
                           description=description)


def declared(os_flavors, **kw):
    base = dict(name="gpu_tiny", id=None, vcpus=4, ram=2048, disk=20, ephemeral=0, swap=0, is_public=True,
                projects=[], extra_specs={"pci_passthrough:alias": "tesla-v100:1"}, description=None)
    base.update(kw)
    return os_flavors.normalise(base)


GPU = {"pci_passthrough:alias": "tesla-v100:1"}
ARGS = dict(cloud="ogc-test", flavors=[dict(name="gpu_tiny", vcpus=4, ram=2048, disk=20, extra_specs=GPU)])
WRITES = ("create_flavor", "delete_flavor", "create_flavor_extra_specs", "delete_flavor_extra_specs_property",
          "flavor_add_tenant_access", "flavor_remove_tenant_access", "update_flavor")


def writes(conn):
    return [(name, call) for name in WRITES for call in getattr(conn.compute, name).call_args_list]


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("value, why", [
    ("tesla-v100:abc", "'tesla-v100:abc' is not ALIAS:COUNT"),
    ("tesla-v100", "'tesla-v100' is not ALIAS:COUNT"),
    ("tesla-v100:0", "COUNT must be a positive integer"),
    ("tesla-v100:-1", "'tesla-v100:-1' is not ALIAS:COUNT"),
    (":1", "':1' is not ALIAS:COUNT"),
    ("tesla-v100:1,", "'' is not ALIAS:COUNT"),
])
def test_malformed_alias_spec_is_rejected_with_the_reason(os_flavors, value, why):
    errors = os_flavors.validate([declared(os_flavors, extra_specs={"pci_passthrough:alias": value})], None)
    assert len(errors) == 1
    assert "flavors[0] (gpu_tiny)" in errors[0] and why in errors[0] and "e.g. tesla-v100:1" in errors[0]


def test_several_aliases_comma_separated_are_valid(os_flavors):
    assert os_flavors.parse_alias_spec("tesla-v100:1, rtx-2080:2") == [("tesla-v100", 1), ("rtx-2080", 2)]
    spec = {"pci_passthrough:alias": "tesla-v100:1,rtx-2080:2"}
    assert os_flavors.validate([declared(os_flavors, extra_specs=spec)], ["tesla-v100", "rtx-2080"]) == []


def test_unknown_alias_is_rejected_naming_the_known_ones(os_flavors):
    spec = {"pci_passthrough:alias": "tesla-v100:1,a100:1"}
    errors = os_flavors.validate([declared(os_flavors, extra_specs=spec)], ["tesla-v100", "t4"])
    assert len(errors) == 1
    assert "'a100', which no GPU host provides (aliases in the passthrough plans: t4, tesla-v100)" in errors[0]


def test_empty_known_aliases_rejects_gpu_flavors_and_none_skips_the_check(os_flavors):
    assert "aliases in the passthrough plans: none" in os_flavors.validate([declared(os_flavors)], [])[0]
    assert os_flavors.validate([declared(os_flavors)], None) == []


def test_other_declaration_errors_are_all_reported(os_flavors):
    flavors = [declared(os_flavors, ram=0), declared(os_flavors, disk=-1),
               declared(os_flavors, name="x", projects=["p"]),
               declared(os_flavors, name="y", extra_specs={"hw:hide_hypervisor_id": "maybe", "bad key!": "1"})]
    errors = os_flavors.validate(flavors, None)
    text = "\n".join(errors)
    assert "flavors[0] (gpu_tiny): ram=0 must be >= 1" in text
    assert "flavors[1] (gpu_tiny): name 'gpu_tiny' is declared twice" in text
    assert "flavors[1] (gpu_tiny): disk=-1 must be >= 0" in text
    assert "flavors[2] (x): projects ['p'] only apply to a private flavor; set is_public: false" in text
    assert "hw:hide_hypervisor_id='maybe' must be true or false" in text
    assert "extra spec key 'bad key!'" in text
    assert len(errors) == 6


def test_boolean_spec_values_are_sent_as_lowercase_strings(os_flavors):
    assert declared(os_flavors, extra_specs={"hw:hide_hypervisor_id": True})["extra_specs"] == {
        "hw:hide_hypervisor_id": "true"}


# --------------------------------------------------------------------------- the difference

def view(os_flavors, **kw):
    return os_flavors.current_view(flavor(**kw))


def test_plan_create_update_unchanged(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2",
                                                                         "hw:cpu_policy": "dedicated"}),
                "ci_medium": view(os_flavors, name="ci_medium", ram=8192, disk=60)}
    want = [declared(os_flavors), declared(os_flavors, name="ci_medium", ram=8192, disk=60, extra_specs={}),
            declared(os_flavors, name="new")]
    actions, errors = os_flavors.plan(want, existing, {}, {})
    assert errors == []
    assert [(a["action"], a["name"]) for a in actions] == [("update", "gpu_tiny"), ("unchanged", "ci_medium"),
                                                           ("create", "new")]
    assert actions[0]["set_specs"] == {"pci_passthrough:alias": "tesla-v100:1"}
    assert actions[0]["unset_specs"] == ["hw:cpu_policy"]
    assert actions[0]["changes"] == ["extra spec pci_passthrough:alias: 'tesla-v100:2' -> 'tesla-v100:1'",
                                     "extra spec hw:cpu_policy: 'dedicated' -> absent"]


def test_plan_keeps_undeclared_specs_without_purge(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", extra_specs=dict(GPU, **{"hw:cpu_policy": "x"}))}
    actions, _ = os_flavors.plan([declared(os_flavors)], existing, {}, {}, purge_extra_specs=False)
    assert actions[0]["action"] == "unchanged"


def test_plan_refuses_immutable_change_unless_recreate(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", ram=1024, extra_specs=GPU)}
    actions, errors = os_flavors.plan([declared(os_flavors)], existing, {}, {})
    assert actions == []
    assert errors == ["flavor gpu_tiny: ram: 1024 -> 2048 cannot change in place (Nova flavors are immutable); "
                      "set recreate_on_change: true to delete and create it again (it gets a new ID unless 'id' "
                      "is declared; running servers keep their copy)"]
    actions, errors = os_flavors.plan([declared(os_flavors)], existing, {}, {}, recreate_on_change=True)
    assert errors == [] and actions[0]["action"] == "recreate"
    assert actions[0]["changes"] == ["recreate: ram: 1024 -> 2048"]


def test_plan_declared_id_change_is_immutable(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", id="abc", extra_specs=GPU)}
    _, errors = os_flavors.plan([declared(os_flavors, id="gpu_tiny")], existing, {}, {})
    assert "id: abc -> gpu_tiny cannot change in place" in errors[0]


def test_plan_prune_only_matching_undeclared(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", extra_specs=GPU),
                "gpu_old": view(os_flavors, name="gpu_old"), "m1.small": view(os_flavors, name="m1.small")}
    actions, _ = os_flavors.plan([declared(os_flavors)], existing, {}, {}, prune=True, prune_patterns=["gpu_*"])
    assert [(a["action"], a["name"]) for a in actions] == [("unchanged", "gpu_tiny"), ("delete", "gpu_old")]
    actions, _ = os_flavors.plan([declared(os_flavors)], existing, {}, {}, prune=False)
    assert [a["action"] for a in actions] == ["unchanged"]


def test_plan_access_of_private_flavor(os_flavors):
    existing = {"team": view(os_flavors, name="team", is_public=False, extra_specs={})}
    want = [declared(os_flavors, name="team", is_public=False, extra_specs={}, projects=["research", "p2-id"])]
    actions, _ = os_flavors.plan(want, existing, {"team": ["old-id", "p2-id"]}, {"research": "r-id"})
    assert actions[0]["add_projects"] == ["r-id"] and actions[0]["remove_projects"] == ["old-id"]


def test_diff_shows_before_and_after(os_flavors):
    existing = {"gpu_tiny": view(os_flavors, name="gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2"})}
    actions, _ = os_flavors.plan([declared(os_flavors)], existing, {}, {})
    diff = os_flavors.diff_of(actions)
    assert diff["before"]["gpu_tiny"]["extra_specs"] == {"pci_passthrough:alias": "tesla-v100:2"}
    assert diff["after"]["gpu_tiny"]["extra_specs"] == GPU


# --------------------------------------------------------------------------- module runs (SDK mocked)

def test_create_makes_exactly_these_calls(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = []
    created = flavor("gpu_tiny", id="new-id")
    conn.compute.create_flavor.return_value = created
    result = run_module(os_flavors, ARGS)
    assert result["changed"] is True and result["created"] == ["gpu_tiny"]
    conn.connect_mock.assert_called_once_with(cloud="ogc-test", interface="public")
    conn.authorize.assert_called_once_with()
    conn.compute.flavors.assert_called_once_with(details=True, is_public=None)
    conn.compute.create_flavor.assert_called_once_with(name="gpu_tiny", vcpus=4, ram=2048, disk=20, ephemeral=0,
                                                       swap=0, is_public=True)
    conn.compute.create_flavor_extra_specs.assert_called_once_with(created, GPU)
    assert len(writes(conn)) == 2
    assert result["flavors"][0]["id"] == "new-id"


def test_converged_run_writes_nothing(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = [flavor("gpu_tiny", extra_specs=GPU)]
    result = run_module(os_flavors, ARGS)
    assert result["changed"] is False and result["unchanged"] == ["gpu_tiny"]
    assert writes(conn) == []


def test_update_sets_only_the_changed_spec_in_place(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = [flavor("gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2",
                                                                         "old": "x"})]
    result = run_module(os_flavors, ARGS)
    assert result["updated"] == ["gpu_tiny"]
    conn.compute.create_flavor_extra_specs.assert_called_once_with("gpu_tiny-id", GPU)
    conn.compute.delete_flavor_extra_specs_property.assert_called_once_with("gpu_tiny-id", "old")
    assert len(writes(conn)) == 2


def test_check_mode_reports_but_writes_nothing(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = [flavor("gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2"})]
    args = dict(ARGS, flavors=ARGS["flavors"] + [dict(name="ci_medium", vcpus=4, ram=8192, disk=60)])
    result = run_module(os_flavors, args, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["updated"] == ["gpu_tiny"] and result["created"] == ["ci_medium"]
    assert result["diff"]["after"]["ci_medium"]["ram"] == 8192
    assert writes(conn) == []


def test_recreate_deletes_then_creates(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = [flavor("gpu_tiny", ram=1024, extra_specs=GPU)]
    conn.compute.create_flavor.return_value = flavor("gpu_tiny", id="second")
    result = run_module(os_flavors, dict(ARGS, recreate_on_change=True))
    assert result["recreated"] == ["gpu_tiny"]
    assert conn.compute.method_calls[1:4] == [
        mock.call.delete_flavor("gpu_tiny-id", ignore_missing=True),
        mock.call.create_flavor(name="gpu_tiny", vcpus=4, ram=2048, disk=20, ephemeral=0, swap=0, is_public=True),
        mock.call.create_flavor_extra_specs(conn.compute.create_flavor.return_value, GPU)]


def test_malformed_spec_fails_before_connecting(os_flavors, conn, run_module):
    args = dict(ARGS, flavors=[dict(name="gpu_tiny", vcpus=4, ram=2048, extra_specs={"pci_passthrough:alias": "v:x"})])
    result = run_module(os_flavors, args)
    assert result["failed"] is True
    assert result["msg"].startswith("invalid flavor declaration, nothing was written: flavors[0] (gpu_tiny): extra "
                                    "spec pci_passthrough:alias='v:x' is malformed")
    conn.connect_mock.assert_not_called()


def test_unknown_alias_fails_before_connecting(os_flavors, conn, run_module):
    result = run_module(os_flavors, dict(ARGS, known_aliases=["rtx-2080"]))
    assert result["failed"] is True and "'tesla-v100', which no GPU host provides" in result["msg"]
    conn.connect_mock.assert_not_called()


def test_immutable_change_fails_without_writing(os_flavors, conn, run_module):
    conn.compute.flavors.return_value = [flavor("gpu_tiny", vcpus=8, extra_specs=GPU)]
    result = run_module(os_flavors, ARGS)
    assert result["failed"] is True and "vcpus: 8 -> 4 cannot change in place" in result["msg"]
    assert writes(conn) == []


@pytest.mark.filterwarnings("ignore:The .http_status. parameter")
def test_server_error_halfway_names_the_flavor_and_what_was_done(os_flavors, conn, run_module):
    from openstack import exceptions  # pylint: disable=import-outside-toplevel

    conn.compute.flavors.return_value = []
    conn.compute.create_flavor.side_effect = [flavor("a"), exceptions.HttpException(
        message="Flavor with name b already exists.", http_status=409)]
    args = dict(cloud="ogc-test", flavors=[dict(name="a", vcpus=1, ram=512), dict(name="b", vcpus=1, ram=512),
                                           dict(name="c", vcpus=1, ram=512)])
    result = run_module(os_flavors, args)
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == ("creating flavor b failed: HTTP 409: Flavor with name b already exists. Already done "
                             "in this run: created a; a re-run finishes the job")
    assert result["created"] == ["a"] and result["failed_item"] == "b"
    assert conn.compute.create_flavor.call_count == 2  # c was not attempted


def test_missing_project_for_private_flavor(os_flavors, conn, run_module):
    conn.identity.projects.return_value = [SimpleNamespace(id="other-id", name="other")]
    args = dict(cloud="ogc-test", flavors=[dict(name="t", vcpus=1, ram=512, is_public=False, projects=["nope"])])
    result = run_module(os_flavors, args)
    assert result["msg"] == "flavor t: project 'nope' does not exist (declare it first, e.g. with os_access)"
    assert writes(conn) == []


def test_private_flavor_access_calls(os_flavors, conn, run_module):
    conn.identity.projects.return_value = [SimpleNamespace(id="research-id", name="research")]
    conn.compute.flavors.return_value = [flavor("team", is_public=False)]
    conn.compute.get_flavor_access.return_value = [{"flavor_id": "team-id", "tenant_id": "gone-id"}]
    args = dict(cloud="ogc-test", flavors=[dict(name="team", vcpus=4, ram=2048, disk=20, is_public=False,
                                                projects=["research"])])
    result = run_module(os_flavors, args)
    assert result["updated"] == ["team"]
    conn.compute.get_flavor_access.assert_called_once_with("team-id")
    conn.compute.flavor_add_tenant_access.assert_called_once_with("team-id", "research-id")
    conn.compute.flavor_remove_tenant_access.assert_called_once_with("team-id", "gone-id")
