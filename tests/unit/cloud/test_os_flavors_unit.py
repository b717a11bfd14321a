"""os_flavors: validation, the difference function, and the exact SDK calls of a run (SDK mocked)."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavor_requests
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavors as cloud_flavors
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias


def flavor(name, vcpus=4, ram=2048, disk=20, ephemeral=0, swap=0, is_public=True, extra_specs=None,
           id=None, description=None):  # pylint: disable=redefined-builtin
    return SimpleNamespace(name=name, id=id or name + "-id", vcpus=vcpus, ram=ram, disk=disk, ephemeral=ephemeral,
                           swap=swap, is_public=is_public, extra_specs=dict(extra_specs or {}),
                           description=description)


def declared(**kw):
    base = dict(name="gpu_tiny", id=None, vcpus=4, ram=2048, disk=20, ephemeral=0, swap=0, is_public=True,
                projects=[], extra_specs={"pci_passthrough:alias": "tesla-v100:1"}, description=None)
    base.update(kw)
    return cloud_flavors.normalise(base)


GPU = {"pci_passthrough:alias": "tesla-v100:1"}
ARGS = dict(cloud="ogc-test", flavors=[dict(name="gpu_tiny", vcpus=4, ram=2048, disk=20, extra_specs=GPU)])
WRITES = ("create_flavor", "delete_flavor", "create_flavor_extra_specs", "delete_flavor_extra_specs_property",
          "flavor_add_tenant_access", "flavor_remove_tenant_access", "update_flavor")


def writes(conn):
    return [(name, call) for name in WRITES for call in getattr(conn.compute, name).call_args_list]


def nova_json(obj):
    """A flavor as GET /flavors/detail returns it at microversion 2.61 (swap 0 is "" there)."""
    return {"name": obj.name, "id": obj.id, "vcpus": obj.vcpus, "ram": obj.ram, "disk": obj.disk,
            "OS-FLV-EXT-DATA:ephemeral": obj.ephemeral, "swap": obj.swap or "",
            "os-flavor-access:is_public": obj.is_public, "description": obj.description,
            "extra_specs": obj.extra_specs, "links": []}


def response(body, status=200):
    return SimpleNamespace(status_code=status, json=lambda: body, headers={}, content=b"")


def serve(conn, flavors, max_microversion="2.96"):
    """The compute proxy answers the flavor listing with these flavors, on one page."""
    conn.compute.get_endpoint_data.return_value = SimpleNamespace(min_microversion="2.1",
                                                                  max_microversion=max_microversion)
    conn.compute.get.return_value = response({"flavors": [nova_json(f) for f in flavors]})


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("value, why", [
    ("tesla-v100:abc", "'tesla-v100:abc' is not ALIAS:COUNT"),
    ("tesla-v100", "'tesla-v100' is not ALIAS:COUNT"),
    ("tesla-v100:0", "COUNT must be a positive integer"),
    ("tesla-v100:-1", "'tesla-v100:-1' is not ALIAS:COUNT"),
    (":1", "':1' is not ALIAS:COUNT"),
    ("tesla-v100:1,", "'' is not ALIAS:COUNT"),
])
def test_malformed_alias_spec_is_rejected_with_the_reason(value, why):
    errors = cloud_flavors.validate([declared(extra_specs={"pci_passthrough:alias": value})], None)
    assert len(errors) == 1
    assert "flavors[0] (gpu_tiny)" in errors[0] and why in errors[0] and "e.g. tesla-v100:1" in errors[0]


def test_several_aliases_comma_separated_are_valid():
    assert pci_alias.parse_request("tesla-v100:1, rtx-2080:2") == [("tesla-v100", 1), ("rtx-2080", 2)]
    spec = {"pci_passthrough:alias": "tesla-v100:1,rtx-2080:2"}
    assert cloud_flavors.validate([declared(extra_specs=spec)], ["tesla-v100", "rtx-2080"]) == []


def test_unknown_alias_is_rejected_naming_the_known_ones():
    spec = {"pci_passthrough:alias": "tesla-v100:1,a100:1"}
    errors = cloud_flavors.validate([declared(extra_specs=spec)], ["tesla-v100", "t4"])
    assert len(errors) == 1
    assert "'a100', which no GPU host provides (aliases in the passthrough plans: t4, tesla-v100)" in errors[0]


def test_an_alias_no_host_offers_any_more_is_refused_naming_the_hosts_that_had_it():
    spec = {"pci_passthrough:alias": "tesla-t4:1"}
    retired = {"tesla-t4": ["gpu-002", "gpu-005"], "tesla-v100": ["gpu-009"]}
    errors = cloud_flavors.validate([declared(extra_specs=spec)], ["a100-pcie-40gb", "l4"], retired)
    assert errors == [
        "flavors[0] (gpu_tiny): extra spec pci_passthrough:alias asks for PCI alias 'tesla-t4', which no GPU host "
        "provides any more: hosts gpu-002, gpu-005 offered it before their GPUs were replaced by another model "
        "(aliases in the passthrough plans now: a100-pcie-40gb, l4); ask for one of those in the flavor, or remove "
        "the flavor from cloud_flavors (servers already running keep their flavor)"]
    one = cloud_flavors.validate([declared(extra_specs=spec)], ["l4"], {"tesla-t4": ["gpu-002"]})[0]
    assert "no GPU host provides any more: host gpu-002 offered it" in one
    # An alias some host still offers is fine, whatever other hosts retired.
    assert cloud_flavors.validate([declared()], ["tesla-v100"], retired) == []
    # An alias no host ever offered keeps the plain message.
    other = cloud_flavors.validate([declared(extra_specs={"pci_passthrough:alias": "h100:1"})], ["l4"], retired)[0]
    assert "'h100', which no GPU host provides (aliases in the passthrough plans: l4)" in other


def test_the_declared_flavors_alias_check_is_the_modules_own_before_any_type_check():
    """site.yml asks declared_alias_errors right after the plan phase (roles/cloud_resources, entry point
    check_flavors), on cloud_flavors as the inventory gives them: the same messages as the module's validate, and
    an entry of another shape left to the module's argument spec, never a traceback."""
    retired = {"rtx-2080-ti": ["gpu-002"]}
    flavors = [{"name": "lab.gpu1", "ram": "256", "extra_specs": {"pci_passthrough:alias": "rtx-2080-ti:1"}},
               {"name": "ci.gpu", "extra_specs": {"pci_passthrough:alias": "tesla-v100:1"}},
               {"name": "odd", "extra_specs": {"pci_passthrough:alias": "h100"}},
               "not a flavor", {"name": "no-specs"}, {"name": "specs-list", "extra_specs": ["x"]}]
    errors = flavor_requests.declared_alias_errors(flavors, ["tesla-v100"], retired)
    assert errors == [
        cloud_flavors.validate([declared(name="lab.gpu1", extra_specs=flavors[0]["extra_specs"])], ["tesla-v100"],
                               retired)[0],
        "flavors[2] (odd): extra spec pci_passthrough:alias='h100' is malformed: " + errors[1].split(": ", 2)[2]]
    assert errors[0].startswith("flavors[0] (lab.gpu1): extra spec pci_passthrough:alias asks for PCI alias "
                                "'rtx-2080-ti', which no GPU host provides any more: host gpu-002 offered it")
    assert flavor_requests.declared_alias_errors(flavors[1:2], ["tesla-v100"]) == []
    assert flavor_requests.declared_alias_errors(flavors, None) == [errors[1]]  # known None: only the form is checked
    assert flavor_requests.declared_alias_errors("not a list", ["l4"]) == []


@pytest.mark.parametrize("value", [["tesla-t4"], {"tesla-t4": "gpu-002"}, {"tesla-t4": []}, {"tesla-t4": [1]},
                                   {"tesla-t4": [""]}])
def test_retired_aliases_of_the_wrong_shape_are_refused_not_coerced(value):
    problem = cloud_flavors.retired_aliases_problem(value)
    assert problem and "retired_aliases" in problem
    declared_flavors, failure = cloud_flavors.prepare(dict(flavors=[dict(ARGS["flavors"][0])], known_aliases=["l4"],
                                                           retired_aliases=value))
    assert declared_flavors is None and failure["msg"].startswith("invalid flavor options, nothing was written: ")


def test_empty_known_aliases_rejects_gpu_flavors_and_none_skips_the_check():
    assert "aliases in the passthrough plans: none" in cloud_flavors.validate([declared()], [])[0]
    assert cloud_flavors.validate([declared()], None) == []


def test_other_declaration_errors_are_all_reported():
    flavors = [declared(ram=0), declared(disk=-1),
               declared(name="x", projects=["p"]),
               declared(name="y", extra_specs={"hw:hide_hypervisor_id": "maybe", "bad key!": "1"})]
    errors = cloud_flavors.validate(flavors, None)
    text = "\n".join(errors)
    assert "flavors[0] (gpu_tiny): ram=0 must be >= 1" in text
    assert "flavors[1] (gpu_tiny): name 'gpu_tiny' is declared twice" in text
    assert "flavors[1] (gpu_tiny): disk=-1 must be >= 0" in text
    assert "flavors[2] (x): projects ['p'] only apply to a private flavor; set is_public: false" in text
    assert "hw:hide_hypervisor_id='maybe' must be true or false" in text
    assert "extra spec key 'bad key!'" in text
    assert len(errors) == 6


def test_boolean_spec_values_are_sent_as_lowercase_strings():
    assert declared(extra_specs={"hw:hide_hypervisor_id": True})["extra_specs"] == {
        "hw:hide_hypervisor_id": "true"}


# --------------------------------------------------------------------------- the difference

def view(**kw):
    return cloud_flavors.current_view(flavor(**kw))


def test_plan_create_update_unchanged():
    existing = {"gpu_tiny": view(name="gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2",
                                                                         "hw:cpu_policy": "dedicated"}),
                "ci_medium": view(name="ci_medium", ram=8192, disk=60)}
    want = [declared(), declared(name="ci_medium", ram=8192, disk=60, extra_specs={}),
            declared(name="new")]
    actions, errors = cloud_flavors.plan(want, existing, {}, {})
    assert errors == []
    assert [(a["action"], a["name"]) for a in actions] == [("update", "gpu_tiny"), ("unchanged", "ci_medium"),
                                                           ("create", "new")]
    assert actions[0]["set_specs"] == {"pci_passthrough:alias": "tesla-v100:1"}
    assert actions[0]["unset_specs"] == ["hw:cpu_policy"]
    assert actions[0]["changes"] == ["extra spec pci_passthrough:alias: 'tesla-v100:2' -> 'tesla-v100:1'",
                                     "extra spec hw:cpu_policy: 'dedicated' -> absent"]


def test_plan_keeps_undeclared_specs_without_purge():
    existing = {"gpu_tiny": view(name="gpu_tiny", extra_specs=dict(GPU, **{"hw:cpu_policy": "x"}))}
    actions, _ = cloud_flavors.plan([declared()], existing, {}, {}, purge_extra_specs=False)
    assert actions[0]["action"] == "unchanged"


def test_plan_refuses_immutable_change_unless_recreate():
    existing = {"gpu_tiny": view(name="gpu_tiny", ram=1024, extra_specs=GPU)}
    actions, errors = cloud_flavors.plan([declared()], existing, {}, {})
    assert actions == []
    assert errors == ["flavor gpu_tiny: ram: 1024 -> 2048 cannot change in place (Nova flavors are immutable); "
                      "set recreate_on_change: true to delete and create it again (it gets a new ID unless 'id' "
                      "is declared; running servers keep their copy)"]
    actions, errors = cloud_flavors.plan([declared()], existing, {}, {}, recreate_on_change=True)
    assert errors == [] and actions[0]["action"] == "recreate"
    assert actions[0]["changes"] == ["recreate: ram: 1024 -> 2048"]


def test_plan_declared_id_change_is_immutable():
    existing = {"gpu_tiny": view(name="gpu_tiny", id="abc", extra_specs=GPU)}
    _, errors = cloud_flavors.plan([declared(id="gpu_tiny")], existing, {}, {})
    assert "id: abc -> gpu_tiny cannot change in place" in errors[0]


def test_plan_prune_only_matching_undeclared():
    existing = {"gpu_tiny": view(name="gpu_tiny", extra_specs=GPU),
                "gpu_old": view(name="gpu_old"), "m1.small": view(name="m1.small")}
    actions, _ = cloud_flavors.plan([declared()], existing, {}, {}, prune=True, prune_patterns=["gpu_*"])
    assert [(a["action"], a["name"]) for a in actions] == [("unchanged", "gpu_tiny"), ("delete", "gpu_old")]
    actions, _ = cloud_flavors.plan([declared()], existing, {}, {}, prune=False)
    assert [a["action"] for a in actions] == ["unchanged"]


def test_plan_access_of_private_flavor():
    existing = {"team": view(name="team", is_public=False, extra_specs={})}
    want = [declared(name="team", is_public=False, extra_specs={}, projects=["research", "p2-id"])]
    actions, _ = cloud_flavors.plan(want, existing, {"team": ["old-id", "p2-id"]}, {"research": "r-id"})
    assert actions[0]["add_projects"] == ["r-id"] and actions[0]["remove_projects"] == ["old-id"]


def test_diff_shows_before_and_after():
    existing = {"gpu_tiny": view(name="gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2"})}
    actions, _ = cloud_flavors.plan([declared()], existing, {}, {})
    diff = cloud_flavors.diff_of(actions)
    assert diff["before"]["gpu_tiny"]["extra_specs"] == {"pci_passthrough:alias": "tesla-v100:2"}
    assert diff["after"]["gpu_tiny"]["extra_specs"] == GPU


# --------------------------------------------------------------------------- module runs (SDK mocked)

def test_create_makes_exactly_these_calls(os_flavors, conn, run_module):
    serve(conn, [])
    created = flavor("gpu_tiny", id="new-id")
    conn.compute.create_flavor.return_value = created
    result = run_module(os_flavors, ARGS)
    assert result["changed"] is True and result["created"] == ["gpu_tiny"]
    conn.connect_mock.assert_called_once_with(cloud="ogc-test", interface="public", api_timeout=120.0)
    # Every API call bounded: a connect and a read timeout apart (requests takes the pair from keystoneauth).
    assert conn.session.timeout == (10.0, 120.0)
    conn.authorize.assert_called_once_with()
    conn.compute.get.assert_called_once_with("/flavors/detail", params={"is_public": "None"}, microversion="2.61")
    conn.compute.create_flavor.assert_called_once_with(name="gpu_tiny", vcpus=4, ram=2048, disk=20, ephemeral=0,
                                                       swap=0, is_public=True)
    conn.compute.create_flavor_extra_specs.assert_called_once_with(created, GPU)
    assert len(writes(conn)) == 2
    assert result["flavors"][0]["id"] == "new-id"


def test_converged_run_writes_nothing(os_flavors, conn, run_module):
    serve(conn, [flavor("gpu_tiny", extra_specs=GPU)])
    result = run_module(os_flavors, ARGS)
    assert result["changed"] is False and result["unchanged"] == ["gpu_tiny"]
    assert writes(conn) == []


def test_update_sets_only_the_changed_spec_in_place(os_flavors, conn, run_module):
    serve(conn, [flavor("gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2",
                                                                         "old": "x"})])
    result = run_module(os_flavors, ARGS)
    assert result["updated"] == ["gpu_tiny"]
    conn.compute.create_flavor_extra_specs.assert_called_once_with("gpu_tiny-id", GPU)
    conn.compute.delete_flavor_extra_specs_property.assert_called_once_with("gpu_tiny-id", "old")
    assert len(writes(conn)) == 2


def test_check_mode_reports_but_writes_nothing(os_flavors, conn, run_module):
    serve(conn, [flavor("gpu_tiny", extra_specs={"pci_passthrough:alias": "tesla-v100:2"})])
    args = dict(ARGS, flavors=ARGS["flavors"] + [dict(name="ci_medium", vcpus=4, ram=8192, disk=60)])
    result = run_module(os_flavors, args, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["updated"] == ["gpu_tiny"] and result["created"] == ["ci_medium"]
    assert result["diff"]["after"]["ci_medium"]["ram"] == 8192
    assert writes(conn) == []


def test_recreate_deletes_then_creates(os_flavors, conn, run_module):
    serve(conn, [flavor("gpu_tiny", ram=1024, extra_specs=GPU)])
    conn.compute.create_flavor.return_value = flavor("gpu_tiny", id="second")
    result = run_module(os_flavors, dict(ARGS, recreate_on_change=True))
    assert result["recreated"] == ["gpu_tiny"]
    assert [c for c in conn.compute.method_calls if c[0] in WRITES][:3] == [
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


def test_retired_alias_fails_before_connecting_naming_the_host(os_flavors, conn, run_module):
    result = run_module(os_flavors, dict(ARGS, known_aliases=["a100-pcie-40gb"],
                                         retired_aliases={"tesla-v100": ["gpu-001"]}))
    assert result["failed"] is True
    assert "'tesla-v100', which no GPU host provides any more: host gpu-001 offered it" in result["msg"]
    conn.connect_mock.assert_not_called()


def test_immutable_change_fails_without_writing(os_flavors, conn, run_module):
    serve(conn, [flavor("gpu_tiny", vcpus=8, extra_specs=GPU)])
    result = run_module(os_flavors, ARGS)
    assert result["failed"] is True and "vcpus: 8 -> 4 cannot change in place" in result["msg"]
    assert writes(conn) == []


@pytest.mark.filterwarnings("ignore:The .http_status. parameter")
def test_server_error_halfway_names_the_flavor_and_what_was_done(os_flavors, conn, run_module):
    from openstack import exceptions  # pylint: disable=import-outside-toplevel

    serve(conn, [])
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
    serve(conn, [flavor("team", is_public=False)])
    conn.compute.get_flavor_access.return_value = [{"flavor_id": "team-id", "tenant_id": "gone-id"}]
    args = dict(cloud="ogc-test", flavors=[dict(name="team", vcpus=4, ram=2048, disk=20, is_public=False,
                                                projects=["research"])])
    result = run_module(os_flavors, args)
    assert result["updated"] == ["team"]
    conn.compute.get_flavor_access.assert_called_once_with("team-id")
    conn.compute.flavor_add_tenant_access.assert_called_once_with("team-id", "research-id")
    conn.compute.flavor_remove_tenant_access.assert_called_once_with("team-id", "gone-id")


# --------------------------------------------------------------------------- the listing (raw JSON via the proxy)

def test_listing_follows_pages_and_maps_nova_fields(conn):
    first = [nova_json(flavor(f"f{i}")) for i in range(3)]
    second = [nova_json(flavor("last", swap=512, ephemeral=10, is_public=False, description="d"))]
    conn.compute.get_endpoint_data.return_value = SimpleNamespace(min_microversion="2.1", max_microversion="2.96")
    conn.compute.get.side_effect = [
        response({"flavors": first, "flavors_links": [{"rel": "next", "href": "http://x/flavors?marker=f2-id"}]}),
        response({"flavors": second})]
    listed = cloud_flavors.list_flavors(conn.compute)
    assert [f["name"] for f in listed] == ["f0", "f1", "f2", "last"]
    assert conn.compute.get.call_args_list[1] == mock.call(
        "/flavors/detail", params={"is_public": "None", "marker": "f2-id"}, microversion="2.61")
    assert cloud_flavors.current_view(listed[0])["swap"] == 0
    assert listed[3] == dict(name="last", id="last-id", vcpus=4, ram=2048, disk=20, ephemeral=10, swap=512,
                             is_public=False, description="d", extra_specs={})


def test_listing_on_a_compute_api_older_than_queens_fails_clearly(os_flavors, conn, run_module):
    serve(conn, [], max_microversion="2.60")
    result = run_module(os_flavors, ARGS)
    assert result["failed"] is True
    assert result["msg"] == ("cannot list the flavors: the compute API does not offer microversion 2.61 (OpenStack "
                             "Queens or later), which lists extra specs with the flavors; nothing was written")
    assert writes(conn) == []


@pytest.mark.filterwarnings("ignore:The .http_status. parameter")
def test_listing_error_names_the_listing_and_the_server_message(os_flavors, conn, run_module):
    serve(conn, [])
    conn.compute.get.return_value = SimpleNamespace(
        status_code=503, headers={"content-type": "text/plain"}, content=b"down", text="down",
        reason="Service Unavailable", url="http://nova/flavors/detail", json=lambda: {})
    result = run_module(os_flavors, ARGS)
    assert result["failed"] is True and result["msg"].startswith("listing flavors failed: HttpException: 503: Service Unavailable")
    assert writes(conn) == []
