"""Benchmarks keep summaries in git and write their raw logs outside the checkout."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import raw_logs  # noqa: E402  pylint: disable=wrong-import-position

# What a benchmark directory holds in git: its scripts and the README with the figures.
SUMMARY_AND_CODE = (".md", ".py", ".sh", ".yml")


def test_git_holds_no_raw_benchmark_output():
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "bench"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "bench/README.md" in tracked
    raw = [path for path in tracked if not path.endswith(SUMMARY_AND_CODE) or "/results/" in path]
    assert not raw, f"raw benchmark output committed (write it under {raw_logs.cache_dir()}/bench instead): {raw}"


def test_run_dir_is_under_the_cache_dir_named_by_the_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("OGC_CACHE_DIR", str(tmp_path / "cache"))
    path = raw_logs.run_dir("fleet")
    assert os.path.isdir(path)
    assert os.path.dirname(path) == str(tmp_path / "cache" / "bench" / "fleet")
    assert os.path.basename(path).endswith("-" + raw_logs.commit())


@pytest.mark.parametrize("env, expected", [
    ({"XDG_CACHE_HOME": "/x"}, "/x/open-gpu-cloud"),
    ({"HOME": "/home/op"}, "/home/op/.cache/open-gpu-cloud"),
    ({"OGC_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}, "/c"),
])
def test_cache_dir_follows_the_environment(monkeypatch, env, expected):
    for name in ("OGC_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert raw_logs.cache_dir() == expected


def test_run_dir_inside_the_checkout_is_refused(monkeypatch):
    monkeypatch.setenv("OGC_CACHE_DIR", os.path.join(ROOT, "bench", "cache"))
    with pytest.raises(SystemExit, match="inside the checkout"):
        raw_logs.run_dir("fleet")
    assert not os.path.exists(os.path.join(ROOT, "bench", "cache"))
