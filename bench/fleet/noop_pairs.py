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
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import PLAYBOOK, REPO, children_cpu, host_cpu  # noqa: E402  pylint: disable=wrong-import-position


def noop(inventory, hosts, host_log, plain=False):
    if os.path.exists(host_log):
        os.remove(host_log)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               OGC_BENCH_HOST_PYTHON=sys.executable, OGC_BENCH_HOST_CPU_LOG=host_log)
    cpu0, wall0 = children_cpu(), time.time()
    extra = ["-e", "ansible_python_interpreter=" + sys.executable] if plain else []
    proc = subprocess.run([PLAYBOOK, os.path.join(REPO, "site.yml"), "-i", inventory, "--tags", "plan,host", *extra],
                          capture_output=True, text=True, check=False, cwd=REPO, env=env)
    wall, cpu = time.time() - wall0, children_cpu() - cpu0
    on_hosts, _module_runs = host_cpu(host_log)
    return dict(hosts=hosts, plain=plain, rc=proc.returncode, noop="nothing changed on any host" in proc.stdout,
                wall_s=round(wall, 1), cpu_s=round(cpu, 1), host_side_per_host_s=round(on_hosts / hosts, 2),
                controller_per_host_s=round((cpu - on_hosts) / hosts, 2))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/ogc-fleet")
    parser.add_argument("--small", type=int, default=3)
    parser.add_argument("--large", type=int, default=24)
    parser.add_argument("--plain", action="store_true", help="the venv's Python as the hosts' interpreter")
    args = parser.parse_args(argv[1:])
    ok = True
    for _ in range(args.pairs):
        runs = []
        for hosts in (args.small, args.large):
            inventory = os.path.join(args.workdir, str(hosts), "inventory")
            if not os.path.isdir(inventory):
                sys.exit(f"noop_pairs.py: {inventory} is missing: run bench/fleet/bench.py --hosts {args.small} "
                         f"{args.large} --workdir {args.workdir} first")
            runs.append(noop(inventory, hosts, os.path.join(args.workdir, f"{hosts}.pair-host-cpu"), args.plain))
            print(json.dumps(runs[-1]), flush=True)
        ok = ok and all(r["rc"] == 0 and r["noop"] for r in runs)
        print(f"ratio {runs[1]['wall_s'] / runs[0]['wall_s']:.2f} ({args.large} / {args.small} hosts)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
