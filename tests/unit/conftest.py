"""Fixtures shared by the unit tests of the OpenStack modules (tests/unit/cloud, tests/unit/ops):
a mocked openstacksdk connection and a runner for a module's main()."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible.module_utils.testing import patch_module_args


@pytest.fixture
def conn():
    """The mocked openstacksdk connection every module run gets from openstack.connect()."""
    connection = mock.MagicMock(name="conn")
    with mock.patch("ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack.openstack.connect", return_value=connection) as connect:
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
        return json.loads(capsys.readouterr().out)

    return run
