"""Fixtures for the OpenStack module tests: load library/os_*.py with a mocked openstacksdk connection."""

from __future__ import annotations

import importlib.util
import json
import os
from unittest import mock

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# The modules import `ansible.module_utils.openstack_cloud`: make the repo's module_utils part of that
# package, as ansible.cfg's `module_utils = module_utils` does for ansible-playbook.
import ansible.module_utils  # noqa: E402  pylint: disable=wrong-import-position

if os.path.join(ROOT, "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))

from ansible.module_utils.testing import patch_module_args  # noqa: E402  pylint: disable=wrong-import-position


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "library", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def os_flavors():
    return load_module("os_flavors")


@pytest.fixture(scope="session")
def os_quotas():
    return load_module("os_quotas")


@pytest.fixture(scope="session")
def os_access():
    return load_module("os_access")


@pytest.fixture(scope="session")
def os_images():
    return load_module("os_images")


@pytest.fixture(scope="session")
def cloud_utils():
    import ansible.module_utils.openstack_cloud as utils  # pylint: disable=import-outside-toplevel

    return utils


@pytest.fixture
def conn():
    """The mocked openstacksdk connection every module run gets from openstack.connect()."""
    connection = mock.MagicMock(name="conn")
    with mock.patch("ansible.module_utils.openstack_cloud.openstack.connect", return_value=connection) as connect:
        connection.connect_mock = connect
        yield connection


@pytest.fixture
def run_module(capsys):
    """Run a module's main() with these args; returns its JSON result (failed or not)."""

    def run(module, args, check_mode=False, diff=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        if diff:
            args["_ansible_diff"] = True
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                module.main()
        out = capsys.readouterr().out
        return json.loads(out)

    return run
