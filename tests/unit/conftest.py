"""Fixtures shared by the unit tests of the OpenStack modules (tests/unit/cloud, tests/unit/ops):
a mocked openstacksdk connection and a runner for a module's main()."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ogc_testlib import join_module_utils

# The modules import `ansible.module_utils.openstack_cloud`: make the repo's module_utils part of that
# package, as ansible.cfg's `module_utils = module_utils` does for ansible-playbook.
join_module_utils()

from ansible.module_utils.testing import patch_module_args  # noqa: E402  pylint: disable=wrong-import-position


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
        return json.loads(capsys.readouterr().out)

    return run
