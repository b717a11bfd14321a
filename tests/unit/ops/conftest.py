"""The ops modules under test (library/os_server_lifetimes.py); the mocked connection and the module
runner come from tests/unit/conftest.py."""

from __future__ import annotations

import pytest

from ogc_testlib import load_library_module


@pytest.fixture(scope="session")
def lifetimes():
    return load_library_module("os_server_lifetimes")
