"""The clouds_yaml connection option: the module reads the cloud from that file, as when OS_CLIENT_CONFIG_FILE is
exported, so a play declares the file once with the other connection options (module_defaults) instead of an
``environment:`` on every task. Real openstacksdk, a Keystone that is not there (127.0.0.1:9 refuses at once)."""

from __future__ import annotations

import pytest
from openstack.config import loader

from ogc_testlib import collection_module

os_quotas = collection_module("os_quotas")
CLOUDS = """\
clouds:
  elsewhere:
    auth:
      auth_url: http://127.0.0.1:9/v3
      username: admin
      password: not-used
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
"""


@pytest.fixture(autouse=True)
def _no_exported_clouds_yaml(monkeypatch, tmp_path):
    # The module sets OS_CLIENT_CONFIG_FILE in its own process; monkeypatch puts the test process's back after.
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", "")
    monkeypatch.delenv("OS_CLOUD", raising=False)
    # openstacksdk puts the file at the front of its module-wide search list; a module run is one process, these
    # tests are one process for all.
    monkeypatch.setattr(loader, "CONFIG_FILES", list(loader.CONFIG_FILES))


def test_the_cloud_is_read_from_clouds_yaml(run_module, tmp_path):
    path = tmp_path / "clouds.yaml"
    path.write_text(CLOUDS, encoding="utf-8")
    result = run_module(os_quotas, {"cloud": "elsewhere", "clouds_yaml": str(path), "projects": []})
    assert result["failed"] is True
    # Found in the file: the run got as far as Keystone's address, which refuses.
    assert result["msg"].startswith("cannot reach the identity endpoint of cloud 'elsewhere'"), result["msg"]


def test_without_clouds_yaml_the_cloud_is_not_found(run_module):
    result = run_module(os_quotas, {"cloud": "elsewhere", "projects": []})
    assert result["failed"] is True
    assert result["msg"].startswith("cannot configure the connection to cloud 'elsewhere'"), result["msg"]


def test_a_missing_clouds_yaml_is_named(run_module, tmp_path):
    missing = tmp_path / "nowhere" / "clouds.yaml"
    result = run_module(os_quotas, {"cloud": "elsewhere", "clouds_yaml": str(missing), "projects": []})
    assert result["failed"] is True
    assert result["msg"] == (f"clouds_yaml {missing} is not a readable file: give the path of the clouds.yaml on the "
                             "host that runs the module (the control host), or leave it empty for openstacksdk's "
                             "search path")
