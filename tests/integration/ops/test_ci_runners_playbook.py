"""playbooks/ci_runners.yml with the demo inventory: .cirun.yml per repository, idempotence, check mode, bad input."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from ogc_testlib import ROOT, output, run_playbook

pytestmark = pytest.mark.integration


def run(*args):
    proc = run_playbook(os.path.join(ROOT, "playbooks", "ci_runners.yml"), *args, timeout=300)
    return proc.returncode, output(proc)


def test_files_written_then_unchanged(tmp_path):
    out_dir = tmp_path / "cirun"
    rc, out = run("-e", f"ci_runner_output_dir={out_dir}")
    assert rc == 0, out
    assert "changed=2" in out, out
    text = (out_dir / "conda-forge" / "pytorch-cpu-feedstock" / ".cirun.yml").read_text()
    assert text.startswith("#\n# Ansible managed\n#\n")
    data = yaml.safe_load(text)
    assert data["runners"][0] == {"name": "gpu-large", "cloud": "openstack", "instance_type": "gpu_large",
                                  "machine_image": "ubuntu-2204-nvidia", "region": "RegionOne",
                                  "labels": ["cirun-openstack-gpu-large"]}
    assert [r["name"] for r in data["runners"]] == ["gpu-large", "gpu-xlarge", "cpu-large"]
    every = yaml.safe_load((out_dir / "conda-forge" / ".cirun" / ".cirun.yml").read_text())
    assert len(every["runners"]) == 6
    assert all(label.startswith("cirun-") for r in every["runners"] for label in r["labels"])
    rc, out = run("-e", f"ci_runner_output_dir={out_dir}")
    assert rc == 0 and "changed=0" in out, out


def test_check_mode_writes_nothing(tmp_path):
    out_dir = tmp_path / "cirun"
    rc, out = run("-e", f"ci_runner_output_dir={out_dir}", "--check", "--diff")
    assert rc == 0, out
    assert not out_dir.exists()
    assert "instance_type: gpu_large" in out  # the diff shows what would be written


def test_bad_runners_fail_before_writing(tmp_path):
    """Every problem is reported in one failure that names the runner and the fix; nothing is written."""
    out_dir = tmp_path / "cirun"
    extra = tmp_path / "vars.json"
    runners = [
        {"name": "gpu-huge", "flavor": "gpu_huge", "image": "ubuntu-2204-nvidia", "labels": ["cirun-x"]},
        {"name": "noble", "flavor": "ci_medium", "image": "ubuntu-2404", "labels": ["cirun-y"]},
        {"name": "plain", "flavor": "ci_medium", "image": "ubuntu-2204", "labels": ["openstack-cpu"]},
    ]
    extra.write_text(json.dumps({"ci_runners": runners, "ci_runner_repos": [{"repo": "a/b"}],
                                 "ci_runner_output_dir": str(out_dir)}))
    rc, out = run("-e", f"@{extra}")
    assert rc != 0
    out = " ".join(out.split())
    for expected in ("runner 'gpu-huge': flavor 'gpu_huge' is not declared; declare it in cloud_flavors",
                     "runner 'noble': image 'ubuntu-2404' is not declared; declare it in cloud_images",
                     "runner 'plain': label 'openstack-cpu' does not start with 'cirun-'"):
        assert expected in out, out
    assert "Traceback" not in out
    assert not out_dir.exists()


def test_missing_output_dir_names_the_variable(tmp_path):
    rc, out = run("-e", "ci_runner_output_dir=")
    assert rc != 0
    assert "Set ci_runners_output_dir (inventory: ci_runner_output_dir)" in out, out
