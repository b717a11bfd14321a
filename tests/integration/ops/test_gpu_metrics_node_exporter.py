"""GPU health metrics through the real node_exporter: playbooks/health.yml writes the textfile on a simulated
seed host, Debian's prometheus-node-exporter serves it on 127.0.0.1, prometheus_client parses the scrape; a GPU
removed from the simulated bus shows up in the scraped numbers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_health_playbook import fall_off_the_bus, run, seed_host  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.integration
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
V100 = frozenset({"alias": "tesla-v100", "model": "Tesla V100 PCIe 16GB", "pci_id": "10de:1db4"}.items())


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def node_exporter(tmp_path):
    """node_exporter with only the textfile collector, on 127.0.0.1; always stopped. Returns a scrape function."""
    if not os.access(NODE_EXPORTER, os.X_OK):
        pytest.fail(f"{NODE_EXPORTER} is missing: install Debian's prometheus-node-exporter package "
                    "(apt-get install -y prometheus-node-exporter); the test set-up does")
    directory = tmp_path / "textfile"
    directory.mkdir(exist_ok=True)
    port = free_port()
    log = open(tmp_path / "node_exporter.log", "wb")  # pylint: disable=consider-using-with
    proc = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.textfile", f"--collector.textfile.directory={directory}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape():
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"node_exporter did not serve {url}: {(tmp_path / 'node_exporter.log').read_text()}")
                time.sleep(0.2)
        yield scrape
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_scraped_numbers_follow_the_bus(seed_host, node_exporter, tmp_path):  # pylint: disable=redefined-outer-name
    root, inventory = seed_host
    started = time.time()
    rc, out = run(inventory)
    assert rc == 0, out
    got = node_exporter()
    assert got[("node_textfile_scrape_error", frozenset())] == 0
    assert got[("ogc_gpu_expected", V100)] == 4 and got[("ogc_gpu_present", V100)] == 4
    assert got[("ogc_gpu_vfio", V100)] == 4
    assert got[("ogc_gpu_health_ok", frozenset())] == 1 and got[("ogc_gpu_health_alerts", frozenset())] == 0
    assert started - 1 <= got[("ogc_gpu_health_last_run_timestamp_seconds", frozenset())] <= time.time() + 1
    assert not any(name.startswith("ogc_gpu_nova") for name, _ in got)  # health_check_nova: false
    assert sorted(os.listdir(tmp_path / "textfile")) == ["ogc_gpu.prom"]  # no temporary file left behind

    fall_off_the_bus(root, "0000:c3:00.0")
    rc, out = run(inventory)
    assert rc != 0 and "GPU health alerts:" in " ".join(out.split())  # the summary fails on the alert...
    got = node_exporter()  # ...and the metrics were written all the same
    assert got[("ogc_gpu_expected", V100)] == 4 and got[("ogc_gpu_present", V100)] == 3
    assert got[("ogc_gpu_vfio", V100)] == 3
    assert got[("ogc_gpu_health_ok", frozenset())] == 0 and got[("ogc_gpu_health_alerts", frozenset())] >= 2

    # Check mode writes nothing; the file stays as the last real run left it.
    before = (tmp_path / "textfile" / "ogc_gpu.prom").read_text()
    rc, out = run(inventory, "--check", "-e", "health_fail_on_alert=false")
    assert rc == 0, out
    assert (tmp_path / "textfile" / "ogc_gpu.prom").read_text() == before
    shutil.rmtree(tmp_path / "textfile")
    rc, out = run(inventory, "--check", "-e", "health_fail_on_alert=false")
    assert rc == 0, out
    assert not (tmp_path / "textfile").exists()
