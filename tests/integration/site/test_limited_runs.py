"""A run limited to some hosts: the control phases do their part for exactly those hosts, or the run is refused
before anything is written (playbooks/run_scope.yml, plugins/module_utils/common/run_scope.py).

The journey of docs/operator-guide.md, "Adding a GPU host", on simulated GPU hosts (tests/helpers/fleet: sandbox
roots built from fixtures/hosts, the demo's stand-ins for update-grub, update-initramfs and the reboot): a fleet of
one host (the seed V100 server) configured by an unlimited site.yml, then a second host (a consumer RTX host) added
to the inventory. `site.yml --limit <new host>` is refused, naming the command that keeps the control host, with
nothing written anywhere; that command, run as printed, plans, configures and reboots the new host, renders its
Nova override and the fleet's aliases, runs kolla-ansible limited to it, declares the new model's flavor on the test
cloud and reports, while the first host sees no file change, no reboot and no kolla-ansible run; run again, it
changes nothing. kolla-ansible is a recording stand-in here (genconfig mode, its version and its arguments): what
kolla-ansible renders from the overrides is proven in tests/integration/nova/test_nova_kolla_genconfig.py.
"""

from __future__ import annotations

import os
import re
import shlex
import sys

import pytest
import yaml

from ogc_testlib import ROOT, load_source, output, recap, run_playbook, words

pytestmark = pytest.mark.integration

fleet_inventory = load_source("fleet_inventory", os.path.join("tests", "helpers", "fleet", "fleet_inventory.py"))
fleet_slices = load_source("fleet_slices", os.path.join("tests", "helpers", "fleet", "fleet_slices.py"))
digest = load_source("tree_digest", os.path.join("tests", "helpers", "tree_digest.py")).digest

KOLLA = """#!/usr/bin/env bash
# kolla-ansible, recorded: its version, and each call's arguments (one line per call).
if [ "$1" = --version ]; then echo "kolla-ansible 22.2.0"; exit 0; fi
echo "$*" >> {calls}
exit 0
"""


def fleet(tmp_path, testcloud, count):
    """The fleet's inventory with COUNT hosts (gpu-001 seed-v100, gpu-002 consumer-rtx), state under tmp_path."""
    inventory = fleet_inventory.build(count, str(tmp_path), fixtures=["seed-v100", "consumer-rtx"])
    # A controller, kolla-ansible's control group (only a name here: kolla-ansible is recorded, never run).
    hosts_file = os.path.join(inventory, "hosts.yml")
    with open(hosts_file, encoding="utf-8") as handle:
        hosts = yaml.safe_load(handle)
    hosts["all"]["children"]["control"] = {"hosts": {"ctl-1": {}}}
    with open(hosts_file, "w", encoding="utf-8") as handle:
        yaml.safe_dump(hosts, handle)
    bindir = tmp_path / "kolla-bin"
    if not bindir.exists():
        bindir.mkdir()
        (bindir / "kolla-ansible").write_text(KOLLA.format(calls=tmp_path / "kolla-calls.txt"))
        (bindir / "kolla-ansible").chmod(0o755)
        (bindir / "kolla-genpwd").symlink_to(os.path.join(os.path.dirname(sys.executable), "kolla-genpwd"))
    control = {
        "kolla_deploy_mode": "genconfig",
        "kolla_deploy_bin_dir": str(bindir),
        # kolla-ansible's real data files (its example passwords.yml, its multinode inventory).
        "kolla_deploy_share_dir": os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "share",
                                               "kolla-ansible"),
        "kolla_deploy_config_dir": str(tmp_path / "kolla" / "etc"),
        "kolla_deploy_node_custom_config": "{{ nova_pci_config_node_custom_config }}",
        "kolla_deploy_log_dir": str(tmp_path / "kolla" / "logs"),
        "kolla_deploy_network_interface": "lo",
        "kolla_deploy_internal_vip_address": "127.0.0.10",
        "kolla_deploy_stream_to_tty": False,
        "ci_runner_output_dir": str(tmp_path / "ci-runners"),
        "cloud_name": "ogc-test",
        "cloud_clouds_yaml": testcloud.clouds_yaml,
        # The new model's flavor (the guide's step 4): refused unless a plan offers the alias.
        "cloud_flavors": [{"name": "journey-rtx-2080-ti", "vcpus": 1, "ram": 256, "disk": 1,
                                     "extra_specs": {"pci_passthrough:alias": "rtx-2080-ti:1"}}] if count > 1 else [],
    }
    with open(os.path.join(inventory, "group_vars", "all", "zz-control.yml"), "w", encoding="utf-8") as handle:
        handle.write("---\n# The control host's phases: kolla-ansible recorded, the test cloud\n")
        yaml.safe_dump(control, handle)
    return inventory


def site(inventory, *args):
    proc = run_playbook("-i", inventory, os.path.join(ROOT, "site.yml"), *args, timeout=900)
    return proc.returncode, output(proc)


def kolla_calls(tmp_path):
    path = tmp_path / "kolla-calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def reboots(tmp_path):
    """The hosts rebooted so far, in order (the reboot stand-in's own log)."""
    return [record["name"] for record in fleet_slices.reboots(str(tmp_path))]


def test_adding_a_gpu_host_with_a_limit(tmp_path, testcloud):
    state = tmp_path / "state"
    custom = state / "kolla" / "config"
    inventory = fleet(tmp_path, testcloud, 1)
    rc, out = site(inventory)
    assert rc == 0, out
    assert reboots(tmp_path) == ["gpu-001"] and len(kolla_calls(tmp_path)) == 1

    # The operator adds gpu-002 to gpu_hosts and runs the host alone, as the guide used to say.
    inventory = fleet(tmp_path, testcloud, 2)
    first_host = {"root": digest(str(state / "hosts" / "gpu-001")),
                  "plan": (state / "plans" / "gpu-001.json").read_bytes(),
                  "nova": (custom / "nova" / "gpu-001" / "nova.conf").read_bytes()}
    before = digest(str(tmp_path))
    rc, out = site(inventory, "--limit", "gpu-002")
    assert rc != 0
    said = words(out)
    assert ("the limit 'gpu-002' leaves out the control host (localhost), where the nova, deploy, cloud, health, "
            "summary and report phases run: they would run on no host for gpu-002") in said
    assert "Nothing was changed." in said and "Traceback" not in out
    assert recap(out)["gpu-002"]["changed"] == 0
    assert digest(str(tmp_path)) == before, "a refused run wrote something"
    assert not (state / "hosts" / "gpu-002").exists()

    # The advice, followed as printed.
    advice = re.search(r"Keep the control host in the limit: (ansible-playbook site\.yml .*?--limit '[^']+')", said)
    assert advice, said
    command = shlex.split(advice.group(1))
    assert command[0] == "ansible-playbook" and command[1:4] == ["site.yml", "-i", inventory]
    assert command[-2:] == ["--limit", "gpu-002,localhost"]
    rc, out = site(inventory, *command[4:])
    assert rc == 0, out
    said = words(out)

    # The new host: planned, configured, rebooted, its own Nova override; the fleet's aliases name both models.
    assert reboots(tmp_path) == ["gpu-001", "gpu-002"]
    assert (state / "plans" / "gpu-002.json").is_file()
    own = (custom / "nova" / "gpu-002" / "nova.conf").read_text()
    assert '"address": "0000:' in own and "device_spec" in own
    global_conf = (custom / "nova.conf").read_text()
    assert '"name": "tesla-v100"' in global_conf and '"name": "rtx-2080-ti"' in global_conf
    # kolla-ansible rendered for the new host and the controller (nova-api reads the aliases), no other host.
    assert kolla_calls(tmp_path)[-1].split()[0] == "genconfig"
    assert kolla_calls(tmp_path)[-1].split()[-2:] == ["--limit", "ctl-1,gpu-002"]
    # The first host: not a file changed, not rebooted again.
    assert first_host == {"root": digest(str(state / "hosts" / "gpu-001")),
                          "plan": (state / "plans" / "gpu-001.json").read_bytes(),
                          "nova": (custom / "nova" / "gpu-001" / "nova.conf").read_bytes()}
    assert recap(out).get("gpu-001") is None
    # What the operator sees: the summary names the run's host and the limit; the report has both hosts.
    assert "GPU hosts: 1 (gpu-002)" in said
    assert "Limited run (--limit gpu-002,localhost): the GPU hosts above" in said
    assert "kolla-ansible on ctl-1, gpu-002" in said
    report = (state / "report" / "fleet.md").read_text()
    assert "gpu-001" in report and "gpu-002" in report
    flavor = testcloud.connect().compute.find_flavor("journey-rtx-2080-ti", ignore_missing=False)
    assert flavor.extra_specs == {"pci_passthrough:alias": "rtx-2080-ti:1"}

    # The same command again changes nothing, anywhere.
    calls = len(kolla_calls(tmp_path))
    rc, out = site(inventory, *command[4:])
    assert rc == 0, out
    assert all(counts["changed"] == 0 for counts in recap(out).values()), out
    assert len(kolla_calls(tmp_path)) == calls and reboots(tmp_path) == ["gpu-001", "gpu-002"]
