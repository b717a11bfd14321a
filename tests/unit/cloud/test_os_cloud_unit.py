"""os_cloud: access, flavors and quotas in one module run and one connection (SDK mocked)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

GPU = {"pci_passthrough:alias": "tesla-v100:1"}


def quota(**values):
    base = dict(instances=10, cores=20, ram=51200)
    base.update(values)
    return SimpleNamespace(**base)


@pytest.fixture
def cloud(conn):
    """A cloud holding project ci, user alice, no flavors, Nova's default quotas."""
    conn.identity.projects.return_value = [SimpleNamespace(id="ci-id", name="ci", description="CI", is_enabled=True,
                                                           domain_id="default")]
    conn.identity.users.return_value = []
    conn.compute.get_endpoint_data.return_value = SimpleNamespace(min_microversion="2.1", max_microversion="2.96")
    conn.compute.get.return_value = SimpleNamespace(status_code=200, headers={}, content=b"",
                                                    json=lambda: {"flavors": []})
    conn.compute.create_flavor.side_effect = lambda **kw: SimpleNamespace(id=kw["name"] + "-id", **kw)
    conn.compute.get_quota_class_set.return_value = quota()
    conn.compute.get_quota_set.return_value = quota()
    return conn


ARGS = dict(cloud="ogc-test",
            access=dict(projects=[dict(name="ci", description="CI"), dict(name="research")]),
            flavors=dict(flavors=[dict(name="gpu_tiny", vcpus=4, ram=2048, disk=20, extra_specs=GPU),
                                  dict(name="team", vcpus=2, ram=1024, is_public=False, projects=["research"])],
                         known_aliases=["tesla-v100"]),
            quotas=dict(default_class=dict(instances=15), projects=[dict(project="research", instances=6)]))


def test_all_sections_in_order_over_one_connection(os_cloud, cloud, run_module):
    cloud.identity.create_project.side_effect = lambda **kw: SimpleNamespace(id="research-id", **kw)
    # After the access section created it, the project listing shows research.
    listings = [cloud.identity.projects.return_value,
                cloud.identity.projects.return_value + [SimpleNamespace(id="research-id", name="research")]]
    cloud.identity.projects.side_effect = lambda: listings.pop(0) if len(listings) > 1 else listings[0]
    result = run_module(os_cloud, ARGS)
    assert result["changed"] is True, result
    assert result["sections"] == ["access", "flavors", "quotas"]
    cloud.connect_mock.assert_called_once_with(cloud="ogc-test", interface="public", api_timeout=120.0)
    # Every API call bounded: a connect and a read timeout apart (requests takes the pair from keystoneauth).
    assert cloud.session.timeout == (10.0, 120.0)
    cloud.authorize.assert_called_once_with()
    assert result["access"]["created"] == ["project research"]
    assert result["flavors"]["created"] == ["gpu_tiny", "team"]
    assert result["quotas"]["updated"] == ["class default", "project research"]
    (team, project_id), _ = cloud.compute.flavor_add_tenant_access.call_args
    assert (team.name, project_id) == ("team", "research-id")
    cloud.compute.update_quota_set.assert_called_once_with("research-id", instances=6)
    order = [c[0] for c in cloud.method_calls if c[0] in ("identity.create_project", "compute.create_flavor",
                                                          "compute.update_quota_class_set")]
    assert order == ["identity.create_project", "compute.create_flavor", "compute.create_flavor",
                     "compute.update_quota_class_set"]


def test_a_section_left_out_is_not_touched(os_cloud, cloud, run_module):
    result = run_module(os_cloud, dict(cloud="ogc-test", quotas=ARGS["quotas"] | dict(projects=[])))
    assert result["sections"] == ["quotas"] and "flavors" not in result and "access" not in result
    cloud.compute.get.assert_not_called()
    cloud.identity.users.assert_not_called()


def test_bad_input_in_two_sections_names_both_and_connects_to_nothing(os_cloud, cloud, run_module):
    args = dict(ARGS, flavors=dict(flavors=[dict(name="x", vcpus=1, ram=512, extra_specs={"pci_passthrough:alias": "v:x"})]),
                quotas=dict(default_class=dict(instances=-3)))
    result = run_module(os_cloud, args)
    assert result["failed"] is True
    assert result["msg"].startswith("flavors: invalid flavor declaration, nothing was written: flavors[0] (x): extra "
                                    "spec pci_passthrough:alias='v:x' is malformed")
    assert "; quotas: invalid quota declaration, nothing was written: default_class: instances=-3 is negative" \
        in result["msg"]
    assert result["errors"][1].startswith("quotas: default_class: instances=-3")
    cloud.connect_mock.assert_not_called()


def test_allow_list_and_file_are_exclusive_inside_the_section(os_cloud, cloud, run_module, tmp_path):
    listed = tmp_path / "allow.json"
    listed.write_text('["alice"]')
    result = run_module(os_cloud, dict(cloud="ogc-test", access=dict(allow_list=["bob"],
                                                                      allow_list_file=str(listed))))
    assert result["failed"] is True and "mutually exclusive: allow_list|allow_list_file" in result["msg"]
    cloud.connect_mock.assert_not_called()


@pytest.mark.filterwarnings("ignore:The .http_status. parameter")
def test_failure_in_a_later_section_names_it_and_what_earlier_sections_did(os_cloud, cloud, run_module):
    from openstack import exceptions  # pylint: disable=import-outside-toplevel

    cloud.compute.update_quota_class_set.side_effect = exceptions.HttpException(message="Quota exceeded",
                                                                                http_status=500)
    args = dict(cloud="ogc-test", flavors=dict(flavors=[dict(name="gpu_tiny", vcpus=4, ram=2048, extra_specs=GPU)]),
                quotas=dict(default_class=dict(instances=15)))
    result = run_module(os_cloud, args)
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == ("quotas: updating quota class set default failed: HTTP 500: Quota exceeded. Already "
                             "done in this run: flavors: created gpu_tiny; a re-run finishes the job")
    assert result["flavors"]["created"] == ["gpu_tiny"] and result["failed_item"] == "default"


def test_check_mode_plans_on_projects_the_access_section_would_create(os_cloud, cloud, run_module):
    result = run_module(os_cloud, ARGS, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["access"]["created"] == ["project research"]
    assert result["flavors"]["created"] == ["gpu_tiny", "team"]
    assert result["flavors"]["changes"]["team"][1] == "give access to projects (new project research)"
    assert result["quotas"]["changes"]["project research"] == ["instances: None -> 6"]
    cloud.compute.get_quota_set.assert_not_called()  # nothing to read for a project that does not exist yet
    assert not [c for c in cloud.method_calls if c[0].split(".")[-1].startswith(("create", "update", "delete",
                                                                                 "assign", "flavor_add"))]
    assert [(d["before_header"], d["after_header"]) for d in result["diff"]] == [
        ("access (before)", "access (after)"), ("flavors (before)", "flavors (after)"),
        ("quotas (before)", "quotas (after)")]
    assert result["diff"][2]["after"] == {"class default": {"instances": 15}, "project research": {"instances": 6}}
