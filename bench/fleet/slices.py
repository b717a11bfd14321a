#!/usr/bin/env python3
"""A simulated fleet run as AWX job slicing runs it, beside the same fleet run unsliced, and the results compared
(tests/helpers/fleet/fleet_slices.py does it and says how; tests/integration/rollout/test_fleet_slices.py runs it on a
small fleet).

Usage: PYTHONPATH=collections bench/fleet/slices.py [--hosts 24] [--slices 3] [--batch 25%] [--hold 0] [--workdir /tmp/ogc-slices]
                             [--out DIR]

Raw logs and results.json in OUT, by default a new directory outside the checkout (bench/raw_logs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "helpers", "fleet"))
sys.path.insert(1, os.path.dirname(HERE))
import raw_logs  # noqa: E402  pylint: disable=wrong-import-position
from fleet_slices import run  # noqa: E402  pylint: disable=wrong-import-position

def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, default=24)
    parser.add_argument("--slices", type=int, default=3)
    parser.add_argument("--batch", default="25%")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds each simulated reboot takes")
    parser.add_argument("--workdir", default="/tmp/ogc-slices")
    parser.add_argument("--out", help="raw logs and results.json (default: a new directory outside the checkout)")
    args = parser.parse_args(argv[1:])
    out = args.out or raw_logs.run_dir("fleet-slices", REPO)
    os.makedirs(out, exist_ok=True)
    print(f"slices: raw logs in {out}", flush=True)
    batch = args.batch if args.batch.endswith("%") else int(args.batch)
    result = run(args.hosts, args.slices, batch, args.hold, args.workdir, out)
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    failed = [r for r in result["runs"] if any(result_rc != 0 for result_rc in r["rc"])]
    return 1 if failed or result["differences"] or result["sliced_most_at_once"] > result["wave_size"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
