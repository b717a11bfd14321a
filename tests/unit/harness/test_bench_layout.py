"""Benchmarks keep summaries in git and write their raw logs outside the checkout (bench/raw_logs.py, run here as
bench/site/run.sh runs it: tests import nothing from bench/)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RAW_LOGS = os.path.join(ROOT, "bench", "raw_logs.py")
# What a benchmark directory holds in git: its scripts and the README with the figures.
SUMMARY_AND_CODE = (".md", ".py", ".sh", ".yml")


def raw_logs(*args, env=None):
    """bench/raw_logs.py ARGS: (returncode, stdout's line, stderr)."""
    proc = subprocess.run([sys.executable, RAW_LOGS, *args], capture_output=True, text=True, check=False, timeout=60,
                          env=env)
    return proc.returncode, proc.stdout.strip(), proc.stderr


def commit():
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, check=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def test_git_holds_no_raw_benchmark_output():
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "bench"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "bench/README.md" in tracked
    raw = [path for path in tracked if not path.endswith(SUMMARY_AND_CODE) or "/results/" in path]
    assert not raw, f"raw benchmark output committed (write it under {raw_logs('--cache')[1]}/bench instead): {raw}"


def test_run_dir_is_under_the_cache_dir_named_by_the_commit(tmp_path):
    rc, path, err = raw_logs("fleet", env=dict(os.environ, OGC_CACHE_DIR=str(tmp_path / "cache")))
    assert rc == 0, err
    assert os.path.isdir(path)
    assert os.path.dirname(path) == str(tmp_path / "cache" / "bench" / "fleet")
    assert os.path.basename(path).endswith("-" + commit())


@pytest.mark.parametrize("env, expected", [
    ({"XDG_CACHE_HOME": "/x"}, "/x/open-gpu-cloud"),
    ({"HOME": "/home/op"}, "/home/op/.cache/open-gpu-cloud"),
    ({"OGC_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}, "/c"),
])
def test_cache_dir_follows_the_environment(env, expected):
    base = {k: v for k, v in os.environ.items() if k not in ("OGC_CACHE_DIR", "XDG_CACHE_HOME")}
    assert raw_logs("--cache", env=dict(base, **env))[1] == expected


def test_run_dir_inside_the_checkout_is_refused():
    rc, _path, err = raw_logs("fleet", env=dict(os.environ, OGC_CACHE_DIR=os.path.join(ROOT, "bench", "cache")))
    assert rc != 0 and "inside the checkout" in err and "set OGC_CACHE_DIR elsewhere" in err, err
    assert not os.path.exists(os.path.join(ROOT, "bench", "cache"))


def test_no_test_imports_from_bench():
    """The tests and the benchmarks share their harness in tests/helpers/ (bench/ imports from there), never the
    other way round: a test reads nothing of bench/ as code."""
    loads = ("sys.path", "load_source(", "spec_from_file_location", "import bench", "from bench")
    found = {}
    for top in ("tests", "molecule"):
        for folder, _dirs, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path == os.path.abspath(__file__):
                    continue
                with open(path, encoding="utf-8") as handle:
                    lines = [line.strip() for line in handle if "bench" in line and any(w in line for w in loads)]
                if lines:
                    found[os.path.relpath(path, ROOT)] = lines
    assert not found, f"tests loading code from bench/: {found}"
