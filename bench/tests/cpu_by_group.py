#!/usr/bin/env python3
"""Sum the per-test CPU that tests/conftest.py logs (OGC_TEST_CPU_LOG) by test group (a file, or the tests
sharing a test cloud), costliest first.

Usage: bench/tests/cpu_by_group.py LOG [--top 25]
"""

import argparse
import collections
import json
import sys


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv[1:])
    cpu, wall, count = collections.Counter(), collections.Counter(), collections.Counter()
    with open(args.log, encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            cpu[entry["group"]] += entry["cpu_s"]
            wall[entry["group"]] += entry["wall_s"]
            count[entry["group"]] += 1
    total = sum(cpu.values())
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  group")
    for group, seconds in cpu.most_common(args.top):
        print(f"{seconds:8.1f} {wall[group]:8.1f} {count[group]:5d}  {group}")
    print(f"{total:8.1f} {sum(wall.values()):8.1f} {sum(count.values()):5d}  all ({len(cpu)} groups)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
