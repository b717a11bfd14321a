#!/usr/bin/env python3
"""Run a playbook of the checkout through ansible-runner's Python interface, as AWX runs a job template, and
write what the run's events say to a JSON file.

Usage: runner_site.py --private-data-dir DIR --ident NAME --inventory PATH --extravars FILE --result FILE
                      [--playbook site.yml]     (PATH and the playbook: relative to the project)

AWX gives each job a private data directory: `project/` (the project's checkout; the job runs there, so the
project's ansible.cfg is the one Ansible finds), `inventory/`, `env/extravars` (the job's extra variables) and
`artifacts/<ident>/` (what ansible-runner writes: stdout, rc, status and one JSON file per event, from its
awx_display stdout callback). This lays out the same: `project` is a symlink to the checkout, `env/extravars` a
copy of FILE, the inventory the project's own (AWX imports it from the project into an inventory of its
own, with the same variables). ansible-playbook is the one first on PATH, as in an execution
environment. Every file it writes is inside DIR.

The result: rc, status, the stdout text, and from the events: per host the final counts of the run's stats
(ok, changed, failed, unreachable, skipped), the tasks each host changed, the failures not ignored, the end-of-run
summary (the message of playbooks/summary.yml's "Print the summary") and where the fleet report went (the message
of playbooks/report.yml's "Say where the report is").
"""

import argparse
import json
import os
import shutil

import ansible_runner

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY_TASK = "Print the summary"  # playbooks/summary.yml
REPORT_TASK = "Say where the report is"  # playbooks/report.yml


def lay_out(private_data_dir, extravars):
    """The private data directory as AWX lays it out for a job of this project."""
    os.makedirs(os.path.join(private_data_dir, "env"), exist_ok=True)
    project = os.path.join(private_data_dir, "project")
    if not os.path.islink(project):
        os.symlink(CHECKOUT, project)
    shutil.copyfile(extravars, os.path.join(private_data_dir, "env", "extravars"))
    return project


def host_results(stats):
    """{host: {ok, changed, failed, unreachable, skipped}} from the run's stats (the playbook_on_stats event)."""
    names = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable", "skipped": "skipped"}
    hosts = set().union(*(stats.get(key, {}) for key in (*names, "processed")))
    return {host: {name: stats.get(key, {}).get(host, 0) for key, name in names.items()} for host in sorted(hosts)}


def read_events(events):
    """What the test reads from the events: changed tasks per host, failures, the summary, the report's message."""
    found = {"changed_tasks": {}, "failed_tasks": [], "summary": None, "report": None}
    for event in events:
        data = event.get("event_data", {})
        kind = event.get("event")
        if kind == "runner_on_ok":
            if data.get("res", {}).get("changed"):
                found["changed_tasks"].setdefault(data["host"], []).append(data.get("task"))
            if data.get("task") == SUMMARY_TASK:
                found["summary"] = data["res"].get("msg")
            elif data.get("task") == REPORT_TASK:
                found["report"] = data["res"].get("msg")
        elif (kind == "runner_on_failed" and not data.get("ignore_errors")) or kind == "runner_on_unreachable":
            found["failed_tasks"].append({"host": data.get("host"), "task": data.get("task"),
                                          "msg": data.get("res", {}).get("msg")})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--private-data-dir", required=True)
    parser.add_argument("--ident", required=True, help="the run's name: its artifacts go to artifacts/<ident>")
    parser.add_argument("--inventory", required=True, help="the inventory's path in the project (inventory/demo)")
    parser.add_argument("--extravars", required=True, help="a JSON file of extra variables")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--playbook", default="site.yml")
    args = parser.parse_args()

    project = lay_out(args.private_data_dir, args.extravars)
    # An absolute path: ansible-runner would take a relative one for inventory text and write it to inventory/hosts.
    inventory = os.path.join(project, args.inventory)
    runner = ansible_runner.run(private_data_dir=args.private_data_dir, project_dir=project, ident=args.ident,
                                playbook=args.playbook, inventory=inventory, quiet=True)
    with runner.stdout as handle:
        stdout = handle.read().replace("\r\n", "\n")  # a pseudo-terminal's line ends
    events = list(runner.events)
    stats = next((e["event_data"] for e in events if e.get("event") == "playbook_on_stats"), {})
    result = {"rc": runner.rc, "status": runner.status, "artifact_dir": runner.config.artifact_dir,
              "stdout": stdout, "hosts": host_results(stats), **read_events(events)}
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
