"""CloudModule.call: an idempotent call is repeated after an HTTP 502/503/504 (the service briefly unavailable), a
bounded number of times; anything else, a 500 included, fails at once through fail_sdk
(plugins/module_utils/cloud/openstack.py)."""

from __future__ import annotations

import pytest
from openstack import exceptions as sdk_exceptions

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import openstack as oc


class Failed(Exception):
    pass


@pytest.fixture
def cloud(monkeypatch):
    pauses = []
    monkeypatch.setattr(oc.time, "sleep", pauses.append)
    cm = oc.CloudModule.__new__(oc.CloudModule)

    def fail_sdk(exc, action, resource):
        raise Failed(f"{action} {resource} failed: {exc}")

    cm.fail_sdk = fail_sdk
    cm.pauses = pauses
    return cm


def answers(*outcomes):
    calls = []

    def func(*args, **kwargs):
        calls.append((args, kwargs))
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return func, calls


def http(status):
    return sdk_exceptions.HttpException(message=f"status {status}", http_status=status)


def test_an_idempotent_call_is_repeated_after_the_service_was_unavailable(cloud):
    func, calls = answers(http(502), http(503), "deleted")
    assert cloud.call("deleting server", "s1", func, "id-1", ignore_missing=True, idempotent=True) == "deleted"
    assert calls == [(("id-1",), {"ignore_missing": True})] * 3
    assert cloud.pauses == [oc.SERVER_ERROR_PAUSE, 2 * oc.SERVER_ERROR_PAUSE]


def test_the_repeats_are_bounded_then_the_error_is_reported(cloud):
    func, calls = answers(*[http(504)] * (oc.SERVER_ERROR_RETRIES + 1))
    with pytest.raises(Failed, match="deleting server s1 failed"):
        cloud.call("deleting server", "s1", func, idempotent=True)
    assert len(calls) == oc.SERVER_ERROR_RETRIES + 1


@pytest.mark.parametrize("idempotent, error", [(False, http(503)), (True, http(500)), (True, http(501)),
                                               (True, http(409)), (True, http(404))])
def test_other_calls_and_other_errors_fail_at_once(cloud, idempotent, error):
    func, calls = answers(error, "never")
    with pytest.raises(Failed):
        cloud.call("shelving server", "s1", func, idempotent=idempotent)
    assert len(calls) == 1 and cloud.pauses == []
