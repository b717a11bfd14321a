#!/usr/bin/env python3
"""Fleet benchmark: `site.yml --tags plan,host` on N simulated GPU hosts, a first run then a no-op re-run.

Usage: bench/fleet/bench.py [--hosts 3 24 96] [--batch 25%] [--out DIR] [--workdir /tmp/ogc-fleet]
                            [--repo CHECKOUT]

--repo runs another checkout's site.yml and ansible.cfg on the same simulated hosts (the baseline: main before
the fleet rollout); the simulated hosts' scripts come from this checkout.

For each N: a fresh inventory (tests/helpers/fleet/fleet_inventory.py: hosts cycling over the demo's three fixtures,
recorded tools, simulated reboots), then the two runs. Per run: wall time, the CPU time of ansible-playbook and
everything it started (getrusage of the children: with simulated hosts the modules run on this machine too, so
this is controller + "host" CPU), the simulated hosts' share of it (their module processes, counted by
bench/fleet/host_python.py, the hosts' interpreter here) and the controller's (the rest), each per GPU host, the load average before
and after, and the 15 costliest tasks (ansible.posix.profile_tasks). Raw logs in OUT/<N>-<run>.log, figures in
OUT/results.json; OUT defaults to a new directory outside the checkout (bench/raw_logs.py: the project's cache
directory, bench/fleet/<time>-<commit>). Nothing outside WORKDIR and OUT is written.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
# The simulated fleet is the tests' (tests/helpers/fleet/): the benchmark runs what the rollout tests run.
sys.path.insert(2, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "helpers", "fleet"))
import fleet_inventory  # noqa: E402  pylint: disable=wrong-import-position
import raw_logs  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def top_tasks(log, count=15):
    """(task, seconds) of profile_tasks' summary at the end of the log."""
    found = re.findall(r"^(.+?) -+ (\d+\.\d+)s$", log, re.M)
    return [(name.strip(), float(sec)) for name, sec in found[-count:]] if found else []


def host_cpu(path):
    """Seconds of CPU the simulated hosts' module processes used (host_python.py's lines), and their count."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.split() for line in handle if line.strip()]
    except FileNotFoundError:
        return 0.0, 0
    return sum(float(children) + float(own) for children, own in lines), len(lines)


def timed_playbook(args, host_log, env, cwd, plain=False):
    """ansible-playbook ARGS, the simulated hosts' module CPU noted in HOST_LOG (emptied first; ENV is extended).
    plain: the venv's Python itself as the hosts' interpreter, without host_python.py (nothing is then noted).
    Returns the finished process, its wall time, the CPU of it and everything it started, and the hosts' share
    (seconds, module runs)."""
    if os.path.exists(host_log):
        os.remove(host_log)
    env = dict(env, OGC_BENCH_HOST_PYTHON=sys.executable, OGC_BENCH_HOST_CPU_LOG=host_log)
    extra = ["-e", "ansible_python_interpreter=" + sys.executable] if plain else []
    cpu0, wall0 = children_cpu(), time.time()
    proc = subprocess.run([PLAYBOOK, *args, *extra], capture_output=True, text=True, check=False, cwd=cwd, env=env)
    wall, cpu = time.time() - wall0, children_cpu() - cpu0
    return proc, wall, cpu, host_cpu(host_log)


def one_run(inventory, label, out_dir, hosts, repo=REPO):
    host_log = os.path.join(out_dir, f"{hosts}-{label}.host-cpu")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(repo, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ogc_changes,ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="15")
    load_before = os.getloadavg()
    proc, wall, cpu, (on_hosts, module_runs) = timed_playbook(
        [os.path.join(repo, "site.yml"), "-i", inventory, "--tags", "plan,host"], host_log, env, repo)
    log = proc.stdout + proc.stderr
    with open(os.path.join(out_dir, f"{hosts}-{label}.log"), "w", encoding="utf-8") as handle:
        handle.write(log)
    recap = re.findall(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)", log, re.M)
    return dict(hosts=hosts, run=label, rc=proc.returncode, wall_s=round(wall, 1), cpu_s=round(cpu, 1),
                cpu_per_host_s=round(cpu / hosts, 2), module_runs=module_runs,
                host_side_per_host_s=round(on_hosts / hosts, 2),
                controller_per_host_s=round((cpu - on_hosts) / hosts, 2), load_before=[round(x, 2) for x in load_before],
                load_after=[round(x, 2) for x in os.getloadavg()],
                changed=sum(int(c) for host, _ok, c in recap if host != "localhost"),
                top_tasks=top_tasks(log))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 24, 96])
    parser.add_argument("--batch", default="25%")
    parser.add_argument("--out", help="raw logs and results.json (default: a new directory outside the checkout)")
    parser.add_argument("--workdir", default="/tmp/ogc-fleet")
    parser.add_argument("--repo", default=REPO)
    args = parser.parse_args(argv[1:])
    args.out = args.out or raw_logs.run_dir("fleet", os.path.abspath(args.repo))
    os.makedirs(args.out, exist_ok=True)
    print(f"bench: raw logs in {args.out}", flush=True)
    batch = args.batch if args.batch.endswith("%") else int(args.batch)
    # Earlier figures for other fleet sizes are kept (one invocation per size is allowed).
    saved = os.path.join(args.out, "results.json")
    results = []
    if os.path.exists(saved):
        with open(saved, encoding="utf-8") as handle:
            results = [r for r in json.load(handle) if r["hosts"] not in args.hosts]
    for hosts in args.hosts:
        work = os.path.join(args.workdir, str(hosts))
        shutil.rmtree(work, ignore_errors=True)
        inventory = fleet_inventory.build(hosts, work, batch=batch, interpreter=os.path.join(HERE, "host_python.py"))
        for label in ("first", "noop"):
            result = one_run(inventory, label, args.out, hosts, os.path.abspath(args.repo))
            print(json.dumps({k: v for k, v in result.items() if k != "top_tasks"}), flush=True)
            results.append(result)
            with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as handle:
                json.dump(results, handle, indent=1)
    return 0 if all(r["rc"] == 0 for r in results if r["hosts"] in args.hosts) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
