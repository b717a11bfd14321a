"""plugins/modules/prom_textfile.py: atomic writes for node_exporter's textfile collector, changed only on real change,
check mode writes nothing, diff shows the file, bad input is a message naming the path."""

from __future__ import annotations

import os

import pytest

from ogc_testlib import collection_module

prom = collection_module("prom_textfile")

TEXT = "# TYPE ogc_gpu_present gauge\nogc_gpu_present{{alias=\"t4\"}} 2\nogc_gpu_health_last_run_timestamp_seconds {t}\n"
VOLATILE = ["ogc_gpu_health_last_run_timestamp_seconds"]


def args(path, t=1, present=2):
    return {"path": str(path), "content": TEXT.replace("2\n", f"{present}\n", 1).format(t=t),
            "volatile_metrics": VOLATILE}


def test_create_rewrite_and_change(run_module, tmp_path):
    path = tmp_path / "ogc_gpu.prom"
    result = run_module(prom, args(path))
    assert result["changed"] is True and result["written"] is True
    assert path.read_text() == TEXT.format(t=1) and oct(path.stat().st_mode & 0o777) == "0o644"
    # Only the timestamp moved: rewritten (fresh), not a change.
    result = run_module(prom, args(path, t=2))
    assert result["changed"] is False and result["written"] is True and "} 2\nogc_gpu_health_last_run_timestamp_seconds 2" in path.read_text()
    # Same content: nothing written at all.
    inode = path.stat().st_ino
    result = run_module(prom, args(path, t=2))
    assert result["changed"] is False and result["written"] is False and path.stat().st_ino == inode
    # A GPU fewer: a change, and the file is replaced by rename (a new inode), no temporary file left.
    result = run_module(prom, args(path, t=3, present=1))
    assert result["changed"] is True and "ogc_gpu_present{alias=\"t4\"} 1" in path.read_text()
    assert path.stat().st_ino != inode
    assert os.listdir(tmp_path) == ["ogc_gpu.prom"]


def test_check_mode_writes_nothing_and_diff_shows_the_file(run_module, tmp_path):
    path = tmp_path / "ogc_gpu.prom"
    result = run_module(prom, args(path), check_mode=True, diff=True)
    assert result["changed"] is True and result["written"] is False and not path.exists()
    assert result["diff"]["before"] == "" and result["diff"]["after"] == TEXT.format(t=1)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name, content, mode, needle", [
    ("ogc_gpu.txt", "x 1\n", "0644", "reads only files named *.prom; give the file that ending"),
    ("ogc_gpu.prom", "x 1", "0644", "the content must end with a newline"),
    ("ogc_gpu.prom", "x 1\n", "rw-r--r--", "mode 'rw-r--r--' is not an octal mode like '0644'"),
    ("missing/ogc_gpu.prom", "x 1\n", "0644", "does not exist: create it (the textfile collector directory"),
])
def test_bad_input_is_a_message(run_module, tmp_path, name, content, mode, needle):
    result = run_module(prom, {"path": str(tmp_path / name), "content": content, "mode": mode})
    assert result["failed"] is True and result["msg"].startswith("prom_textfile: ") and needle in result["msg"]
    assert not (tmp_path / name).exists()


def test_unreadable_path_is_a_message(run_module, tmp_path):
    (tmp_path / "ogc_gpu.prom").mkdir()  # a directory where the file should be
    result = run_module(prom, {"path": str(tmp_path / "ogc_gpu.prom"), "content": "x 1\n"})
    assert result["failed"] is True and result["msg"].startswith(f"prom_textfile: cannot read {tmp_path}/ogc_gpu.prom")


def test_check_mode_with_the_directory_still_to_create(run_module, tmp_path):
    result = run_module(prom, {"path": str(tmp_path / "new" / "ogc_gpu.prom"), "content": "x 1\n"}, check_mode=True)
    assert result["changed"] is True and result["written"] is False and not (tmp_path / "new").exists()
