#!/usr/bin/env python3
"""What the test cloud's MariaDB costs: the system tables, the server's start, each cached schema's load.

Run with the OpenStack services venv's Python, after one test cloud has filled the schema cache:

    .cache/openstack-venv/bin/python bench/testcloud/db_timings.py [--repeat 3]

Each repeat makes a fresh data directory in a temporary folder, runs mariadb-install-db, starts the server the way
the test cloud does (scripts/testcloud/mariadb.py, under supervise.py), creates the databases and users, loads every
cached dump (one after the other, then all at once as the cloud's start does), stops the server, and copies its data
directory (what caching a data directory instead of dumps would cost at each start). Prints wall
seconds per step and the CPU of this process's children (the client and install tools; the server's own CPU is not
counted) with the load average.
"""

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTCLOUD = os.path.join(HERE, "..", "..", "scripts", "testcloud")
sys.path.insert(0, TESTCLOUD)

import mariadb  # noqa: E402  pylint: disable=wrong-import-position
import testcloud  # noqa: E402  pylint: disable=wrong-import-position


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_file(path, text, mode=0o644):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def one_run(base):
    cache = testcloud.schema_cache_dir()
    dumps = {name: os.path.join(cache, name + ".sql") for name in mariadb.DATABASES
             if os.path.isfile(os.path.join(cache, name + ".sql"))}
    if not dumps:
        sys.exit(f"no schema dumps in {cache}: start a test cloud first (scripts/testcloud.sh start)")
    data, etc, logs = (os.path.join(base, d) for d in ("data", "etc", "log"))
    for folder in (data, etc, logs):
        os.makedirs(folder)
    db = mariadb.MariaDB(base, data, etc, logs)
    db.write_config(testcloud.free_port(set()), write_file)
    steps = {}

    def timed(name, func):
        wall, cpu = time.monotonic(), children_cpu()
        func()
        steps[name] = (time.monotonic() - wall, children_cpu() - cpu)

    timed("mariadb-install-db", db.install)
    proc = None

    def start():
        nonlocal proc
        proc = subprocess.Popen([sys.executable, testcloud.SUPERVISE, "600", "10", "--", *db.argv()],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        db.wait_ready(proc, time.time() + 60, RuntimeError)

    timed("server start (until root logs in)", start)
    try:
        timed("databases and users", lambda: db.create_databases({u: "bench" for u in mariadb.USERS}))
        for name, path in dumps.items():
            timed(f"load {name} (one after the other)", lambda n=name, p=path: db.load(n, p))

        def all_at_once():
            for name in dumps:
                db.empty(name)
            threads = [threading.Thread(target=db.load, args=(n, p)) for n, p in dumps.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        timed(f"load all {len(dumps)} at once", all_at_once)
    finally:
        wall = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        steps["stop"] = (time.monotonic() - wall, 0.0)
    # The alternative to dumps: a copy of the stopped data directory holding every loaded schema.
    timed("copy of that data directory (alternative)",
          lambda: shutil.copytree(db.datadir, db.datadir + ".copy", ignore=shutil.ignore_patterns("*.sock")))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(db.datadir) for f in fs)
    steps[f"  (its size: {size / 2**20:.0f} MiB)"] = (0.0, 0.0)
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    runs = []
    for _ in range(args.repeat):
        base = tempfile.mkdtemp(prefix="ogc-db-bench-")
        try:
            runs.append(one_run(base))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"{'step':42} " + "  ".join(f"run {i + 1} wall (cpu)" for i in range(len(runs))))
    for step in runs[0]:
        print(f"{step:42} " + "  ".join(f"{r[step][0]:8.2f} s ({r[step][1]:4.2f})" for r in runs))


if __name__ == "__main__":
    main()
