#!/usr/bin/env python3
"""The floor of the no-op ratio on this machine: a play that does nothing but K module runs per GPU host.

Usage: bench/fleet/floor.py [--runs 1 2 3] [--pairs 3] [--workdir /tmp/ogc-fleet] [--small 3] [--large 24] [--plain]

Needs the simulated fleets bench.py left in WORKDIR/<size> (run bench.py first with the same --workdir). For each
K: a playbook of its own (in WORKDIR, never in the checkout) with one play over gpu_hosts, no fact gathering, and
K tasks of ansible.builtin.ping, the cheapest module ansible-core has; then pairs of runs, the small fleet and at
once the large one, on the same inventories, connection and interpreter (bench/fleet/host_python.py) as the fleet
benchmark. No role, no plan, no file: what any host phase that checks its hosts with K module runs costs at least.
--plain runs the modules on the venv's Python itself, without host_python.py's start-up (the hosts' CPU is then not
counted apart). One JSON line per run, then the pair's ratio: how far the ratio can fall on this machine, whatever a
playbook does around its module runs.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import timed_playbook  # noqa: E402  pylint: disable=wrong-import-position
from noop_pairs import add_pair_options, pair_inventories  # noqa: E402  pylint: disable=wrong-import-position


def write_playbook(path, module_runs):
    tasks = "".join(f"    - name: Module run {i + 1}\n      ansible.builtin.ping:\n" for i in range(module_runs))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"---\n- name: {module_runs} module run(s) per GPU host, nothing else\n  hosts: gpu_hosts\n"
                     f"  gather_facts: false\n  tasks:\n{tasks}")


def run(playbook, inventory, hosts, host_log, plain=False):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)  # ansible-core's defaults (forks 5 -> set 10 below, as ansible.cfg has)
    env["ANSIBLE_FORKS"] = "10"
    proc, wall, cpu, (on_hosts, module_runs) = timed_playbook([playbook, "-i", inventory], host_log, env,
                                                              os.path.dirname(playbook), plain)
    result = dict(hosts=hosts, rc=proc.returncode, wall_s=round(wall, 2), cpu_s=round(cpu, 2),
                  cpu_per_host_s=round(cpu / hosts, 2))
    if not plain:  # the hosts' module CPU is counted apart only through host_python.py
        result.update(module_runs=module_runs, host_side_per_host_s=round(on_hosts / hosts, 2))
    return result

def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 3], help="module runs per host (K)")
    add_pair_options(parser)
    args = parser.parse_args(argv[1:])
    inventories = pair_inventories(args, "floor.py")
    host_log = os.path.join(args.workdir, "floor.host-cpu")
    ok = True
    for module_runs in args.runs:
        playbook = os.path.join(args.workdir, f"floor-{module_runs}.yml")
        write_playbook(playbook, module_runs)
        for _ in range(args.pairs):
            runs = []
            for hosts, inventory in inventories:
                runs.append(dict(module_runs_per_host=module_runs, plain=args.plain,
                                 **run(playbook, inventory, hosts, host_log, args.plain)))
                print(json.dumps(runs[-1]), flush=True)
            ok = ok and all(r["rc"] == 0 for r in runs)
            print(f"K={module_runs} ratio {runs[1]['wall_s'] / runs[0]['wall_s']:.2f} ({args.large} / {args.small} hosts)",
                  flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
