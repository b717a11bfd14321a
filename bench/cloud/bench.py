#!/usr/bin/env python3
"""Converge 50 flavors + the default quota class + 10 project quotas several ways, against one test cloud.

    .venv/bin/python bench/cloud/bench.py [--dir DIR] [--keep] [--ways ...] [--rounds 3] [--out FILE]

Ways, each timed end to end (process start to exit) on a first run and on a no-op re-run:
  modules     ansible-playbook, one play, one task: os_cloud with the flavors section (50 flavors) and the quotas
              section (class + 10 projects): one module run, one login; what roles/cloud_resources runs
  modules_separate
              ansible-playbook, one play: os_flavors (one module run) + os_quotas (one module run)
  osc_loop    ansible-playbook, one play: openstack.cloud.compute_flavor in a loop (50 items),
              `openstack quota set --class` (openstack.cloud has no quota-class module), openstack.cloud.quota
              in a loop (10 items)
  cli_loop    the seed's shell loop: `openstack flavor create` + `openstack flavor set --property` per flavor,
              `openstack quota set --class ... default`, `openstack quota set ... PROJECT`; its re-run is the
              idempotent variant (`flavor show || flavor create`, then the same `set` commands)

Before each way's first run the bench flavors are deleted and the quotas reset, so every first run starts
from the same state, and the server state is checked against the declaration after it. Then come --rounds
rounds of no-op re-runs, every way once per round, interleaved (all ways converge to the same state); the
no-op ratios are taken within each round and the median round is reported, so a slow spell of a shared
machine hits both sides of a ratio. Run with the toolkit venv (ansible, openstack.cloud 2.5.0,
openstacksdk 4.10.0); the `openstack` CLI comes from the services venv.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import raw_logs  # noqa: E402  pylint: disable=wrong-import-position

BIN = os.path.dirname(sys.executable)
N_FLAVORS = 50
N_PROJECTS = 10
ALIAS = {"pci_passthrough:alias": "tesla-v100:1"}


def declaration():
    flavors = []
    for i in range(1, N_FLAVORS + 1):
        flavor = {"name": f"bench_f{i:02d}", "id": f"bench_f{i:02d}", "vcpus": 1 + i % 8, "ram": 1024 * (1 + i % 16),
                  "disk": 10 + i}
        specs = {}
        if i % 2 == 0:
            specs.update(ALIAS)
        if i % 5 == 0:
            specs["hw:hide_hypervisor_id"] = "true"
        if specs:
            flavor["extra_specs"] = specs
        flavors.append(flavor)
    quota_class = {"instances": 15, "cores": 64}
    projects = [{"project": f"bench-p{i:02d}", "instances": 5 + i, "cores": 20 + 2 * i}
                for i in range(1, N_PROJECTS + 1)]
    return flavors, quota_class, projects


def play(tasks):
    return [{"name": "bench", "hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
             "tasks": tasks}]


def modules_play(flavors, quota_class, projects):
    return play([
        {"name": "cloud", "open_gpu_cloud.toolkit.os_cloud": {"cloud": "ogc-test",
                                       "flavors": {"flavors": flavors, "known_aliases": ["tesla-v100"]},
                                       "quotas": {"default_class": quota_class, "projects": projects}}},
    ])


def modules_separate_play(flavors, quota_class, projects):
    return play([
        {"name": "flavors", "open_gpu_cloud.toolkit.os_flavors": {"cloud": "ogc-test", "flavors": flavors, "known_aliases": ["tesla-v100"]}},
        {"name": "quotas", "open_gpu_cloud.toolkit.os_quotas": {"cloud": "ogc-test", "default_class": quota_class, "projects": projects}},
    ])


def osc_play(flavors, quota_class, projects, openstack_cli):
    class_cmd = [openstack_cli, "quota", "set", "--class"]
    for key, value in quota_class.items():
        class_cmd += ["--" + key, str(value)]
    return play([
        {"name": "flavors", "openstack.cloud.compute_flavor": {
            "cloud": "ogc-test", "name": "{{ item.name }}", "id": "{{ item.id }}", "vcpus": "{{ item.vcpus }}",
            "ram": "{{ item.ram }}", "disk": "{{ item.disk }}", "extra_specs": "{{ item.extra_specs | default({}) }}"},
         "loop": flavors, "loop_control": {"label": "{{ item.name }}"}},
        {"name": "quota class (no openstack.cloud module for it)",
         "ansible.builtin.command": {"argv": class_cmd + ["default"]}, "changed_when": True},
        {"name": "project quotas", "openstack.cloud.quota": {
            "cloud": "ogc-test", "name": "{{ item.project }}", "instances": "{{ item.instances }}",
            "cores": "{{ item.cores }}"},
         "loop": projects, "loop_control": {"label": "{{ item.project }}"}},
    ])


def cli_script(flavors, quota_class, projects, openstack_cli, rerun):
    lines = ["set -euo pipefail", f"os={openstack_cli}"]
    for f in flavors:
        create = (f"$os flavor create --public {f['name']} --id {f['id']} --ram {f['ram']} --disk {f['disk']} "
                  f"--vcpus {f['vcpus']} >/dev/null")
        if rerun:
            create = f"$os flavor show {f['name']} >/dev/null 2>&1 || {create}"
        lines.append(create)
        props = " ".join(f'--property "{k}"="{v}"' for k, v in sorted(f.get("extra_specs", {}).items()))
        if props:
            lines.append(f"$os flavor set {f['name']} {props}")
    class_args = " ".join(f"--{k} {v}" for k, v in quota_class.items())
    lines.append(f"$os quota set --class {class_args} default")
    for p in projects:
        lines.append(f"$os quota set --instances {p['instances']} --cores {p['cores']} {p['project']}")
    return "\n".join(lines) + "\n"


class Bench:
    def __init__(self, state_dir, work):
        self.dir = state_dir
        self.work = work
        self.clouds_yaml = os.path.join(state_dir, "clouds.yaml")
        self.env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                        OS_CLIENT_CONFIG_FILE=self.clouds_yaml, OS_CLOUD="ogc-test", ANSIBLE_NOCOLOR="1",
                        ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
                        PYTHONWARNINGS="ignore")
        self.conn = None

    def connect(self):
        import openstack  # pylint: disable=import-outside-toplevel

        config = openstack.config.OpenStackConfig(config_files=[self.clouds_yaml], load_envvars=False)
        self.conn = openstack.connection.Connection(config=config.get_one(cloud="ogc-test"))

    def timed(self, label, argv):
        load = os.getloadavg()[0]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU seconds of the client side (ansible-playbook or the shell and everything they ran): unlike wall
        # time it hardly depends on how busy the machine is. The servers' CPU is not included.
        cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        log = os.path.join(self.work, label.replace(" ", "_") + ".log")
        with open(log, "w", encoding="utf-8") as handle:
            handle.write(proc.stdout + proc.stderr)
        if proc.returncode:
            raise SystemExit(f"bench: {label} failed (rc {proc.returncode}), see "
                             f"{log}:\n{(proc.stdout + proc.stderr)[-3000:]}")
        print(f"  {label!s:<22} {seconds:7.1f} s wall {cpu:7.1f} s client CPU  (load {load:.1f})", flush=True)
        return round(seconds, 2), proc.stdout, round(load, 1), round(cpu, 2)

    def playbook(self, label, content):
        path = os.path.join(self.work, label.split()[0] + ".json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=1)
        return self.timed(label, [os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", path])

    def script(self, label, text):
        path = os.path.join(self.work, label.replace(" ", "_") + ".sh")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return self.timed(label, ["bash", path])

    # ---- state on the server -------------------------------------------------
    def setup_projects(self, projects):
        for p in projects:
            if self.conn.identity.find_project(p["project"]) is None:
                self.conn.identity.create_project(name=p["project"], domain_id="default")

    def reset(self, projects, class_defaults):
        for flavor in list(self.conn.compute.flavors(is_public=None)):
            if flavor.name.startswith("bench_"):
                self.conn.compute.delete_flavor(flavor.id)
        self.conn.compute.update_quota_class_set("default", **class_defaults)
        for p in projects:
            project = self.conn.identity.find_project(p["project"], ignore_missing=False)
            self.conn.compute.revert_quota_set(project.id)

    def verify(self, way, flavors, quota_class, projects):
        found = {f.name: f for f in self.conn.compute.flavors(is_public=None) if f.name.startswith("bench_")}
        problems = []
        for f in flavors:
            have = found.get(f["name"])
            if have is None:
                problems.append(f"{f['name']} missing")
                continue
            if (have.vcpus, have.ram, have.disk) != (f["vcpus"], f["ram"], f["disk"]):
                problems.append(f"{f['name']} sizes differ")
            if dict(have.extra_specs or {}) != f.get("extra_specs", {}):
                problems.append(f"{f['name']} extra specs {have.extra_specs}")
        qc = self.conn.compute.get_quota_class_set("default")
        if any(getattr(qc, k) != v for k, v in quota_class.items()):
            problems.append(f"quota class {qc.to_dict(computed=False)}")
        for p in projects:
            project = self.conn.identity.find_project(p["project"], ignore_missing=False)
            qs = self.conn.compute.get_quota_set(project.id)
            if (qs.instances, qs.cores) != (p["instances"], p["cores"]):
                problems.append(f"{p['project']} quotas {qs.instances}/{qs.cores}")
        if problems:
            raise SystemExit(f"bench: after {way} the server state differs from the declaration: "
                             f"{'; '.join(problems[:10])}")


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return round(ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2, 2)


def bench_way(bench, way, flavors, quota_class, projects, openstack_cli):
    """(first run, no-op re-run) of one way, as functions returning Bench.timed()'s tuple."""
    if way in ("modules", "modules_separate"):
        content = (modules_play if way == "modules" else modules_separate_play)(flavors, quota_class, projects)

        def again():
            sample = bench.playbook(f"{way} no-op", content)
            if "changed=0" not in sample[1]:
                raise SystemExit("bench: the modules' re-run changed something:\n" + sample[1][-2000:])
            return sample

        return (lambda: bench.playbook(f"{way} first", content)), again
    if way == "osc_loop":
        content = osc_play(flavors, quota_class, projects, openstack_cli)
        return (lambda: bench.playbook("osc_loop first", content)), (lambda: bench.playbook("osc_loop no-op", content))
    if way == "cli_loop":
        first = cli_script(flavors, quota_class, projects, openstack_cli, False)
        rerun = cli_script(flavors, quota_class, projects, openstack_cli, True)
        return (lambda: bench.script("cli_loop first", first)), (lambda: bench.script("cli_loop re-run", rerun))
    raise SystemExit(f"bench: unknown way {way}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dir", help="test cloud state dir (default: a temporary one, stopped at the end)")
    parser.add_argument("--keep", action="store_true", help="leave the test cloud running")
    parser.add_argument("--out", help="the figures as JSON (default: results.json beside the raw logs, outside the checkout)")
    parser.add_argument("--ways", default="modules,modules_separate,osc_loop,cli_loop")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of no-op re-runs, every way once per round (the median round is reported)")
    args = parser.parse_args()

    venv = subprocess.run([os.path.join(ROOT, "scripts", "openstack-venv.sh")], capture_output=True, text=True,
                          check=True).stdout.strip()
    openstack_cli = os.path.join(venv, "bin", "openstack")
    state_dir = args.dir or tempfile.mkdtemp(prefix="ogc-bench-cloud-")
    work = raw_logs.run_dir("cloud")
    args.out = args.out or os.path.join(work, "results.json")
    print(f"bench: test cloud in {state_dir}, logs in {work}", flush=True)
    started = time.perf_counter()
    subprocess.run([os.path.join(ROOT, "scripts", "testcloud.sh"), "start", "--dir", state_dir, "--lifetime", "7200"],
                   check=True, cwd=ROOT)
    start_seconds = round(time.perf_counter() - started, 1)
    bench = Bench(state_dir, work)
    flavors, quota_class, projects = declaration()
    results = {"flavors": len(flavors), "projects": len(projects), "testcloud_start_s": start_seconds,
               "cpus": os.cpu_count(), "ways": {}}
    try:
        bench.connect()
        bench.setup_projects(projects)
        defaults = bench.conn.compute.get_quota_class_set("default")
        class_defaults = {k: getattr(defaults, k) for k in quota_class}
        ways = args.ways.split(",")
        plans = dict((way, bench_way(bench, way, flavors, quota_class, projects, openstack_cli)) for way in ways)
        # First runs, each from the same clean state.
        for way in ways:
            bench.reset(projects, class_defaults)
            print(f"{way}:", flush=True)
            first = plans[way][0]()
            bench.verify(way, flavors, quota_class, projects)
            results["ways"][way] = {"first_s": first[0], "first_cpu_s": first[3], "load_first": first[2],
                                    "rerun_samples": []}
        # No-op re-runs. Every way converges to the same declaration, so the state is now converged for all of
        # them. Each round re-runs every way once, one after the other: a slow spell of this shared machine
        # then hits all ways alike, and the ratio is taken within a round (the median round is reported).
        for round_ in range(1, args.rounds + 1):
            print(f"no-op round {round_}:", flush=True)
            for way in ways:
                again = plans[way][1]()
                results["ways"][way]["rerun_samples"].append({"wall_s": again[0], "cpu_s": again[3],
                                                              "load": again[2]})
        for way in ways:
            bench.verify(way, flavors, quota_class, projects)
        bench.reset(projects, class_defaults)
    finally:
        if not args.keep:
            subprocess.run([os.path.join(ROOT, "scripts", "testcloud.sh"), "stop", "--dir", state_dir], check=False,
                           cwd=ROOT, capture_output=True)
            if not args.dir:
                shutil.rmtree(state_dir, ignore_errors=True)
    ways = results["ways"]
    for way, data in ways.items():
        data["rerun_s"] = median([sample["wall_s"] for sample in data["rerun_samples"]])
        data["rerun_cpu_s"] = median([sample["cpu_s"] for sample in data["rerun_samples"]])
    if "modules" in ways:
        base = ways["modules"]
        for other in ("modules_separate", "osc_loop", "cli_loop"):
            if other not in ways:
                continue
            data = ways[other]
            results[f"ratio_first_{other}_vs_modules"] = round(data["first_s"] / base["first_s"], 1)
            results[f"ratio_cpu_first_{other}_vs_modules"] = round(data["first_cpu_s"] / base["first_cpu_s"], 1)
            pairs = list(zip(data["rerun_samples"], base["rerun_samples"]))
            results[f"ratio_rerun_{other}_vs_modules"] = round(median([a["wall_s"] / b["wall_s"] for a, b in pairs]), 1)
            results[f"ratio_cpu_rerun_{other}_vs_modules"] = round(
                median([a["cpu_s"] / b["cpu_s"] for a, b in pairs]), 1)
            results[f"ratio_rerun_{other}_vs_modules_per_round"] = [round(a["wall_s"] / b["wall_s"], 1)
                                                                      for a, b in pairs]
    results["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
