"""Role kolla_deploy through playbooks/deploy.yml, with a recording stand-in for the kolla-ansible
executable (the real kolla-genpwd and kolla's real data files): globals, passwords generated once
and never printed, the kolla inventory, the step sequence (deploy, then nothing, then reconfigure),
check mode, failures naming the step and its log, and every bad input refused before anything runs."""

import json
import pathlib
import sys

import pytest
import yaml

from nova_helpers import run_playbook, write_inventory

pytestmark = pytest.mark.integration

VENV_BIN = pathlib.Path(sys.executable).parent
SHARE = VENV_BIN.parent / "share" / "kolla-ansible"

FAKE = """#!/usr/bin/env bash
# Records each kolla-ansible call; post-deploy writes clouds.yaml like kolla's does.
if [ "$1" = --version ]; then echo "kolla-ansible {version}"; exit 0; fi
echo "$*" >> {calls}
echo "PLAY [fake kolla-ansible $1] ***"
if [ "$1" = "{fail}" ]; then echo "fatal: [gpu1]: FAILED! => boom in $1"; exit 2; fi
while [ $# -gt 0 ]; do [ "$1" = --configdir ] && dir=$2; shift; done
[ -n "${{dir:-}}" ] && [ -f "$dir/passwords.yml" ] || {{ echo "no passwords.yml"; exit 3; }}
case "$*" in *) ;; esac
exit 0
"""


def fake_bin(tmp_path, version="22.2.0", fail="none"):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    calls = tmp_path / "calls.txt"
    script = FAKE.format(version=version, calls=calls, fail=fail)
    script = script.replace('case "$*" in *) ;; esac',
                            '[ "$(head -c 11 ' + str(calls) + ' | tail -c 11)" ] && '
                            'grep -q "^post-deploy" ' + str(calls) + ' && '
                            'echo "clouds: {kolla-admin: {}}" > "$dir/clouds.yaml"')
    (bindir / "kolla-ansible").write_text(script)
    (bindir / "kolla-ansible").chmod(0o755)
    if not (bindir / "kolla-genpwd").exists():
        (bindir / "kolla-genpwd").symlink_to(VENV_BIN / "kolla-genpwd")
    return bindir, calls


def called(calls):
    return [line.split()[0] for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.fixture
def kolla_inventory(tmp_path):
    inv = write_inventory(tmp_path / "inventory.json", ["gpu1", "gpu2"], control=["ctl1"])
    data = json.loads(inv.read_text())
    data["all"]["children"]["gpu_hosts"]["hosts"]["gpu1"] = {"ansible_host": "10.0.0.11", "ansible_user": "ops"}
    data["all"]["children"]["network"] = {"hosts": {"ctl1": {}}}
    inv.write_text(json.dumps(data))
    return inv


def deploy_vars(tmp_path, bindir, **extra):
    return {"kolla_deploy_config_dir": str(tmp_path / "etc"),
            "kolla_deploy_bin_dir": str(bindir), "kolla_deploy_share_dir": str(SHARE),
            "kolla_deploy_log_dir": str(tmp_path / "logs"),
            "kolla_deploy_network_interface": "eth0", "kolla_deploy_internal_vip_address": "10.0.0.250",
            "kolla_deploy_neutron_external_interface": "eth1",
            "kolla_deploy_globals": {"enable_cinder": False, "openstack_region_name": "gpu"},
            "kolla_deploy_stream_to_tty": False, **extra}


def test_full_deploy_then_nothing_then_reconfigure(tmp_path, kolla_inventory):
    bindir, calls = fake_bin(tmp_path)
    etc = tmp_path / "etc"
    rc, out, recap = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir), check=True)
    assert rc == 0, out
    assert not etc.exists() and called(calls) == []

    rc, out, recap = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc == 0, out
    assert called(calls) == ["install-deps", "bootstrap-servers", "prechecks", "deploy", "post-deploy"]
    first = calls.read_text().splitlines()[0].split()
    assert first[1:] == ["-i", str(etc / "multinode"), "--configdir", str(etc), "--passwords", str(etc / "passwords.yml")]
    assert (etc / "clouds.yaml").is_file()
    assert "kolla-ansible steps to run: install-deps, bootstrap-servers, prechecks, deploy, post-deploy" in out
    assert (tmp_path / "logs/deploy.log").read_text().startswith("==> " + str(bindir / "kolla-ansible") + " deploy")

    globals_yml = (etc / "globals.yml").read_text()
    assert globals_yml.startswith("#\n# Ansible managed")
    assert yaml.safe_load(globals_yml) == {
        "kolla_base_distro": "debian", "network_interface": "eth0", "kolla_internal_vip_address": "10.0.0.250",
        "neutron_external_interface": "eth1", "node_custom_config": str(etc / "config"),
        "enable_cinder": False, "openstack_region_name": "gpu"}

    passwords = etc / "passwords.yml"
    assert oct(passwords.stat().st_mode & 0o777) == "0o640"
    secrets = yaml.safe_load(passwords.read_text())
    assert secrets["keystone_admin_password"] and len(secrets["keystone_admin_password"]) >= 20
    assert secrets["keystone_admin_password"] not in out and secrets["database_password"] not in out

    inventory = (etc / "multinode").read_text()
    top = inventory.split("\n[baremetal:children]\n")[0]
    assert '[compute]\ngpu1 ansible_host="10.0.0.11" ansible_user="ops"' in top
    assert "\ngpu2\n" in top and "[control]\nctl1" in top and "[network]\nctl1" in top
    assert "[storage]\n\n" in top and "[monitoring]\n\n" in top
    assert "\n[nova:children]\ncontrol\n" in inventory  # kolla's own groups follow

    before = passwords.read_text()
    rc, out, recap = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc == 0 and recap["changed"] == 0, out
    assert "Nothing changed since the last successful kolla-ansible run" in out
    assert len(called(calls)) == 5 and passwords.read_text() == before

    (etc / "config").mkdir(exist_ok=True)
    (etc / "config" / "nova.conf").write_text("[pci]\nalias = {}\n")  # e.g. nova_pci_config changed
    rc, out, recap = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc == 0, out
    assert called(calls)[5:] == ["prechecks", "reconfigure", "post-deploy"]
    assert passwords.read_text() == before


def test_failed_step_names_step_and_log_and_stops(tmp_path, kolla_inventory):
    bindir, calls = fake_bin(tmp_path, fail="prechecks")
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc != 0
    log = tmp_path / "logs/prechecks.log"
    assert "kolla-ansible prechecks failed (exit 2). Its full log: " + str(log) in out, out
    assert "boom in prechecks" in out and "boom in prechecks" in log.read_text()
    assert called(calls) == ["install-deps", "bootstrap-servers", "prechecks"]
    assert not (tmp_path / "etc/.open-gpu-cloud-kolla-state.json").exists()


def test_existing_passwords_keep_a_tighter_mode(tmp_path, kolla_inventory):
    bindir, _calls = fake_bin(tmp_path)
    etc = tmp_path / "etc"
    etc.mkdir()
    passwords = etc / "passwords.yml"
    passwords.write_text("keystone_admin_password: operator-chosen\n")
    passwords.chmod(0o600)
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc == 0, out
    assert oct(passwords.stat().st_mode & 0o777) == "0o600"
    assert passwords.read_text() == "keystone_admin_password: operator-chosen\n"
    passwords.chmod(0o604)  # readable by others: brought down to the role's ceiling, 0640 & 0604
    rc, out, recap = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc == 0 and recap["changed"] == 1, out
    assert oct(passwords.stat().st_mode & 0o777) == "0o600"


def test_vaulted_passwords_are_left_alone(tmp_path, kolla_inventory):
    bindir, calls = fake_bin(tmp_path)
    etc = tmp_path / "etc"
    etc.mkdir()
    vaulted = "$ANSIBLE_VAULT;1.1;AES256\n6136\n"
    (etc / "passwords.yml").write_text(vaulted)
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc != 0
    assert "is vaulted (left as it is)" in out and "--vault-password-file" in out, out
    assert called(calls) == []
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(
        tmp_path, bindir, kolla_deploy_extra_args=["--vault-password-file", "/root/.vault"]))
    assert rc == 0, out
    assert (etc / "passwords.yml").read_text() == vaulted
    assert oct((etc / "passwords.yml").stat().st_mode & 0o777) == "0o640"
    assert calls.read_text().splitlines()[0].endswith("--vault-password-file /root/.vault")


@pytest.mark.parametrize("override, needles", [
    ({"kolla_deploy_network_interface": ""}, ["network_interface is not set", "kolla_deploy_network_interface"]),
    ({"kolla_deploy_internal_vip_address": ""}, ["kolla_internal_vip_address is \"\"", "unused IP"]),
    ({"kolla_deploy_internal_vip_address": "10.0.0.300"}, ["kolla_internal_vip_address is \"10.0.0.300\""]),
    ({"kolla_deploy_globals": {"nova_pci_passthrough_whitelist": []}},
     ["kolla_deploy_globals sets nova_pci_passthrough_whitelist", "remove it"]),
    ({"kolla_deploy_globals": {"network_interface": "eth9"}}, ["kolla_deploy_globals sets network_interface"]),
    ({"kolla_deploy_mode": "containers"}, ["value of kolla_deploy_mode must be one of: full, genconfig, got: containers"]),
])
def test_bad_settings_fail_before_anything_runs(tmp_path, kolla_inventory, override, needles):
    bindir, calls = fake_bin(tmp_path)
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir, **override))
    assert rc != 0
    for needle in needles:
        assert needle in out, out
    assert not (tmp_path / "etc").exists() and called(calls) == []


def test_kolla_ansible_missing(tmp_path, kolla_inventory):
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, tmp_path / "nowhere"))
    assert rc != 0
    assert "kolla-ansible is not usable at " + str(tmp_path / "nowhere/kolla-ansible") in out, out
    assert "scripts/bootstrap.sh" in out and not (tmp_path / "etc").exists()


def test_kolla_ansible_wrong_version(tmp_path, kolla_inventory):
    bindir, calls = fake_bin(tmp_path, version="21.1.0")
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory, deploy_vars(tmp_path, bindir))
    assert rc != 0
    assert "is version 21.1.0, but this toolkit is written for kolla-ansible 22.x" in out, out
    assert not (tmp_path / "etc").exists() and called(calls) == []


def test_a_job_slice_is_refused(tmp_path, kolla_inventory):
    # The GPU hosts' plan directory holds the plan of a host this inventory does not hold (gpu3, another AWX job
    # slice's): kolla-ansible deploys the whole cloud, so the deploy phase refuses before anything is written.
    plans = tmp_path / "plans"
    plans.mkdir()
    for host in ("gpu1", "gpu2", "gpu3"):
        (plans / f"{host}.json").write_text("{}")
    bindir, calls = fake_bin(tmp_path)
    rc, out, _ = run_playbook("deploy.yml", kolla_inventory,
                              deploy_vars(tmp_path, bindir, passthrough_plan_dir=str(plans)))
    assert rc != 0
    assert ("kolla_deploy: kolla-ansible deploys the whole cloud at once, so the deploy phase cannot run per slice. "
            f"The plan directory {plans} holds the plans of GPU hosts this inventory does not hold (gpu3): this run "
            "sees part of the fleet, as an AWX job slice does. Run it unsliced (a job template with job_slice_count "
            "1: site.yml --tags deploy;") in out, out
    assert not (tmp_path / "etc").exists() and called(calls) == []
