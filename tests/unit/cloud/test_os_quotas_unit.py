"""os_quotas and the shared connection plumbing (SDK mocked)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import quotas as cloud_quotas

QUOTA_WRITES = ("update_quota_class_set", "update_quota_set")


def quota(**values):
    base = dict(instances=10, cores=20, ram=51200, key_pairs=100, metadata_items=128, server_groups=10,
                server_group_members=10, injected_files=5, injected_file_content_bytes=10240,
                injected_file_path_bytes=255)
    base.update(values)
    return SimpleNamespace(**base)


def quota_writes(conn):
    return [c for name in QUOTA_WRITES for c in getattr(conn.compute, name).call_args_list]


@pytest.fixture
def cloud(conn):
    conn.compute.get_quota_class_set.return_value = quota()
    conn.compute.get_quota_set.return_value = quota(instances=15)
    conn.identity.projects.return_value = [SimpleNamespace(id="research-id", name="research"),
                                           SimpleNamespace(id="admin-id", name="admin")]
    return conn


ARGS = dict(cloud="ogc-test", default_class=dict(instances=15), projects=[dict(project="research", instances=30,
                                                                                cores=-1)])


def test_validate_rejects_negative_values_other_than_minus_one():
    errors = cloud_quotas.validate(dict(instances=-2, cores=-1), [dict(project="p", ram=-5), dict(project="p", ram=1),
                                                                dict(project="q")])
    assert errors == ["default_class: instances=-2 is negative; use -1 for unlimited or a value >= 0",
                      "projects[0] (p): ram=-5 is negative; use -1 for unlimited or a value >= 0",
                      "projects[1]: project 'p' is declared twice",
                      "projects[2] (q): declares no quota key (one of instances, cores, ram, key_pairs, metadata_items, "
                      "server_groups, server_group_members, injected_files, injected_file_content_bytes, "
                      "injected_file_path_bytes)"]


def test_difference_only_declared_keys():
    assert cloud_quotas.difference({"instances": 15, "cores": 20}, {"instances": 10, "cores": 20, "ram": 1}) == {
        "instances": (10, 15)}


def test_first_run_writes_only_changed_keys(os_quotas, cloud, run_module):
    result = run_module(os_quotas, ARGS, diff=True)
    assert result["changed"] is True
    assert result["updated"] == ["class default", "project research"]
    cloud.compute.update_quota_class_set.assert_called_once_with("default", instances=15)
    cloud.compute.update_quota_set.assert_called_once_with("research-id", instances=30, cores=-1)
    assert result["changes"] == {"class default": ["instances: 10 -> 15"],
                                 "project research": ["cores: 20 -> -1", "instances: 15 -> 30"]}
    assert result["diff"] == {"before": {"class default": {"instances": 10},
                                         "project research": {"cores": 20, "instances": 15}},
                              "after": {"class default": {"instances": 15},
                                        "project research": {"cores": -1, "instances": 30}}}


def test_converged_run_writes_nothing(os_quotas, cloud, run_module):
    cloud.compute.get_quota_class_set.return_value = quota(instances=15)
    cloud.compute.get_quota_set.return_value = quota(instances=30, cores=-1)
    result = run_module(os_quotas, ARGS)
    assert result["changed"] is False and result["unchanged"] == ["class default", "project research"]
    assert quota_writes(cloud) == []


def test_check_mode_writes_nothing(os_quotas, cloud, run_module):
    result = run_module(os_quotas, ARGS, check_mode=True)
    assert result["changed"] is True and result["updated"] == ["class default", "project research"]
    assert quota_writes(cloud) == []


def test_negative_quota_fails_before_connecting(os_quotas, conn, run_module):
    result = run_module(os_quotas, dict(ARGS, default_class=dict(instances=-3)))
    assert result["failed"] is True
    assert result["msg"] == ("invalid quota declaration, nothing was written: default_class: instances=-3 is "
                             "negative; use -1 for unlimited or a value >= 0")
    conn.connect_mock.assert_not_called()


def test_missing_project_fails_before_any_write(os_quotas, cloud, run_module):
    cloud.identity.projects.return_value = []
    result = run_module(os_quotas, ARGS)
    assert result["msg"] == ("project 'research' does not exist (declare it first, e.g. with os_access); nothing "
                             "was written")
    assert quota_writes(cloud) == []


def test_project_name_in_two_domains_needs_an_id(os_quotas, cloud, run_module):
    cloud.identity.projects.return_value = [SimpleNamespace(id="a", name="research"),
                                            SimpleNamespace(id="b", name="research")]
    result = run_module(os_quotas, ARGS)
    assert result["msg"] == "project name 'research' exists in several domains: give its ID"
    assert quota_writes(cloud) == []
    result = run_module(os_quotas, dict(ARGS, projects=[dict(project="b", instances=30)]))
    cloud.compute.update_quota_set.assert_called_once_with("b", instances=30)


def test_several_projects_are_read_concurrently_and_written_in_order(os_quotas, cloud, run_module):
    cloud.identity.projects.return_value = [SimpleNamespace(id=f"p{i}-id", name=f"p{i}") for i in range(5)]
    cloud.compute.get_quota_set.side_effect = lambda pid: quota(instances=int(pid[1]))
    projects = [dict(project=f"p{i}", instances=3) for i in range(5)]
    result = run_module(os_quotas, dict(cloud="ogc-test", projects=projects))
    assert result["unchanged"] == ["project p3"]
    assert result["updated"] == ["project p0", "project p1", "project p2", "project p4"]
    assert [c.args for c in cloud.compute.update_quota_set.call_args_list] == [("p0-id",), ("p1-id",), ("p2-id",),
                                                                              ("p4-id",)]
    assert cloud.identity.projects.call_count == 1 and cloud.compute.get_quota_set.call_count == 5


def test_server_error_names_the_target_and_what_was_done(os_quotas, cloud, run_module):
    from openstack import exceptions  # pylint: disable=import-outside-toplevel

    cloud.compute.update_quota_set.side_effect = exceptions.BadRequestException(message="Quota limit must be >= 5")
    result = run_module(os_quotas, ARGS)
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == ("updating quotas of project research failed: Quota limit must be >= 5. Already done in "
                             "this run: updated class default; a re-run finishes the job")


def test_unknown_quota_key_is_rejected_by_the_spec(os_quotas, cloud, run_module):
    result = run_module(os_quotas, dict(ARGS, projects=[dict(project="research", volumes=3)]))
    assert result["failed"] is True and "volumes" in result["msg"]
    cloud.connect_mock.assert_not_called()


# --------------------------------------------------------------------------- shared plumbing

def test_auth_dict_secrets_and_connection_kwargs(cloud_utils):
    params = dict(cloud=None, auth=dict(auth_url="http://k/v3", username="u", password="p", project_name=None),
                  auth_type=None, region_name="RegionOne", interface="internal", validate_certs=False,
                  ca_cert=None, connect_timeout=5, read_timeout=30)
    assert cloud_utils.connection_kwargs(params) == dict(
        auth=dict(auth_url="http://k/v3", username="u", password="p"), region_name="RegionOne",
        interface="internal", api_timeout=30, verify=False)
    spec = cloud_utils.openstack_argument_spec()
    assert spec["auth"]["options"]["password"]["no_log"] is True
    assert spec["auth"]["options"]["application_credential_secret"]["no_log"] is True
    assert "no_log" not in spec["auth"]["options"]["username"]


def test_wrong_credentials_message(os_quotas, conn, run_module):
    from keystoneauth1 import exceptions as ksa  # pylint: disable=import-outside-toplevel

    conn.authorize.side_effect = ksa.Unauthorized("The request you have made requires authentication.",
                                                  http_status=401)
    result = run_module(os_quotas, ARGS)
    assert result["msg"].startswith("authentication to cloud 'ogc-test' failed (wrong user, password or project?): ")
    assert "requires authentication" in result["msg"]
    assert quota_writes(conn) == []


def test_wrong_credentials_as_openstacksdk_raises_them(os_quotas, conn, run_module):
    # Connection.authorize() re-raises keystoneauth's exception as an SDKException inside its handler: the kind is
    # read from the wrapped exception, not from the words.
    from keystoneauth1 import exceptions as ksa  # pylint: disable=import-outside-toplevel
    from openstack import exceptions as sdk  # pylint: disable=import-outside-toplevel

    def authorize():
        try:
            raise ksa.Unauthorized("The request you have made requires authentication.", http_status=401)
        except ksa.ClientException as exc:
            raise sdk.SDKException(str(exc))  # pylint: disable=raise-missing-from

    conn.authorize.side_effect = authorize
    result = run_module(os_quotas, ARGS)
    assert result["msg"].startswith("authentication to cloud 'ogc-test' failed (wrong user, password or project?): ")


def test_words_alone_do_not_make_a_wrong_password(os_quotas, conn, run_module):
    conn.authorize.side_effect = RuntimeError("proxy said: HTTP 401 Unauthorized")
    result = run_module(os_quotas, ARGS)
    assert result["msg"].startswith("cannot authenticate to cloud 'ogc-test': "), result["msg"]


def test_a_port_with_401_in_it_is_not_a_wrong_password(os_quotas, conn, run_module):
    conn.authorize.side_effect = RuntimeError("Internal Server Error (HTTP 500) from http://127.0.0.1:54013/v3")
    result = run_module(os_quotas, ARGS)
    assert result["msg"].startswith("cannot authenticate to cloud 'ogc-test': "), result["msg"]


def test_unreachable_endpoint_message(os_quotas, conn, run_module):
    from keystoneauth1 import exceptions as ksa  # pylint: disable=import-outside-toplevel

    conn.authorize.side_effect = ksa.ConnectFailure("Unable to establish connection to http://127.0.0.1:9/v3")
    result = run_module(os_quotas, dict(ARGS, cloud=None, auth=dict(auth_url="http://127.0.0.1:9/v3")))
    assert result["msg"] == ("cannot reach the identity endpoint of auth_url http://127.0.0.1:9/v3: Unable to "
                             "establish connection to http://127.0.0.1:9/v3 (is Keystone running and the auth_url "
                             "right?)")


def test_project_value_equal_to_a_changing_class_default_is_pinned(os_quotas, cloud, run_module):
    # research inherits instances=10 from the class; the run raises the class to 15 but declares 10 for it.
    cloud.compute.get_quota_set.return_value = quota(instances=10)
    result = run_module(os_quotas, dict(ARGS, projects=[dict(project="research", instances=10, cores=20)]))
    cloud.compute.update_quota_class_set.assert_called_once_with("default", instances=15)
    cloud.compute.update_quota_set.assert_called_once_with("research-id", instances=10)
    assert result["changes"]["project research"] == ["instances: 10 -> 10 (pinned: the class default changes to 15)"]
    # Same declaration once converged (class already 15, project pinned at 10): nothing written.
    cloud.compute.update_quota_class_set.reset_mock()
    cloud.compute.update_quota_set.reset_mock()
    cloud.compute.get_quota_class_set.return_value = quota(instances=15)
    result = run_module(os_quotas, dict(ARGS, projects=[dict(project="research", instances=10, cores=20)]))
    assert result["changed"] is False and quota_writes(cloud) == []


def test_check_mode_reports_what_the_real_run_does(os_quotas, cloud, run_module):
    check = run_module(os_quotas, ARGS, check_mode=True, diff=True)
    assert quota_writes(cloud) == []
    real = run_module(os_quotas, ARGS, diff=True)
    assert len(quota_writes(cloud)) == 2
    for key in ("changed", "updated", "unchanged", "changes", "diff"):
        assert check[key] == real[key], key
