"""scripts/testcloud.sh start --with-compute refuses a bad --nova-pci-from, --fake-gpus or --placement-from before it stops,
writes or starts anything, with a message naming the file and the fix (no traceback)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ogc_testlib import TESTCLOUD

pytestmark = pytest.mark.integration

RENDERED_OK_PCI = """[DEFAULT]
debug = False

[pci]
alias = {"name": "tesla-v100", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI"}
device_spec = {"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4"}
"""


def start(tmp_path, *args):
    state = tmp_path / "cloud"
    proc = subprocess.run([TESTCLOUD, "start", "--dir", str(state), *args], capture_output=True, text=True,
                          check=False, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr, state


@pytest.mark.parametrize("option, name, content, message", [
    ("--nova-pci-from", "nova.conf", None,
     "cannot be read (No such file or directory): render it first (playbooks/nova.yml"),
    ("--nova-pci-from", "nova.conf", "[DEFAULT]\nhost = ctl01\n[filter_scheduler]\nenabled_filters = ComputeFilter\n",
     "has no [pci] device_spec and alias: it is not the nova-compute configuration of a GPU host"),
    ("--nova-pci-from", "nova.conf", RENDERED_OK_PCI,
     "has no [filter_scheduler] enabled_filters (nova_pci_config writes them"),
    ("--nova-pci-from", "nova.conf", "[pci\nalias = x\n", "not a nova.conf kolla-ansible rendered"),
    ("--placement-from", "placement.conf", None, "cannot be read (No such file or directory)"),
    ("--placement-from", "placement.conf", "[DEFAULT]\ndebug = true\n[api]\nauth_strategy = keystone\n",
     "has no [placement] or [workarounds] option"),
    ("--placement-from", "placement.conf", "[placement\nmax_allocation_candidates = 1000\n", "not an INI file"),
])
def test_bad_rendered_configuration(tmp_path, option, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    rc, out, state = start(tmp_path, "--with-compute", option, str(path))
    assert rc == 1, out
    assert f"testcloud: start failed: {option} {path}" in out and message in out, out
    assert "Traceback" not in out
    assert not state.exists()  # nothing written


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot be read as JSON"),
    ("[]", "must hold a non-empty JSON list of devices"),
    ('{"address": "0000:27:00.0"}', "must hold a non-empty JSON list of devices"),
    ('[{"address": "0000:27:00.0", "vendor_id": "10de"}]', "each device needs string address, vendor_id and product_id"),
    ('[{"address": "0000:27:00.0", "vendor_id": 4318, "product_id": "1db4"}]', "each device needs string address"),
])
def test_bad_fake_gpus(tmp_path, content, message):
    path = tmp_path / "gpus.json"
    path.write_text(content)
    rc, out, state = start(tmp_path, "--with-compute", "--fake-gpus", str(path))
    assert rc == 1, out
    assert f"--fake-gpus {path}" in out and message in out, out
    assert "Traceback" not in out and not state.exists()


def test_compute_options_need_with_compute(tmp_path):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([{"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4"}]))
    rc, out, state = start(tmp_path, "--fake-gpus", str(path))
    assert rc == 2 and "--nova-pci-from, --fake-gpus, --compute-host and --placement-from need --with-compute" in out, out
    assert not os.path.exists(state)

