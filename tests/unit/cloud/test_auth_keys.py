"""A misspelt key of a cloud module's auth dict (``passwrd``): refused by name, its value never printed - not in the
message, not in the module arguments Ansible echoes back at -vvv (plugins/module_utils/cloud/openstack.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from ogc_testlib import collection_module

os_flavors = collection_module("os_flavors")
SECRET = "Sup3r-S3cret-XYZ"


def test_a_misspelt_auth_key_is_refused_without_its_value(run_module, conn):
    result = run_module(os_flavors, {"auth": {"auth_url": "https://keystone.example:5000/v3", "username": "admin",
                                              "passwrd": SECRET, "project_nmae": "gpu-team"},
                                     "flavors": []})
    assert result["failed"] is True
    assert result["msg"].startswith("auth has unknown key(s) passwrd (did you mean password?), project_nmae (did you "
                                    "mean project_name?); their values are not shown, as they may be secrets")
    assert SECRET not in json.dumps(result)
    assert result["invocation"]["module_args"]["auth"]["passwrd"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert result["invocation"]["module_args"]["auth"]["username"] == "admin"      # known keys print as before
    assert not conn.connect_mock.called


def test_known_auth_keys_connect_as_before(run_module, conn):
    conn.compute.get_endpoint_data.return_value = SimpleNamespace(min_microversion="2.1", max_microversion="2.96")
    conn.compute.get.return_value = SimpleNamespace(status_code=200, headers={}, content=b"",
                                                    json=lambda: {"flavors": []})
    result = run_module(os_flavors, {"auth": {"auth_url": "https://keystone.example:5000/v3", "username": "admin",
                                              "password": SECRET}, "flavors": []})
    assert "failed" not in result or not result["failed"], result
    assert conn.connect_mock.call_args.kwargs["auth"]["password"] == SECRET and SECRET not in json.dumps(result)
