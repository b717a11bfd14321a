"""tests/conftest.py: a shared test cloud's tests run together, and the cloud stops right after their last one.

Each case runs a small suite in a pytest of its own, with the project's tests/conftest.py as its conftest and a
session fixture named like the shared cloud (testcloud) whose stop() is recorded: in pytest's order, after
pytest-random-order's shuffle of every test, and on two xdist workers. A plugin that moves one of the group's tests
apart after the regrouping is refused by name.
"""

from __future__ import annotations

import os

import pytest

from ogc_testlib import ROOT

pytest_plugins = ("pytester",)

CLOUD = '''

class FakeCloud:
    def __init__(self, log):
        self.log, self.stopped = log, False

    def stop(self):
        if not self.stopped:
            self.stopped = True
            record("stop")


def record(line):
    with open(os.environ["FAKE_CLOUD_LOG"], "a", encoding="utf-8") as handle:
        handle.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {line}\\n")


@pytest.fixture(scope="session")
def testcloud():
    cloud = FakeCloud(os.environ["FAKE_CLOUD_LOG"])
    yield cloud
    cloud.stop()


@pytest.fixture(autouse=True)
def _record(request):
    if "testcloud" in request.fixturenames:
        assert not request.getfixturevalue("testcloud").stopped, "a stopped cloud handed to a test"
    record(request.node.nodeid.split("@")[0])  # xdist's loadgroup adds "@<group>"
'''

TESTS = {
    "test_a.py": "def test_a1(testcloud):\n    pass\n\ndef test_a2(testcloud):\n    pass\n",
    "test_b.py": "def test_b1():\n    pass\n\ndef test_b2():\n    pass\n",
    "test_c.py": "def test_c1(testcloud):\n    pass\n",
    "test_d.py": "def test_d1():\n    pass\n",
}
GROUP = {"test_a.py::test_a1", "test_a.py::test_a2", "test_c.py::test_c1"}

MOVE_ONE_APART = '''
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items):
    result = yield
    items.sort(key=lambda item: item.nodeid == "test_a.py::test_a1")  # after every other plugin's order
    return result
'''


@pytest.fixture
def suite(pytester, monkeypatch):
    with open(os.path.join(ROOT, "tests", "conftest.py"), encoding="utf-8") as handle:
        pytester.makeconftest(handle.read() + CLOUD)
    pytester.makepyfile(**{name.removesuffix(".py"): text for name, text in TESTS.items()})
    pytester.makepyfile(move_one_apart=MOVE_ONE_APART)
    log = pytester.path / "cloud.log"
    monkeypatch.setenv("FAKE_CLOUD_LOG", str(log))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # this test's own worker's, when it runs on one
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([pytester.path.as_posix(), os.path.join(ROOT, "tests"),
                                                       os.path.join(ROOT, "collections")]))

    def run(*args):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        by_worker = {}
        for line in lines:
            worker, what = line.split(" ", 1)
            by_worker.setdefault(worker, []).append(what)
        return result, by_worker

    return run


def assert_stopped_right_after_the_group(sequence):
    group_places = [place for place, what in enumerate(sequence) if what in GROUP]
    assert group_places == list(range(group_places[0], group_places[0] + len(GROUP))), sequence
    assert sequence.count("stop") == 1 and sequence.index("stop") == group_places[-1] + 1, sequence


@pytest.mark.parametrize("order", [(), ("-p", "random_order", "--random-order-bucket=global", "--random-order-seed=7"),
                                   ("-p", "random_order", "--random-order-bucket=module", "--random-order-seed=1")],
                         ids=["pytest-order", "shuffled-global", "shuffled-modules"])
def test_the_group_runs_together_and_its_cloud_stops_after_its_last_test(suite, order):
    result, by_worker = suite(*order)
    result.assert_outcomes(passed=6)
    assert set(by_worker) == {"main"}
    assert_stopped_right_after_the_group(by_worker["main"])
    if order:  # the seed does split the group: without the regrouping, a test of it comes after the stop
        result, _ = suite(*order, "-p", "no:ogc-shared-cloud-groups-together")
        assert result.parseoutcomes().get("errors", 0) >= 1, result.stdout.str()


def test_on_xdist_workers_the_worker_with_the_group_stops_its_cloud_after_it(suite):
    result, by_worker = suite("-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=6)
    (worker,) = [w for w, sequence in by_worker.items() if GROUP & set(sequence)]
    assert_stopped_right_after_the_group(by_worker[worker])


def test_a_group_test_moved_after_the_stop_is_refused_by_name(suite):
    result, by_worker = suite("-p", "move_one_apart")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*the testcloud test cloud was stopped after its group's last test, and "
                                 "test_a.py::test_a1 came after it: a group's tests run together*"])
    assert "test_a.py::test_a1" not in by_worker["main"]
