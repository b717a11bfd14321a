"""The cloud modules under test (the collection's os_* modules); the mocked connection and the module runner come
from tests/unit/conftest.py."""

from __future__ import annotations

import pytest

from ogc_testlib import collection_module


@pytest.fixture(scope="session")
def os_flavors():
    return collection_module("os_flavors")


@pytest.fixture(scope="session")
def os_quotas():
    return collection_module("os_quotas")


@pytest.fixture(scope="session")
def os_access():
    return collection_module("os_access")


@pytest.fixture(scope="session")
def os_images():
    return collection_module("os_images")


@pytest.fixture(scope="session")
def cloud_utils():
    import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack as utils  # pylint: disable=import-outside-toplevel

    return utils


@pytest.fixture(scope="session")
def os_cloud():
    return collection_module("os_cloud")
