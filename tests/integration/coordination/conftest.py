"""``OGC_CPU_PRESSURE=<seconds>``: every coordination test runs while a bounded CPU load of the test's own spins (one
busy loop per core and one more, tests/helpers/cpu_load.py), each loop stopping by itself after at most that many
seconds and stopped by its PID when the test ends - the coordination tests run as on a busy AWX execution node:

    OGC_CPU_PRESSURE=60 .venv/bin/python -m pytest -q -p no:randomly tests/integration/coordination/test_backends.py

Unset (the default), no load: the tests' own waits are the same either way."""

from __future__ import annotations

import os
import sys

import pytest

from ogc_testlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from cpu_load import CpuLoad  # noqa: E402  pylint: disable=wrong-import-position
from etcd_server import EtcdServer  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(autouse=True)
def cpu_pressure():
    seconds = os.environ.get("OGC_CPU_PRESSURE", "")
    if not seconds:
        yield None
        return
    with CpuLoad(processes=(os.cpu_count() or 1) + 1, seconds=min(float(seconds), 300.0)) as load:
        yield load


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    """A real coordination service (Debian's etcd on 127.0.0.1), one for each test file that asks for it."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture(params=["file", "etcd"])
def url(request, tmp_path):
    """A coordination URL of each kind, empty for the test (etcd: a key prefix of its own)."""
    if request.param == "file":
        return f"file://{tmp_path}/coordination"
    server = request.getfixturevalue("etcd")
    return f"{server.url}/{request.node.name.replace('[', '-').replace(']', '')}"
