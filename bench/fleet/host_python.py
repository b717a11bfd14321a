#!/usr/bin/env python3
"""The simulated hosts' Python for the fleet benchmark: runs the real interpreter and notes its CPU.

bench.py sets it as ansible_python_interpreter. On a real fleet each module process runs on its GPU host;
here the simulated hosts run theirs on the control host, so the benchmark adds up, per run, the CPU of these
processes (the "hosts'" share) to tell it from the controller's. Each process appends one line,
"<user+sys seconds of the interpreter and its children> <its own user+sys>", to $OGC_BENCH_HOST_CPU_LOG;
its own share (this wrapper's start-up, about 0.03 s) is counted with the hosts', where it would not be.
"""

import os
import resource
import subprocess
import sys


def main():
    real = os.environ["OGC_BENCH_HOST_PYTHON"]
    rc = subprocess.call([real, *sys.argv[1:]])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    line = f"{children.ru_utime + children.ru_stime:.4f} {own.ru_utime + own.ru_stime:.4f}\n"
    with open(os.environ["OGC_BENCH_HOST_CPU_LOG"], "a", encoding="utf-8") as handle:
        handle.write(line)  # one short append: whole lines even with many hosts at once
    return rc


if __name__ == "__main__":
    sys.exit(main())
