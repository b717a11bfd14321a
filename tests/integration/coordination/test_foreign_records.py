"""Keys the project did not write, on a real etcd (Debian's etcd-server on 127.0.0.1, tests/helpers/etcd_server.py):
another tool's keys under the prefix are ignored (a slot request goes on); a key of the project's own that holds no
record is refused naming the key and the etcdctl command; a stop record from the future is named as such."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.request

import pytest

from ogc_testlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from etcd_server import EtcdServer  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import (  # noqa: E402
    backend as be, identity as ident, leases, slots)  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), lifetime=600).start()
    yield server
    server.stop()


def put(server, key, value):
    """A key written the way another tool writes it: straight to etcd's gateway, not through the project."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()}).encode()
    request = urllib.request.Request(f"{server.client_url}/v3/kv/put", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def holder(name):
    return {"run": ident.digest("foreign", name), "controller": f"ctl-{name}", "controller_id": ident.digest(name),
            "boot": ident.digest("boot", name), "user": "op", "pid": 1, "start_time": 1}


def test_other_tools_keys_under_the_prefix_are_ignored(etcd):
    prefix = "/ogc-foreign-a"
    for key, value in ((f"{prefix}/config", "plain text"), (f"{prefix}/slot/lock", "{}"),
                       (f"{prefix}/slot/0001/extra", "[1, 2]"), (f"{prefix}/slots", "x"), (f"{prefix}/stopped.old", "x"),
                       (f"{prefix}/slot/", "x")):
        put(etcd, key, value)
    backend = be.open_backend(f"etcd3+http://127.0.0.1:{etcd.client_port}{prefix}")
    here = holder("a")
    lease = be.lease_id_of(here["run"])
    assert backend.grant(lease, 30, here)
    try:
        assert slots.acquire(backend, "h1", [], 1, here, 0.0, lease) == (0, leases.FREE, None)
        view = backend.read()
        assert list(view.slots) == [0] and view.stop is None
    finally:
        backend.revoke(lease)


def test_a_project_key_holding_no_record_is_refused_naming_it_and_the_command(etcd):
    prefix = "/ogc-foreign-b"
    put(etcd, f"{prefix}/slot/0003", "not json")
    backend = be.open_backend(f"etcd3+http://127.0.0.1:{etcd.client_port}{prefix}")
    with pytest.raises(be.BackendError) as exc:
        backend.read()
    assert str(exc.value).startswith(
        f"etcd3+http://127.0.0.1:{etcd.client_port}{prefix}: {prefix}/slot/0003, a key of open-gpu-cloud's "
        f"coordination, holds no record of it (a JSON object): delete it (etcdctl "
        f"--endpoints=http://127.0.0.1:{etcd.client_port} del {prefix}/slot/0003)")


def test_a_stop_record_from_the_future_on_etcd_is_named_as_such(etcd):
    prefix = "/ogc-foreign-c"
    backend = be.open_backend(f"etcd3+http://127.0.0.1:{etcd.client_port}{prefix}")
    ahead = time.time() + 7200
    put(etcd, f"{prefix}/stopped", json.dumps({"host": "gpu-9", "controller": "ctl-z", "reason": "planted",
                                                "since": leases.utc(ahead), "time": ahead}))
    here = holder("c")
    lease = be.lease_id_of(here["run"])
    assert backend.grant(lease, 30, here)
    try:
        with pytest.raises(leases.StopFromFuture) as exc:
            slots.acquire(backend, "h1", [], 1, here, time.time() - 5, lease)
        text = str(exc.value)
        assert f"is dated {leases.utc(ahead)} by the clock of ctl-z, 720" in text and "s ahead of this control host's " \
            "clock (" in text
        assert f"(etcdctl --endpoints=http://127.0.0.1:{etcd.client_port} del {prefix}/stopped)" in text
        assert backend.read().slots == {}
    finally:
        backend.revoke(lease)
