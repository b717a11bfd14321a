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

import json
import os
import re
import shlex
import subprocess
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


def fleet(tmp_path, compute_cloud, count, lab_alias=None):
    """The fleet's inventory with COUNT hosts (gpu-001 seed-v100, gpu-002 consumer-rtx), state under tmp_path; with
    LAB_ALIAS, the lab's flavor lab.gpu1 asks for one GPU of it."""
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
        "cloud_clouds_yaml": compute_cloud.clouds_yaml,
        # The new model's flavor (the guide's step 4): refused unless a plan offers the alias.
        "cloud_flavors": [{"name": "lab.gpu1", "vcpus": 1, "ram": 256, "disk": 1,
                           "extra_specs": {"pci_passthrough:alias": f"{lab_alias}:1"}}] if lab_alias else [],
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


def test_adding_a_gpu_host_with_a_limit(tmp_path, compute_cloud):
    state = tmp_path / "state"
    custom = state / "kolla" / "config"
    inventory = fleet(tmp_path, compute_cloud, 1)
    rc, out = site(inventory)
    assert rc == 0, out
    assert reboots(tmp_path) == ["gpu-001"] and len(kolla_calls(tmp_path)) == 1

    # The operator adds gpu-002 to gpu_hosts and runs the host alone, as the guide used to say.
    inventory = fleet(tmp_path, compute_cloud, 2, lab_alias="rtx-2080-ti")
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
    flavor = compute_cloud.connect().compute.find_flavor("lab.gpu1", ignore_missing=False)
    assert flavor.extra_specs == {"pci_passthrough:alias": "rtx-2080-ti:1"}

    # The same command again changes nothing, anywhere.
    calls = len(kolla_calls(tmp_path))
    rc, out = site(inventory, *command[4:])
    assert rc == 0, out
    assert all(counts["changed"] == 0 for counts in recap(out).values()), out
    assert len(kolla_calls(tmp_path)) == calls and reboots(tmp_path) == ["gpu-001", "gpu-002"]

    replacing_the_gpus_by_another_model(tmp_path, compute_cloud, inventory, first_host)
    removing_the_host(tmp_path, compute_cloud, inventory, first_host)


# The lab's new cards: NVIDIA RTX A4000 (GA104GL, 10de:24b0) with its HD audio function (10de:228b), in the slots of
# the two RTX 2080 Ti (which had four functions each: no USB functions on the A4000).
A4000 = {"10de:1e07": "10de:24b0", "10de:10f7": "10de:228b"}


def swap_the_cards(tmp_path, inventory):
    """The operator's hands: gpu-002's RTX 2080 Ti cards out, RTX A4000 cards in, and the host powered on. The sandbox
    boots with a fixture of the new hardware (its host configuration under the root kept); the reboot stand-in of the
    later runs boots that hardware too (the host's own demo_reboot_standin, in host_vars)."""
    with open(os.path.join(ROOT, "fixtures", "hosts", "consumer-rtx.yml"), encoding="utf-8") as handle:
        fixture = yaml.safe_load(handle)
    devices = []
    for device in fixture["devices"]:
        if device["id"] in ("10de:1ad6", "10de:1ad7"):
            continue
        devices.append(dict(device, id=A4000.get(device["id"], device["id"])))
    fixture.update(description="The consumer-card host after its two RTX 2080 Ti were replaced by two RTX A4000",
                   devices=devices)
    path = tmp_path / "consumer-a4000.yml"
    path.write_text(yaml.safe_dump(fixture, sort_keys=False))
    standin = ["env", "PYTHONPATH={{ ogc_repo_dir }}/collections", "{{ ansible_playbook_python }}",
               "{{ ogc_repo_dir }}/tests/standins/simulate_reboot.py", str(path), "{{ passthrough_host_root }}"]
    os.makedirs(os.path.join(inventory, "host_vars"), exist_ok=True)
    with open(os.path.join(inventory, "host_vars", "gpu-002.yml"), "w", encoding="utf-8") as handle:
        handle.write("---\n# Its cards were replaced: the reboot stand-in boots the new hardware\n")
        yaml.safe_dump({"demo_reboot_standin": standin}, handle)
    root = tmp_path / "state" / "hosts" / "gpu-002"
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "standins", "simulate_reboot.py"), str(path),
                    str(root)], check=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "collections")),
                   timeout=120)


def replacing_the_gpus_by_another_model(tmp_path, compute_cloud, inventory, first_host):
    """docs/operator-guide.md, "Replacing a GPU by another model", its commands in order, on the fleet above."""
    state = tmp_path / "state"
    custom = state / "kolla" / "config"
    swap_the_cards(tmp_path, inventory)
    command = ["--limit", "gpu-002,localhost"]

    # Step 2: --check --diff shows what changes and refuses the flavor that asks for the model gone, naming the host
    # that had it; nothing is written.
    before = digest(str(tmp_path))
    rc, out = site(inventory, *command, "--check", "--diff")
    said = words(out)
    assert rc != 0, out
    assert ("flavors[0] (lab.gpu1): extra spec pci_passthrough:alias asks for PCI alias 'rtx-2080-ti', which no GPU "
            "host provides any more: host gpu-002 offered it before their GPUs were replaced by another model "
            "(aliases in the passthrough plans now: rtx-a4000, tesla-v100)") in said, said
    assert "vfio-pci.ids=10de:228b,10de:24b0" in said and "Traceback" not in out
    assert digest(str(tmp_path)) == before, "a check run wrote something"

    # Step 3: the flavor asks for the new model; step 4: the run, as the guide gives it.
    inventory = fleet(tmp_path, compute_cloud, 2, lab_alias="rtx-a4000")
    calls = len(kolla_calls(tmp_path))
    rc, out = site(inventory, *command)
    assert rc == 0, out
    said = words(out)
    # The host: rebooted once for its new vfio-pci.ids, its cards on vfio-pci; its plan offers the new alias and keeps
    # the old one as retired.
    assert reboots(tmp_path) == ["gpu-001", "gpu-002", "gpu-002"]
    plan = json.loads((state / "plans" / "gpu-002.json").read_text())
    assert [alias["name"] for alias in plan["plan"]["aliases"]] == ["rtx-a4000"]
    assert plan["retired_aliases"] == ["rtx-2080-ti"]
    # Nova: the host's device_spec names the new cards, the fleet's aliases the new model and not the old one.
    own = (custom / "nova" / "gpu-002" / "nova.conf").read_text()
    assert '"product_id": "24b0"' in own and '"product_id": "1e07"' not in own
    assert '"resource_class": "CUSTOM_GPU_RTX_A4000"' in own and "CUSTOM_GPU_RTX_2080_TI" not in own
    global_conf = (custom / "nova.conf").read_text()
    assert '"name": "rtx-a4000"' in global_conf and '"name": "rtx-2080-ti"' not in global_conf
    assert '"name": "tesla-v100"' in global_conf
    assert kolla_calls(tmp_path)[calls:] and kolla_calls(tmp_path)[-1].split()[-2:] == ["--limit", "ctl-1,gpu-002"]
    # The flavor follows; the first host is left alone.
    flavor = compute_cloud.connect().compute.find_flavor("lab.gpu1", ignore_missing=False)
    assert flavor.extra_specs == {"pci_passthrough:alias": "rtx-a4000:1"}
    assert first_host == {"root": digest(str(state / "hosts" / "gpu-001")),
                          "plan": (state / "plans" / "gpu-001.json").read_bytes(),
                          "nova": (custom / "nova" / "gpu-001" / "nova.conf").read_bytes()}
    # What the operator sees: the summary names the host, the report its new model.
    assert "GPU hosts: 1 (gpu-002)" in said
    assert "RTX A4000" in (state / "report" / "fleet.md").read_text()

    # Step 5: the same command again changes nothing.
    calls = len(kolla_calls(tmp_path))
    rc, out = site(inventory, *command)
    assert rc == 0, out
    assert all(counts["changed"] == 0 for counts in recap(out).values()), out
    assert len(kolla_calls(tmp_path)) == calls and reboots(tmp_path) == ["gpu-001", "gpu-002", "gpu-002"]


def remove_host(inventory, *args):
    proc = run_playbook("-i", inventory, os.path.join(ROOT, "playbooks", "remove_host.yml"), "-e", "remove_host=gpu-002",
                        *args, timeout=600)
    return proc.returncode, output(proc)


def removing_the_host(tmp_path, compute_cloud, inventory, first_host):
    """docs/operator-guide.md, "Removing a GPU host", its commands in order, on the fleet above: gpu-002 (now with its
    RTX A4000 cards) leaves the cloud. kolla-ansible is recorded here, so the compute test cloud's one nova-compute is
    another host's: Nova and Placement hold nothing of gpu-002 (its service and providers going, and the refusal
    while servers are on it, are proven on the seed host's nova-compute by test_site_end_to_end.py's move test).
    Here: what the toolkit keeps of the host goes, the inventory without it leaves the first host alone, and the
    model only it had loses its alias and its flavor is refused."""
    state = tmp_path / "state"
    custom = state / "kolla" / "config"
    own = custom / "nova" / "gpu-002" / "nova.conf"
    assert own.is_file() and (state / "plans" / "gpu-002.json").is_file()

    # Step 1: --check --diff says what goes and writes nothing.
    before = digest(str(tmp_path))
    rc, out = remove_host(inventory, "--check", "--diff")
    said = words(out)
    assert rc == 0, out
    assert ("gpu-002: Nova and Placement had nothing of it left; its Nova override block, plan and fence record "
            "would be gone") in said, said
    # The diff: the project's block leaving the host's override, the plan file going.
    assert f"--- before: {own} (content)" in out and '-device_spec = {"address": "0000:01:00.0"' in out, out
    assert f"path: {state / 'plans' / 'gpu-002.json'}" in said and "- state: file + state: absent" in said, said
    assert digest(str(tmp_path)) == before, "a check run wrote something"

    # Step 2: the removal. genconfig mode: kolla-ansible runs nothing for the host here.
    calls = len(kolla_calls(tmp_path))
    rc, out = remove_host(inventory)
    said = words(out)
    assert rc == 0, out
    assert "its Nova override block, plan and fence record are gone" in said, said
    assert "Now take gpu-002 out of gpu_hosts in the inventory" in said
    assert not own.exists() and not own.parent.exists()  # only the project's block was in it
    assert not (state / "plans" / "gpu-002.json").exists()
    assert len(kolla_calls(tmp_path)) == calls

    # Step 3: out of gpu_hosts. The lab's flavor still asks for the RTX A4000, which only gpu-002 had: refused, naming
    # the flavor, before anything is written; without the flavor the run leaves gpu-002 out and gpu-001 alone.
    inventory = fleet(tmp_path, compute_cloud, 1, lab_alias="rtx-a4000")
    before = digest(str(tmp_path))
    rc, out = site(inventory)
    said = words(out)
    assert rc != 0, out
    assert ("flavors[0] (lab.gpu1): extra spec pci_passthrough:alias asks for PCI alias 'rtx-a4000', which no GPU "
            "host provides (aliases in the passthrough plans: tesla-v100)") in said, said
    assert "Nothing was changed on the hosts or in Nova's configuration by this run: fix cloud_flavors" in said
    assert "Traceback" not in out and recap(out)["gpu-001"]["changed"] == 0
    assert digest(str(tmp_path)) == before, "a refused run wrote something"
    inventory = fleet(tmp_path, compute_cloud, 1)
    rc, out = site(inventory)
    said = words(out)
    assert rc == 0, out
    global_conf = (custom / "nova.conf").read_text()
    assert '"name": "tesla-v100"' in global_conf and '"name": "rtx-a4000"' not in global_conf
    # kolla-ansible once, over the remaining hosts (its host list changed: no limit).
    (call,) = kolla_calls(tmp_path)[calls:]
    assert call.split()[0] == "genconfig" and "gpu-002" not in call and "--limit" not in call, call
    assert reboots(tmp_path) == ["gpu-001", "gpu-002", "gpu-002"]
    assert first_host == {"root": digest(str(state / "hosts" / "gpu-001")),
                          "plan": (state / "plans" / "gpu-001.json").read_bytes(),
                          "nova": (custom / "nova" / "gpu-001" / "nova.conf").read_bytes()}
    # What the operator sees: the summary and the report have gpu-001 alone.
    assert "GPU hosts: 1 (gpu-001)" in said and "gpu-002" not in said, said
    report = (state / "report" / "fleet.md").read_text()
    assert "gpu-001" in report and "gpu-002" not in report

    # The same site.yml again changes nothing; step 4: remove_host.yml again finds nothing of the host left.
    calls = len(kolla_calls(tmp_path))
    rc, out = site(inventory)
    assert rc == 0 and all(counts["changed"] == 0 for counts in recap(out).values()), out
    assert len(kolla_calls(tmp_path)) == calls
    before = digest(str(tmp_path))
    rc, out = remove_host(inventory)
    said = words(out)
    assert rc == 0 and recap(out)["localhost"]["changed"] == 0, out
    assert "gpu-002: Nova and Placement had nothing of it left" in said, said
    assert digest(str(tmp_path)) == before
