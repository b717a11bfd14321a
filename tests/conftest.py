"""Shared fixtures: the project's modules and filters, and fixture hosts built once per session."""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

from ogc_testlib import FIXTURES, PCI_IDS, collection_module, load_source, collection_plugin


@pytest.fixture(scope="session")
def mock_sysfs():
    return load_source("mock_sysfs", "scripts/mock_sysfs.py")


@pytest.fixture(scope="session")
def facts_module():
    return collection_module("pci_passthrough_facts")


@pytest.fixture(scope="session")
def pci_ids_db():
    """The PCI ID database as Debian ships it (package pci.ids), parsed by plugins/module_utils/pci/ids.py."""
    if not os.path.isfile(PCI_IDS):
        pytest.fail(f"{PCI_IDS} is missing: install Debian's pci.ids package (apt-get install -y pci.ids); "
                    "the test set-up does")
    import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.ids as pci_ids  # pylint: disable=import-outside-toplevel

    return pci_ids.load(PCI_IDS)


@pytest.fixture(scope="session")
def planner():
    return collection_plugin("filter", "passthrough_plan")


@pytest.fixture(scope="session")
def fixture_host(tmp_path_factory, mock_sysfs):
    """Build a fixture host once per session; returns its root directory."""
    built = {}

    def build(name: str, **overrides) -> str:
        key = (name, repr(sorted(overrides.items())))
        if key not in built:
            root = str(tmp_path_factory.mktemp(name))
            fixture = mock_sysfs.load_fixture(os.path.join(FIXTURES, f"{name}.yml"))
            mock_sysfs.build_tree(fixture, root, **dict(overrides))
            built[key] = root
        return built[key]

    return build


@pytest.fixture(scope="session")
def host_facts(fixture_host, facts_module, pci_ids_db):
    """Facts of a fixture host as the module discovers them from its built tree, named from the real pci.ids."""

    def facts(name: str, **overrides) -> dict:
        root = fixture_host(name, **overrides)
        return facts_module.discover(os.path.join(root, "sys"), os.path.join(root, "proc"), pci_ids_db)

    return facts


def pytest_configure(config):
    """One id for the whole test run, the controller's and its xdist workers': the GPU guest image is built, or
    checked by a run of its role, once per run (tests/helpers/gpu_image.py; scripts/test.sh sets its own). And the
    shared test clouds' groups kept together after any plugin's reordering (below)."""
    os.environ.setdefault("OGC_TEST_RUN_ID", f"pytest-{os.getpid()}-{int(time.time())}")
    config.pluginmanager.register(SharedCloudGroupsTogether(), "ogc-shared-cloud-groups-together")


# ---- Running the suite on several workers (scripts/test.sh: pytest-xdist, --dist loadgroup) ----
# Each test goes to the worker of its group: the tests sharing a started test cloud stay together (the cloud is
# started once, on that worker), and every other test stays with its file (its module fixtures are built once).
# The slowest groups are handed out first, so no worker is left with a long one at the end (their costs are in
# bench/README.md, "Test command, stage by stage"); the rest keep pytest's own order.
SHARED_FIXTURE_GROUPS = ("compute_cloud", "testcloud")
SLOWEST_FIRST = (
    "tests/integration/site/test_site_end_to_end.py",
    "compute_cloud",
    "tests/integration/ops/test_gpu_image.py",
    "tests/integration/realkernel/test_realkernel_scenario.py",
    "tests/integration/rollout/test_fleet_waves.py",
    "tests/integration/host/test_passthrough_host_faults.py",
    "tests/integration/nova/test_nova_kolla_genconfig.py",
    "tests/integration/site/test_example_inventories.py",
    "testcloud",
)


def test_group(item) -> str:
    """The group a test runs in: the shared test cloud it uses, else its file."""
    for fixture in SHARED_FIXTURE_GROUPS:
        if fixture in item.fixturenames:
            return fixture
    return item.nodeid.split("::", 1)[0]


test_group.__test__ = False  # a helper, not a test


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    groups = {}
    for item in items:
        group = test_group(item)
        groups[item.nodeid] = group
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {group: place for place, group in enumerate(SLOWEST_FIRST)}
    # sorted() is stable: within a group, and among the groups not ranked, pytest's order stays.
    items[:] = sorted(items, key=lambda item: rank.get(groups[item.nodeid], len(rank)))


# ---- A shared test cloud stops after its group's last test, not at the end of the session ----
# Its group's tests run one after another (the sort above; after a plugin's shuffle, pytest-random-order's, the pass
# below; xdist's loadgroup sends a group to one worker whole), so when the next test is of another group, or there
# is none, nothing will use the cloud again: its daemons would only idle (about 2 % of a core and 1.5 GiB for the
# compute cloud, bench/README.md) beside the rest of the run.
_ENDED_GROUPS: set[str] = set()


class SharedCloudGroupsTogether:  # pylint: disable=too-few-public-methods
    """Each shared test cloud's tests moved up to its group's first test; every other test keeps its place."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        first = {}
        for place, item in enumerate(items):
            first.setdefault(test_group(item), place)
        keys = {}
        for place, item in enumerate(items):
            group = test_group(item)
            keys[item.nodeid] = (first[group] if group in SHARED_FIXTURE_GROUPS else place, place)
        items[:] = sorted(items, key=lambda item: keys[item.nodeid])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    group = test_group(item)
    cloud = (item.funcargs or {}).get(group) if group in SHARED_FIXTURE_GROUPS else None
    result = yield
    if cloud is not None and (nextitem is None or test_group(nextitem) != group):
        _ENDED_GROUPS.add(group)
        cloud.stop()  # a failure here is this test's teardown error
    return result


def pytest_runtest_setup(item):
    group = test_group(item)
    if group in _ENDED_GROUPS:
        pytest.fail(f"the {group} test cloud was stopped after its group's last test, and {item.nodeid} came after it: "
                    "a group's tests run together (tests/conftest.py, pytest_collection_modifyitems)")


# ---- CPU per test (bench/tests/README.md): with OGC_TEST_CPU_LOG=FILE, one JSON line per test ----
# The CPU of the worker and of the processes it waited for (ansible-playbook, qemu, the tools), fixtures' set-up
# and teardown included in the test that ran them. Daemons a test starts and leaves running (the test cloud's
# servers) are not in it.
def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    log = os.environ.get("OGC_TEST_CPU_LOG")
    cpu0, wall0 = _cpu_seconds(), time.monotonic()
    yield
    if log:
        line = json.dumps({"test": item.nodeid, "group": test_group(item), "cpu_s": round(_cpu_seconds() - cpu0, 2),
                           "wall_s": round(time.monotonic() - wall0, 2)})
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
