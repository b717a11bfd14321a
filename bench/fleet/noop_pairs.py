#!/usr/bin/env python3
"""The no-op ratio, measured in pairs: a 3-host no-op, then a 24-host one, one right after the other, N times.

Usage: bench/fleet/noop_pairs.py [--pairs 3] [--workdir /tmp/ogc-fleet] [--small 3] [--large 24] [--plain]

Needs the simulated fleets bench.py left in WORKDIR/<size> (run bench.py first with the same --workdir): their
hosts are configured, so each run here is a no-op re-run of `site.yml --tags plan,host`. One JSON line per run
(wall, CPU of ansible-playbook and everything it started, the simulated hosts' module CPU, the controller's rest),
then the pair's ratio. The machine's speed changes from one minute to the next; a pair taken back to back is the
fairest comparison of the two sizes this machine gives. --plain runs the modules on the venv's Python itself, without
host_python.py's start-up (the hosts' CPU is then not counted apart), as bench/fleet/floor.py --plain does.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import REPO, timed_playbook  # noqa: E402  pylint: disable=wrong-import-position


def noop(inventory, hosts, host_log, plain=False):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc, wall, cpu, (on_hosts, _module_runs) = timed_playbook(
        [os.path.join(REPO, "site.yml"), "-i", inventory, "--tags", "plan,host"], host_log, env, REPO, plain)
    result = dict(hosts=hosts, plain=plain, rc=proc.returncode, noop="nothing changed on any host" in proc.stdout,
                  wall_s=round(wall, 1), cpu_s=round(cpu, 1), cpu_per_host_s=round(cpu / hosts, 2))
    if not plain:  # the hosts' module CPU is counted apart only through host_python.py
        result.update(host_side_per_host_s=round(on_hosts / hosts, 2),
                      controller_per_host_s=round((cpu - on_hosts) / hosts, 2))
    return result


def add_pair_options(parser):
    """The options of a pair of runs (floor.py takes them too)."""
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/ogc-fleet")
    parser.add_argument("--small", type=int, default=3)
    parser.add_argument("--large", type=int, default=24)
    parser.add_argument("--plain", action="store_true", help="the venv's Python as the hosts' interpreter")


def pair_inventories(args, tool):
    """[(hosts, inventory)] of the small and the large fleet bench.py left in WORKDIR; exits saying how to make them."""
    pairs = [(hosts, os.path.join(args.workdir, str(hosts), "inventory")) for hosts in (args.small, args.large)]
    for _hosts, inventory in pairs:
        if not os.path.isdir(inventory):
            sys.exit(f"{tool}: {inventory} is missing: run bench/fleet/bench.py --hosts {args.small} {args.large} "
                     f"--workdir {args.workdir} first")
    return pairs


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    add_pair_options(parser)
    args = parser.parse_args(argv[1:])
    inventories = pair_inventories(args, "noop_pairs.py")
    ok = True
    for _ in range(args.pairs):
        runs = []
        for hosts, inventory in inventories:
            runs.append(noop(inventory, hosts, os.path.join(args.workdir, f"{hosts}.pair-host-cpu"), args.plain))
            print(json.dumps(runs[-1]), flush=True)
        ok = ok and all(r["rc"] == 0 and r["noop"] for r in runs)
        print(f"ratio {runs[1]['wall_s'] / runs[0]['wall_s']:.2f} ({args.large} / {args.small} hosts)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
