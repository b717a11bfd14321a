#!/usr/bin/env python3
"""Write an inventory of N simulated GPU hosts (sandbox roots built from fixtures/hosts/*.yml, as the demo
inventory does) for the rollout tests and the fleet benchmark (bench/fleet/).

Usage: tests/helpers/fleet/fleet_inventory.py N DIR [--batch B] [--hold SECONDS] [--fixtures a,b,c]

DIR/inventory/hosts.yml and group_vars: hosts gpu-001..gpu-N cycling over the fixtures (default the demo's
three: seed-v100, intel-pre-iommu, consumer-rtx; each needs a reboot on the first run), state under DIR/state
(sandbox roots, plans, call logs). The reboot goes through tests/standins/timed_command.py, which records each
reboot's start and end in DIR/state/reboots.jsonl and holds for --hold seconds (a reboot takes time: the
overlap of the waves shows in the timestamps), then runs tests/standins/simulate_reboot.py.
"""

import argparse
import os
import shutil
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEMO_FIXTURES = ["seed-v100", "intel-pre-iommu", "consumer-rtx"]


def write(path, data, comment):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"---\n# {comment}\n")
        yaml.safe_dump(data, handle, default_flow_style=False, sort_keys=False)


def build(count, directory, batch=1, hold=0.0, fixtures=None, interpreter="{{ ansible_playbook_python }}"):
    """Write the inventory; returns its path (DIR/inventory). interpreter: the hosts' Python (the benchmark's
    host_python.py to count their CPU apart)."""
    fixtures = fixtures or DEMO_FIXTURES
    directory = os.path.abspath(directory)
    inventory = os.path.join(directory, "inventory")
    state = os.path.join(directory, "state")
    hosts = {f"gpu-{i:03d}": {"demo_fixture": fixtures[(i - 1) % len(fixtures)]} for i in range(1, count + 1)}
    write(os.path.join(inventory, "hosts.yml"),
          {"all": {"children": {"gpu_hosts": {"hosts": hosts}}}},
          f"{count} simulated GPU hosts (tests/helpers/fleet/fleet_inventory.py)")
    write(os.path.join(inventory, "group_vars", "all", "main.yml"), {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "ogc_repo_dir": REPO,
        "ogc_demo_dir": state,
        # Kolla's overrides (playbooks/nova.yml) go under the state too, never to this machine's /etc/kolla.
        "nova_pci_config_node_custom_config": "{{ ogc_demo_dir }}/kolla/config",
    }, f"Every host is simulated on this machine; state under {state}")
    # The demo's own stand-ins for the host's tools and its reboot (inventory/demo/group_vars/gpu_hosts/host.yml), as
    # they are; main.yml (read after it) says what the fleet changes.
    os.makedirs(os.path.join(inventory, "group_vars", "gpu_hosts"), exist_ok=True)
    shutil.copy(os.path.join(REPO, "inventory", "demo", "group_vars", "gpu_hosts", "host.yml"),
                os.path.join(inventory, "group_vars", "gpu_hosts", "demo_host.yml"))
    write(os.path.join(inventory, "group_vars", "gpu_hosts", "main.yml"), {
        "passthrough_host_root": "{{ ogc_demo_dir }}/hosts/{{ inventory_hostname }}",
        "passthrough_sysfs_root": "{{ passthrough_host_root }}/sys",
        "passthrough_procfs_root": "{{ passthrough_host_root }}/proc",
        "passthrough_plan_dir": "{{ ogc_demo_dir }}/plans",
        "passthrough_rollout_reboot_batch": batch,
        "fleet_reboot_log": "{{ ogc_demo_dir }}/reboots.jsonl",
        # The demo's reboot stand-in, through tests/standins/timed_command.py: each reboot's start and end in the log, held
        # HOLD seconds.
        "passthrough_host_reboot_command": (
            "{{ [ansible_playbook_python, ogc_repo_dir ~ '/tests/standins/timed_command.py', fleet_reboot_log, "
            f"inventory_hostname, '--hold', '{hold}', '--'] + demo_reboot_standin }}}}"),
        # The GPU hosts' own interpreter (the control host's tasks, delegated ones included, keep the default).
        "ansible_python_interpreter": interpreter,
    }, "Simulated GPU hosts: recorded tools, timed and simulated reboots")
    return inventory


def cut(inventory, parts, directories, slice_vars=None, comment="A slice of the fleet"):
    """Cut INVENTORY (build's) into one inventory per list of host names in PARTS, written to DIRECTORIES, as AWX job
    slicing or several control hosts cut a fleet: each holds its own GPU hosts and the same group_vars (the same
    state, plans and reboot slots), with SLICE_VARS[i] (when given) on top for its GPU hosts. Returns DIRECTORIES."""
    with open(os.path.join(inventory, "hosts.yml"), encoding="utf-8") as handle:
        hosts = yaml.safe_load(handle)["all"]["children"]["gpu_hosts"]["hosts"]
    for index, (names, directory) in enumerate(zip(parts, directories)):
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(os.path.join(inventory, "group_vars"), os.path.join(directory, "group_vars"))
        if slice_vars and slice_vars[index]:
            write(os.path.join(directory, "group_vars", "gpu_hosts", "zz-slice.yml"), slice_vars[index],
                  f"{comment} {index + 1}: its own settings")
        write(os.path.join(directory, "hosts.yml"), {"all": {"children": {"gpu_hosts": {"hosts": {
            name: hosts[name] for name in names}}}}},
              f"{comment} {index + 1} of {len(parts)}: {len(names)} of the fleet's {len(hosts)} GPU hosts")
    return list(directories)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", type=int)
    parser.add_argument("directory")
    parser.add_argument("--batch", default="1", help="passthrough_rollout_reboot_batch: N or N%%")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--fixtures", default=",".join(DEMO_FIXTURES))
    args = parser.parse_args(argv[1:])
    batch = args.batch if args.batch.endswith("%") else int(args.batch)
    print(build(args.count, args.directory, batch, args.hold, args.fixtures.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
