"""A simulated fleet run as AWX job slicing runs it, beside the same fleet run unsliced, and the results compared:
the core of bench/fleet/slices.py (the benchmark's command line), which tests/integration/rollout/test_fleet_slices.py
runs on a small fleet.

Two fleets of N simulated GPU hosts are built alike (fleet_inventory.py here), in WORKDIR/unsliced and
WORKDIR/sliced. The first is run unsliced; the second as AWX runs a job template with job_slice_count K: its
inventory split into K inventories, each holding every K-th host (AWX orders a job's hosts and gives slice i the
hosts i, i+K, i+2K, ...: awx/main/models/inventory.py, get_sliced_hosts), each with the same group_vars, the K
runs started together. What they share is what AWX slices share: the control-side state on shared storage (the
plan directory, the reboot slots, kolla's node_custom_config). Both fleets run two jobs, as an AWX workflow
would: the plan and host phases (plan_host.yml here), then the Nova and report phases (nova_report.yml here); then
each job once more (the no-op).

Compared afterwards (``compare``): every Nova override file (the global nova.conf, each host's
nova/<host>/nova.conf) and the fleet report byte for byte; every plan file and every file the host phase wrote in
the hosts' sandbox roots (etc/, boot/), with each fleet's own directory name taken out; and the reboots: how many
ran at the same moment across the whole sliced fleet (reboots.jsonl), against the fleet-wide wave size.

Per run: wall time and the CPU of the ansible-playbook processes and everything they started (getrusage of the
children; the simulated hosts' modules run on this machine too, so this is controller + "host" CPU), also per GPU
host. The collection must be importable (PYTHONPATH=<checkout>/collections; pytest's pythonpath holds it).
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import resource
import shutil
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
# The tests' shared library (tests/ogc_testlib.py): how every test runs ansible-playbook. bench/fleet loads this file
# too, where pytest does not put tests/ on the path.
sys.path.insert(1, os.path.join(REPO, "tests"))
import fleet_inventory  # noqa: E402  pylint: disable=wrong-import-position
import ogc_testlib  # noqa: E402  pylint: disable=wrong-import-position

JOBS = {"plan_host": os.path.join(HERE, "plan_host.yml"), "nova_report": os.path.join(HERE, "nova_report.yml")}
# What the host phase writes in a sandbox root (the rest is the simulated hardware and the tools' call logs).
HOST_FILES = ("etc", "boot")


def slice_inventories(inventory, count):
    """Split INVENTORY (fleet_inventory.build's) as AWX job slicing does: slice i holds hosts i, i+count, ... in
    inventory order, and the same group_vars. Returns the slices' inventory directories."""
    with open(os.path.join(inventory, "hosts.yml"), encoding="utf-8") as handle:
        names = list(yaml.safe_load(handle)["all"]["children"]["gpu_hosts"]["hosts"])
    return fleet_inventory.cut(inventory, [names[index::count] for index in range(count)],
                               [f"{inventory}-slice{index + 1}" for index in range(count)], comment="Job slice")


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_job(job, inventories, log_prefix, repo=REPO):
    """Run JOB's playbook on every inventory at once (one inventory: unsliced). Returns
    {rc: [..], wall_s, cpu_s, logs: [..]}; each run's output goes to LOG_PREFIX-<i>.log."""
    env = ogc_testlib.ansible_env(ANSIBLE_CONFIG=os.path.join(repo, "ansible.cfg"))
    cpu0, wall0 = children_cpu(), time.time()
    procs = []
    for index, inventory in enumerate(inventories):
        log = f"{log_prefix}-{index + 1}.log"
        with open(log, "w", encoding="utf-8") as handle:
            procs.append((ogc_testlib.start_playbook(JOBS[job], "-i", inventory, stdout=handle, cwd=repo, env=env), log))
    codes = [proc.wait(timeout=3600) for proc, _log in procs]
    wall, cpu = time.time() - wall0, children_cpu() - cpu0
    changed = 0
    for _proc, log in procs:
        with open(log, encoding="utf-8") as handle:
            changed += sum(int(c) for c in re.findall(r"^\S+\s+: ok=\d+\s+changed=(\d+)", handle.read(), re.M))
    return {"rc": codes, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "changed": changed,
            "logs": [log for _proc, log in procs]}


def _files(root, subdirs=None):
    """Relative paths of the regular files under ROOT (only under SUBDIRS of each first-level directory when
    given: hosts/<host>/etc, hosts/<host>/boot)."""
    found = []
    for base, _dirs, names in os.walk(root):
        rel_base = os.path.relpath(base, root)
        parts = rel_base.split(os.sep)
        if subdirs and (len(parts) < 2 or parts[1] not in subdirs):
            continue
        # Backups (name~) carry the writer's pid and time in their names: not results.
        found += [os.path.normpath(os.path.join(rel_base, n)) for n in names if not n.endswith("~")
                  and os.path.isfile(os.path.join(base, n)) and not os.path.islink(os.path.join(base, n))]
    return sorted(found)


def _same_text(path_a, path_b, name_a, name_b):
    with open(path_a, encoding="utf-8", errors="replace") as one, open(path_b, encoding="utf-8", errors="replace") as two:
        return one.read().replace(name_a, "<fleet>") == two.read().replace(name_b, "<fleet>")


def compare(fleet_a, fleet_b):
    """The differences between the results of two fleets built alike (empty: the same). Nova files and the report
    byte for byte; plan files and the hosts' files with each fleet's directory taken out."""
    state_a, state_b = os.path.join(fleet_a, "state"), os.path.join(fleet_b, "state")
    problems = []
    for sub, exact, subdirs in (("kolla", True, None), ("report", True, None), ("plans", False, None),
                                ("hosts", False, HOST_FILES)):
        root_a, root_b = os.path.join(state_a, sub), os.path.join(state_b, sub)
        files_a, files_b = _files(root_a, subdirs), _files(root_b, subdirs)
        if not files_a:
            problems.append(f"{sub}: nothing written in {root_a}")
        if files_a != files_b:
            problems.append(f"{sub}: other files: only unsliced {sorted(set(files_a) - set(files_b))[:5]}, "
                            f"only sliced {sorted(set(files_b) - set(files_a))[:5]}")
        for rel in sorted(set(files_a) & set(files_b)):
            one, two = os.path.join(root_a, rel), os.path.join(root_b, rel)
            same = filecmp.cmp(one, two, shallow=False) if exact else _same_text(one, two, fleet_a, fleet_b)
            if not same:
                problems.append(f"{sub}/{rel} differs")
    return problems


def reboots(fleet):
    path = os.path.join(fleet, "state", "reboots.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def most_at_once(records):
    """The largest number of reboots running at the same moment."""
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running = peak = 0
    for _moment, step in events:
        running += step
        peak = max(peak, running)
    return peak


def run(hosts, slices, batch, hold, workdir, out, repo=REPO, noop=("unsliced", "sliced")):
    """Build both fleets, run the jobs (first, then no-op on the fleets named in NOOP), compare. Returns the
    results (a dict)."""
    fleets = {"unsliced": os.path.join(workdir, "unsliced"), "sliced": os.path.join(workdir, "sliced")}
    inventories = {}
    for name, fleet in fleets.items():
        shutil.rmtree(fleet, ignore_errors=True)
        inventory = fleet_inventory.build(hosts, fleet, batch=batch, hold=hold)
        inventories[name] = [inventory] if name == "unsliced" else slice_inventories(inventory, slices)
    runs = []
    for label in ("first", "noop"):
        for job in JOBS:
            for name in fleets:
                if label == "noop" and name not in noop:
                    continue
                result = run_job(job, inventories[name], os.path.join(out, f"{hosts}-{name}-{job}-{label}"), repo)
                result.update(hosts=hosts, fleet=name, job=job, run=label,
                              cpu_per_host_s=round(result["cpu_s"] / hosts, 2))
                print(json.dumps({k: v for k, v in result.items() if k != "logs"}), flush=True)
                runs.append(result)
    done = reboots(fleets["sliced"])
    return {"hosts": hosts, "slices": slices, "batch": batch, "runs": runs,
            "wave_size": fleet_wave_size(batch, hosts),
            "sliced_reboots": len(done), "sliced_most_at_once": most_at_once(done),
            "unsliced_most_at_once": most_at_once(reboots(fleets["unsliced"])),
            "differences": compare(fleets["unsliced"], fleets["sliced"])}


def fleet_wave_size(batch, hosts):
    """passthrough_rollout_reboot_batch on the whole fleet (the collection's plugins/filter/reboot_waves.py, the role's rule)."""
    from ansible_collections.open_gpu_cloud.toolkit.plugins.filter import reboot_waves  # pylint: disable=import-outside-toplevel
    return reboot_waves.wave_size(batch, hosts)
