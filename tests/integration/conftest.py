"""The real test cloud (Keystone, Nova API, Glance API from scripts/testcloud.sh), once per session, for the cloud
modules' tests (cloud/) and the installed collection's (test_collection_install.py).

Start-up installs the services' venv on a fresh clone (scripts/openstack-venv.sh, ~2 min), then takes
MariaDB and the schemas loaded from the cache (migrated once per services' versions), then the servers.
It stops after the group's last test (tests/conftest.py), proven stopped (TestCloudHandle.stop); every server
stops by itself after 30 minutes even if the session dies.
"""

from __future__ import annotations

import pytest

from ogc_testlib import TestCloudHandle


@pytest.fixture(scope="session")
def testcloud(tmp_path_factory):
    cloud = TestCloudHandle(tmp_path_factory.mktemp("testcloud"))
    cloud.script("start", "--lifetime", "1800")
    yield cloud
    cloud.stop()  # nothing to do when the group's last test stopped it
