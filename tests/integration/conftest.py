"""The real test clouds, each once per session.

``testcloud``: Keystone, Nova API, Glance API from scripts/testcloud.sh, for the cloud modules' tests (cloud/) and
the installed collection's (test_collection_install.py).

Start-up installs the services' venv on a fresh clone (scripts/openstack-venv.sh, ~2 min), then takes
MariaDB and the schemas loaded from the cache (migrated once per services' versions), then the servers.
It stops after the group's last test (tests/conftest.py), proven stopped (TestCloudHandle.stop); every server
stops by itself after 30 minutes even if the session dies.

``compute_cloud``: the test cloud WITH compute services (scripts/testcloud.sh start --with-compute), once per session.

RabbitMQ, Placement, nova-conductor, nova-scheduler and a fake nova-compute (two Tesla V100 on host
ogc-gpu-1) beside Keystone, Nova API and Glance, all on the cloud's MariaDB. Every server stops by itself after
90 minutes (CI's limit for the whole test command) even if the session dies: on a machine without the GPU image's
cache, the image's upload test in this group waits for the image's build (tests/helpers/gpu_image.py), about an hour
on 2 busy cores, with the cloud started at the beginning of the run.

It stops after the group's last test (tests/conftest.py), not at the end of the session. Stop means stopped: the
fixture reads the cloud's processes from /proc when it has started (each one, forked workers in sessions of their
own included, runs below a supervisor) and again after `testcloud.sh stop` (TestCloudHandle.stop: none is left).
A failure there is the last test's error in the report.
"""

from __future__ import annotations

import pytest

from ogc_testlib import TestCloudHandle, processes_of, supervisor_of


@pytest.fixture(scope="session")
def testcloud(tmp_path_factory):
    cloud = TestCloudHandle(tmp_path_factory.mktemp("testcloud"))
    cloud.script("start", "--lifetime", "1800")
    yield cloud
    cloud.stop()  # nothing to do when the group's last test stopped it


# What a compute cloud runs: the scan must see each (else an empty scan after the stop proves nothing).
COMPUTE_CLOUD_PROCESSES = ("mariadbd", "beam.smp", "gunicorn", "nova-scheduler: ServiceWrapper worker(0)",
                           "nova-conductor", "ogc_nova_compute.py", "supervise.py")


@pytest.fixture(scope="session")
def compute_cloud(tmp_path_factory):
    cloud = TestCloudHandle(tmp_path_factory.mktemp("computecloud"))
    out = cloud.script("start", "--lifetime", "5400", "--with-compute")
    print(out)
    try:
        running = processes_of(cloud.dir)
        commands = "\n".join(running.values())
        missing = [name for name in COMPUTE_CLOUD_PROCESSES if name not in commands]
        assert not missing, f"{missing} not found among the compute cloud's processes:\n{commands}"
        unsupervised = {pid: cmd for pid, cmd in running.items() if not supervisor_of(pid)}
        assert not unsupervised, f"these run below no supervise.py: {unsupervised}"
        yield cloud
    finally:
        cloud.stop()  # nothing to do when the group's last test stopped it
