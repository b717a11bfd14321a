"""plugins/module_utils/common/locations.py (host names as file names, absolute paths, writable directories, the BMC address) and
the filters the roles check them with (plugins/filter/ogc_inputs.py, passthrough_host_checks.py)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ogc_testlib import load_source, collection_plugin

inputs = collection_plugin("filter", "ogc_inputs")
checks = collection_plugin("filter", "passthrough_host_checks")


@pytest.mark.parametrize("host, words", [
    ("../../x", "holds a '/'"),
    ("rack1/h1", "holds a '/'"),
    ("..", "is '..'"),
    (".", "is '.'"),
    ("a\0b", "holds a NUL character"),
    ("", "is empty"),
    (None, "is empty or not a string"),
])
def test_host_names_that_cannot_be_file_names(host, words):
    problem = locations.host_name_problem(host)
    assert problem and words in problem
    if host:
        assert "Rename the host in the inventory (ansible_host keeps its address)" in problem


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=20))
def test_property_a_name_is_accepted_exactly_when_it_stays_one_file_in_its_directory(host):
    accepted = locations.host_name_problem(host) is None
    base = "/srv/plans"
    joined = os.path.normpath(os.path.join(base, host + ".json"))
    stays = os.path.dirname(joined) == base and "\0" not in host and host not in (".", "..")
    assert accepted == stays


def test_path_rule():
    assert locations.path_problem("v", "/x") is None
    assert "v ('x') is not an absolute path" in locations.path_problem("v", "x")
    assert "is not an absolute path" in locations.path_problem("v", 3)
    assert locations.path_problem("v", "", allow_empty=True) is None
    assert locations.path_problem("v", "", allow_empty=False)


@pytest.mark.parametrize("value, address", [
    ("10.0.0.21", "10.0.0.21"), ("bmc-h1.example:8443", "bmc-h1.example:8443"),
    ("https://10.0.0.21", "10.0.0.21"), ("HTTPS://bmc:8443/", "bmc:8443"), ("  https://bmc  ", "bmc"),
])
def test_bmc_address_accepts_and_strips_https(value, address):
    assert locations.bmc_address(value) == (address, None)
    assert inputs.bmc_address(value) == address


@pytest.mark.parametrize("value, words", [
    ("http://10.0.0.21", "uses http://: Redfish is spoken over HTTPS only"),
    ("redfish://bmc", "uses redfish://"),
    ("https://bmc/redfish/v1", "not a path"),
    ("admin@bmc", "not user information"),
    ("https://", "not empty"),
    (3, "is not a string"),
])
def test_bmc_address_refuses_other_schemes_and_paths(value, words):
    address, problem = locations.bmc_address(value)
    assert address is None and words in problem and "passthrough_host_bmc_address" in problem
    with pytest.raises(Exception, match="passthrough_host_bmc_address"):
        inputs.bmc_address(value)


def test_role_variables_name_the_variable_and_host():
    errors = checks.var_errors({"passthrough_host_root": "/", "passthrough_host_reboot_timeout": 5,
                                "passthrough_host_lock_file": "lock", "passthrough_host_bmc_address": "http://b",
                                "passthrough_host_bmc_username": "u", "passthrough_host_bmc_password": "p"},
                               "h1", family="Debian")
    errors += checks.rollout_var_errors({"passthrough_rollout_drain_clouds_yaml": "clouds.yaml"}, "h1")
    text = " ".join(errors)
    assert "h1: passthrough_host_lock_file (lock) is not an absolute path" in text
    assert "h1: passthrough_host_bmc_address (http://b) uses http://" in text
    assert "h1: passthrough_rollout_drain_clouds_yaml ('clouds.yaml') is not an absolute path" in text
    assert inputs.host_name_errors(["ok", "a/b"]) == [f"Host 'a/b': {locations.host_name_problem('a/b')}."]
    assert inputs.path_errors({"passthrough_plan_dir": ""}, "h", optional=["passthrough_plan_dir"]) == []
    assert inputs.path_errors({"passthrough_plan_dir": "p"}, "h") == [
        "h: passthrough_plan_dir ('p') is not an absolute path: give it starting with / (a relative path resolves "
        "against the directory ansible-playbook runs in)."]


def test_a_directory_of_another_user_is_named_with_its_owner_and_mode(tmp_path, monkeypatch):
    """Seen by a user who may not write it (the tests run as root, who may: the rights are the system's answer,
    mocked here), the answer names the owner and the mode, not an errno."""
    plans = tmp_path / "plans"
    plans.mkdir(mode=0o700)
    plans.chmod(0o700)
    denied = {str(plans)}
    real_access, real_stat = os.access, os.stat

    def access(path, mode, *args, **kwargs):
        return False if os.fspath(path) in denied else real_access(path, mode, *args, **kwargs)

    def stat_(path, *args, **kwargs):
        if os.fspath(path).startswith(str(plans) + "/"):
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *args, **kwargs)

    assert locations.writable_dir_problem("passthrough_plan_dir", str(plans)) is None      # root may
    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "stat", stat_)
    monkeypatch.setattr(locations, "_me", lambda: "operator")
    assert locations.writable_dir_problem("passthrough_plan_dir", str(plans)) == (
        f"passthrough_plan_dir ({plans}) is not writable by operator: it is owned by root, mode 0700. Run as its "
        "owner, give operator write access, or point passthrough_plan_dir at a directory of operator's")
    assert locations.writable_dir_problem("passthrough_plan_dir", f"{plans}/new") == (
        f"passthrough_plan_dir ({plans}/new) cannot be reached by operator: {plans} is owned by root, mode 0700")
    assert locations.writable_dir_problem("d", str(tmp_path / "missing" / "x")) is None    # created when needed
    (tmp_path / "f").write_text("")
    assert locations.writable_dir_problem("d", str(tmp_path / "f")) == f"d ({tmp_path / 'f'}) is not a directory"
