"""The test cloud WITH compute services (scripts/testcloud.sh start --with-compute), once per session.

RabbitMQ, Placement, nova-conductor, nova-scheduler and a fake nova-compute (two Tesla V100 on host
ogc-gpu-1) beside Keystone, Nova API and Glance, all on the cloud's MariaDB. Every server stops by itself after
30 minutes even if the session dies.
"""

from __future__ import annotations

import pytest

from ogc_testlib import TestCloudHandle


@pytest.fixture(scope="session")
def compute_cloud(tmp_path_factory):
    cloud = TestCloudHandle(tmp_path_factory.mktemp("computecloud"))
    out = cloud.script("start", "--lifetime", "1800", "--with-compute")
    print(out)
    yield cloud
    cloud.script("stop")
    print(f"\ncompute test cloud timings (s): {cloud.timings}")
