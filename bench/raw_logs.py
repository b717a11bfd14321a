"""Where a benchmark writes its raw logs: outside the checkout, in the project's cache directory.

Only the summaries (the figures, the command, the commit) are kept in git, in each bench/*/README.md. The raw
output of a run goes to

    ${OGC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/open-gpu-cloud}/bench/<name>/<UTC time>-<commit>/

so that a figure quoted in a README can be traced back to its run on the machine that made it.

The benchmarks in Python import it; a shell script (bench/site/run.sh) and the tests run it:

    python bench/raw_logs.py NAME      # creates and prints a new run directory of benchmark NAME
    python bench/raw_logs.py --cache   # prints the cache directory
"""

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cache_dir():
    """The project's cache directory (OGC_CACHE_DIR, else XDG_CACHE_HOME/open-gpu-cloud, else ~/.cache/...)."""
    explicit = os.environ.get("OGC_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "open-gpu-cloud")


def commit(repo=ROOT):
    """The checkout's commit (short), with "+dirty" when it has changes; "unknown" outside git."""
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def run_dir(name, repo=ROOT):
    """A new directory for one run's raw logs of benchmark NAME, outside the checkout; created."""
    path = os.path.join(cache_dir(), "bench", name, time.strftime("%Y-%m-%d-%H%M", time.gmtime()) + "-" + commit(repo))
    inside = os.path.commonpath([os.path.realpath(ROOT), os.path.realpath(path)]) == os.path.realpath(ROOT)
    if inside:
        raise SystemExit(f"bench: raw logs would go to {path}, inside the checkout; set OGC_CACHE_DIR elsewhere")
    os.makedirs(path, exist_ok=True)
    return path


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        raise SystemExit("usage: raw_logs.py NAME | --cache")
    print(cache_dir() if argv[0] == "--cache" else run_dir(argv[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
