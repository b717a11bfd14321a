"""Bad input and faults of the passthrough_host role, each on its own sandbox host, in one playbook run.

Every host is built from a fixture (scripts/mock_sysfs.py) with one thing wrong; the role runs on all
of them at once (the tools and the reboot are recorded/simulated by tests/helpers) and each host must
fail with its own clear message naming the host and the fix, leaving no half-written file - or, where no reboot
can ever help (a virtual machine without a virtual IOMMU, no GPU), be left alone with a message saying why.
"""

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ogc_testlib import (SCRIPT_ENV, ansible_env, json_report, reboot_standin, run_playbook, sandbox_host, sandbox_host_tools,
                         write_inventory)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "helpers"))
from etcd_server import EtcdServer  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable
SUSHY_PY = os.environ.get("OGC_SUSHY_PYTHON") or PY


def fixture(name):
    return yaml.safe_load((REPO / "fixtures" / "hosts" / (name + ".yml")).read_text())


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cases():
    """host name -> (fixture dict, extra host vars)."""
    seed, intel, twin = fixture("seed-v100"), fixture("intel-pre-iommu"), fixture("console-twin")
    out = {}
    no_virt = copy.deepcopy(seed)
    no_virt["cpu"]["virtualization"] = False
    out["no-virt"] = (no_virt, {})
    # The same host with a BMC: SVM off now, switched on by the BIOS attributes the role stages; the power cycle of
    # its reboot applies them, after which the host runs as seed-v100 does (the reboot's fixture).
    out["bmc-enables-virt"] = (copy.deepcopy(no_virt), {
        "passthrough_host_bmc_bios_attributes_extra": BMC_TABLE,
        "passthrough_host_reboot_command": "AS-SEED"})
    # VT-d off in the firmware, as a tree without /sys/firmware/acpi/tables shows it (a capture taken before the
    # capture tool copied their names): the tables are unknown, so the reboot is planned and the verification after it
    # blames the firmware.
    vtd_off = copy.deepcopy(intel)
    vtd_off["firmware"] = {"iommu": False}
    del vtd_off["acpi_tables"]
    out["vtd-off"] = (vtd_off, {})
    # The same with the tables read: a firmware with VT-d off publishes no DMAR table, so no reboot is planned and the
    # host is refused before anything is written.
    vtd_off_tables = copy.deepcopy(vtd_off)
    vtd_off_tables["acpi_tables"] = ["APIC", "DSDT", "FACP"]
    out["vtd-off-tables"] = (vtd_off_tables, {})
    inactive = copy.deepcopy(intel)
    inactive["cmdline"] += " intel_iommu=on"
    del inactive["acpi_tables"]  # unknown: the refusal comes from the line alone
    out["iommu-inactive"] = (inactive, {})
    amd_off = copy.deepcopy(seed)
    amd_off["iommu"] = False
    del amd_off["acpi_tables"]  # unknown: the refusal comes from the line alone (AMD-Vi is the firmware's)
    out["amd-iommu-off"] = (amd_off, {})
    # AMD-Vi off in the firmware with the tables read (no IVRS table) is the same rule as vtd-off-tables
    # (plugins/module_utils/passthrough/settle.py, its unit tests cover both tables).
    # A cloud GPU VM with nested virtualization (vmx) and no virtual IOMMU (its ACPI tables as Firecracker's, the real
    # capture fixtures/captures/h200-vm-acpi), with a BMC address in its inventory (a copied group_vars): left alone,
    # not failed, the BMC never asked; the run goes on with the other hosts.
    vm = copy.deepcopy(intel)
    vm["cpu"]["hypervisor"] = True
    vm["acpi_tables"] = ["APIC", "DSDT", "FACP", "MCFG"]
    out["vm-no-viommu"] = (vm, {"passthrough_host_bmc_address": f"127.0.0.1:{free_port()}",
                                "passthrough_host_bmc_username": "ogc-admin",
                                "passthrough_host_bmc_password": "right-password"})
    no_grub = copy.deepcopy(seed)
    no_grub["files"] = {}
    out["no-grub"] = (no_grub, {})
    no_var = copy.deepcopy(seed)
    no_var["files"] = {"etc/default/grub": 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX=""\n'}
    out["no-variable"] = (no_var, {})
    out["bootcfg-fails"] = (copy.deepcopy(seed), {})
    out["no-reboot"] = (copy.deepcopy(twin), {"passthrough_host_allow_reboot": False})
    no_gpu = copy.deepcopy(seed)
    no_gpu["devices"] = [d for d in seed["devices"] if not d["id"].startswith("10de")]
    out["no-gpus"] = (no_gpu, {})
    out["no-gpus-expected"] = (copy.deepcopy(no_gpu), {"passthrough_host_expect_no_gpus": True})
    # GPUs, none offered: the plan selects nothing and binds nothing, which is refused unless expected.
    out["none-selected"] = (copy.deepcopy(seed), {"passthrough_policy": {"exclude": [
        d["address"] for d in seed["devices"] if d["id"].startswith("10de")]}})
    out["forced"] = (copy.deepcopy(seed), {"passthrough_policy": {"keep_on_host": ["0000:28:00.0"]}})
    # An inventory of an earlier version: the host role's own policy name is refused, not silently ignored.
    out["retired-policy"] = (copy.deepcopy(seed), {"passthrough_host_policy": {"exclude": ["0000:27:00.0"]}})
    out["bmc-unreachable"] = (copy.deepcopy(seed), {"passthrough_host_bmc_address": f"127.0.0.1:{free_port()}"})
    out["bmc-wrong-password"] = (copy.deepcopy(seed), {"passthrough_host_bmc_password": "bad-Secret-42"})
    out["initramfs-fails"] = (copy.deepcopy(seed), {})
    # The boot loader does not boot what was generated (another entry chosen): the reboot changes nothing.
    out["reboot-no-effect"] = (copy.deepcopy(seed), {"passthrough_host_reboot_command": "NO-EFFECT"})
    stale = copy.deepcopy(seed)
    stale["files"]["boot/grub/custom.cfg"] = ("menuentry 'Ubuntu' {\n\tlinux /boot/vmlinuz-5.15.0-86-generic "
                                              "root=UUID=4b1c9a4e ro quiet splash\n}\n")
    out["stale-output"] = (stale, {"passthrough_host_boot_config_output": "/boot/grub/custom.cfg"})
    out["relative-path"] = (copy.deepcopy(seed), {"passthrough_host_modprobe_file": "etc/modprobe.d/vfio.conf"})
    out["bad-batch"] = (copy.deepcopy(seed), {"passthrough_rollout_reboot_batch": "half"})
    quotes = copy.deepcopy(seed)
    quotes["files"]["etc/default/grub"] = quotes["files"]["etc/default/grub"].replace(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"', 'GRUB_CMDLINE_LINUX_DEFAULT="quiet "\'splash\'')
    out["adjacent-quotes"] = (quotes, {})
    # Constructs whose effect the editor cannot prove: another file sourced; an assignment inside a conditional.
    sourced = copy.deepcopy(seed)
    sourced["files"]["etc/default/grub"] += ". /etc/default/grub.local\n"
    sourced["files"]["etc/default/grub.local"] = 'GRUB_CMDLINE_LINUX_DEFAULT="iommu=off"\n'
    out["sourced-file"] = (sourced, {})
    conditional = copy.deepcopy(seed)
    conditional["files"]["etc/default/grub"] += 'if [ -e /etc/gpu-node ]; then\n  GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nfi\n'
    out["conditional"] = (conditional, {})
    # The GRUB file already carries the plan (edited by hand), but grub.cfg was never regenerated from it.
    hand = copy.deepcopy(seed)
    hand["files"]["etc/default/grub"] = hand["files"]["etc/default/grub"].replace(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"', 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ' + SEED_ARGS + '"')
    hand["files"]["boot/grub/grub.cfg"] = ("menuentry 'Ubuntu' {\n\tlinux /boot/vmlinuz-5.15.0-86-generic "
                                           "root=UUID=4b1c9a4e ro quiet splash\n}\n")
    out["hand-edited"] = (hand, {})
    # systemd-boot on Debian: kernel-install takes the line from /etc/kernel/cmdline, not from GRUB.
    sdboot = copy.deepcopy(seed)
    sdboot["files"]["etc/kernel/cmdline"] = "root=UUID=4b1c9a4e ro quiet splash\n"
    sdboot["files"]["boot/efi/loader/loader.conf"] = "timeout 3\n"
    out["systemd-boot"] = (sdboot, {})
    # A credential on the running kernel line (an iSCSI root): never stored or shown.
    iscsi = copy.deepcopy(seed)
    iscsi["cmdline"] += " netroot=iscsi:ogc:" + ISCSI_SECRET + "@10.0.0.5::3260::iqn.2026-01.example:gpu rd.iscsi.password=" \
        + ISCSI_SECRET
    out["iscsi-secret"] = (iscsi, {"passthrough_host_allow_reboot": False})
    # Names and paths from the inventory: a host name that is no file name, a relative plan directory.
    out["../../escape"] = (copy.deepcopy(seed), {})
    out["rack1/h1"] = (copy.deepcopy(seed), {})
    out["relative-plans"] = (copy.deepcopy(seed), {"passthrough_plan_dir": "plans"})
    # A BMC address with its scheme and a one-letter (wrong) password: the scheme is taken off, the message intact.
    out["bmc-https-short"] = (copy.deepcopy(seed), {"passthrough_host_bmc_address": "https://BMC/",
                                                    "passthrough_host_bmc_password": "e"})
    out["bmc-http"] = (copy.deepcopy(seed), {"passthrough_host_bmc_address": "http://10.0.0.21"})
    # The coordination layer's paths and secrets: a lock that would replace the state's directory, a lock or state path
    # that is a directory or a symbolic link on the host, credentials in an address, a retired variable, a duration
    # that is no number.
    out["lock-is-state-dir"] = (copy.deepcopy(seed), {"passthrough_host_lock_file": "/var/lib/open-gpu-cloud"})
    out["lock-dir-on-host"] = (copy.deepcopy(seed), {"passthrough_host_lock_file": "/var/lib/open-gpu-cloud/held.d"})
    out["state-symlink"] = (copy.deepcopy(seed), {})
    out["bmc-credentials"] = (copy.deepcopy(seed), {"passthrough_host_bmc_address": "ogc-admin:" + URL_SECRET + "@BMC"})
    out["coordination-credentials"] = (copy.deepcopy(seed), {
        "passthrough_rollout_coordination_url": "etcd3+http://root:" + URL_SECRET + "@127.0.0.1:2379"})
    out["retired-slots-dir"] = (copy.deepcopy(seed), {"passthrough_host_reboot_slots_dir": "/srv/awx/reboot-slots"})
    out["renamed-rollout-vars"] = (copy.deepcopy(seed), {"passthrough_host_reboot_batch": 2,
                                                         "passthrough_host_drain_mode": "shelve"})
    out["bad-timeout"] = (copy.deepcopy(seed), {"passthrough_host_tool_timeout": "soon"})
    return out


SEED_ARGS = "iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"
ISCSI_SECRET = "Zq8-iscsi-Secret"
URL_SECRET = "Url-Secr3t-77"
BMC_TABLE = {"sushy emulator": {"virtualization": {"SVMMode": "Enabled"}, "iommu": {"IOMMU": "Enabled"}, "sriov": {}}}


@pytest.fixture(scope="module")
def bmc(tmp_path_factory):
    """A Redfish emulator (sushy-tools) on 127.0.0.1; stopped at the end of the module."""
    workdir = tmp_path_factory.mktemp("bmc")
    port = free_port()
    log = open(workdir / "bmc.log", "w", encoding="utf-8")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [SUSHY_PY, str(REPO / "tests" / "standins" / "redfish_emulator.py"), "--dir", str(workdir), "--port", str(port),
         "--user", "ogc-admin", "--password", "right-password", "--lifetime", "2400"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail(f"the Redfish emulator did not start: {(workdir / 'bmc.log').read_text()}")
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    """A real coordination service, for the advice "give the address alone"."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def run(tmp_path_factory, bmc, etcd):
    base = tmp_path_factory.mktemp("faults")
    hosts = {}
    originals = {}
    for name, (fix, extra) in cases().items():
        safe = safe_name(name)
        root, state = base / "roots" / safe, base / "state" / safe
        state.mkdir(parents=True)
        fixture_path = base / (safe + ".yml")
        fixture_path.write_text(yaml.safe_dump(fix))
        subprocess.run([PY, str(REPO / "scripts" / "mock_sysfs.py"), "build", str(fixture_path), str(root)], check=True,
                       env=SCRIPT_ENV)
        # The plan role runs first (as in site.yml) and writes the plan the host role loads.
        hostvars = sandbox_host(root, base / "plans", passthrough_show_report=False,
                                **sandbox_host_tools(root, state / "calls.jsonl", fixture_path))
        if name.startswith("bmc-"):
            hostvars.update(passthrough_host_bmc_address=bmc, passthrough_host_bmc_username="ogc-admin",
                            passthrough_host_bmc_password="right-password", passthrough_host_bmc_validate_certs=False,
                            passthrough_host_bmc_timeout=5)
        hostvars.update(extra)
        if hostvars.get("passthrough_host_bmc_address") == "https://BMC/":
            hostvars["passthrough_host_bmc_address"] = f"https://{bmc}/"
        if hostvars["passthrough_host_reboot_command"] == "AS-SEED":
            after = base / (safe + "-after-reboot.yml")
            after.write_text(yaml.safe_dump(fixture("seed-v100")))
            hostvars["passthrough_host_reboot_command"] = reboot_standin(after, root)
        if hostvars["passthrough_host_reboot_command"] == "NO-EFFECT":
            hostvars["passthrough_host_reboot_command"] = [
                "sh", "-c", 'mkdir -p "$1/proc/sys/kernel/random" && '
                            'cat /proc/sys/kernel/random/uuid > "$1/proc/sys/kernel/random/boot_id" && '
                            'echo reboot >> "$1/.simulated-reboots"', "reboot", str(root)]
        hosts[name] = hostvars
        grub = root / "etc" / "default" / "grub"
        originals[name] = grub.read_text() if grub.exists() else None
    # An operator's tighter modes: the plan directory 0700, a plan file 0600 (rewritten by this run).
    (base / "plans").mkdir(mode=0o700)
    (base / "plans").chmod(0o700)
    (base / "plans" / "no-virt.json").write_text("{}\n")
    (base / "plans" / "no-virt.json").chmod(0o600)
    (base / "state" / "bootcfg-fails" / "fail-update-grub").write_text("/usr/sbin/grub-mkconfig: error: no such device: root.\n")
    (base / "state" / "initramfs-fails" / "fail-update-initramfs").write_text("E: /usr/share/initramfs-tools/hooks/x failed\n")
    lib = base / "roots" / "lock-dir-on-host" / "var/lib/open-gpu-cloud"
    (lib / "held.d").mkdir(parents=True)
    lib = base / "roots" / "state-symlink" / "var/lib/open-gpu-cloud"
    lib.mkdir(parents=True)
    os.symlink("passthrough_host.real", lib / "passthrough_host.json")

    def save_inventory():
        # No fleet-wide slots: every host of the waves' play runs at once, to its own end (no serial, no stop).
        write_inventory(base / "inventory.yml", hosts, {"passthrough_rollout_coordination_url": ""})

    save_inventory()
    playbook = base / "play.yml"
    # As playbooks/host.yml (after plan.yml): the first play checks the rollout's variables, configures every host and
    # leaves the reboots to the waves; the second reboots, verifies and plans again. Without serial and
    # max_fail_percentage, so that each host's fault runs to its own end instead of stopping the others.
    check = {"name": "Check the rollout's variables",
             "ansible.builtin.include_role": {"name": "open_gpu_cloud.toolkit.passthrough_rollout", "tasks_from": "check"}}
    plan = {"name": "Plan the reboot waves",
            "ansible.builtin.include_role": {"name": "open_gpu_cloud.toolkit.passthrough_rollout", "tasks_from": "plan"}}
    replan = {"name": "Plan the rebooted host again",
              "ansible.builtin.include_role": {"name": "open_gpu_cloud.toolkit.passthrough", "tasks_from": "replan"},
              "when": "not ansible_check_mode"}
    playbook.write_text(yaml.safe_dump([
        {"name": "Faults", "hosts": "gpu_hosts", "gather_facts": False, "pre_tasks": [check],
         "roles": [{"role": "open_gpu_cloud.toolkit.passthrough"},
                   {"role": "open_gpu_cloud.toolkit.passthrough_host", "vars": {"passthrough_host_defer_reboot": True}}],
         "post_tasks": [plan]},
        {"name": "Faults in the waves", "hosts": "{{ groups['passthrough_rollout_wave'] | default([]) }}",
         "gather_facts": False, "roles": [{"role": "open_gpu_cloud.toolkit.passthrough_rollout"}], "post_tasks": [replan]}]))
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_ROLES_PATH=str(REPO / "roles"),
                      ANSIBLE_PIPELINING="True", ANSIBLE_FORKS="12")

    def play(*extra):
        proc = run_playbook("-i", base / "inventory.yml", playbook, *extra, cwd=base, env=env, timeout=900)
        # The json callback's document; ansible.cfg's aggregate callbacks may print around it.
        report = json_report(proc.stdout)
        assert report is not None, f"ansible-playbook printed no JSON (rc {proc.returncode}): {proc.stderr[-3000:]}"
        failures = {}
        changed = {}
        for play_report in report["plays"]:
            for task in play_report["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("changed"):
                        changed.setdefault(host, []).append(task["task"]["name"])
                    # The last failure stopped the host (a rescue's fail says what happened), but for the rollout's
                    # own stop, which repeats the failure before it naming the wave.
                    if result.get("failed") and task["task"]["name"] != "open_gpu_cloud.toolkit.passthrough_rollout : Stop the rollout":
                        # A looped task's message is its failed item's.
                        msg = next((item.get("msg", "") for item in result.get("results", []) if item.get("failed")),
                                   result.get("msg", ""))
                        failures[host] = (task["task"]["name"], msg)
        report["changed_tasks"] = changed
        return proc, report, failures

    proc, report, failures = play()
    after_first = {name: {"rebooted": (base / "roots" / name / ".simulated-reboots").exists(),
                          "state": json.loads(state.read_text()) if state.exists() else None}
                   for name in ("initramfs-fails", "reboot-no-effect")
                   for state in [base / "roots" / name / "var/lib/open-gpu-cloud/passthrough_host.json"]}
    # The next run: the failed initramfs tool works again; the host whose reboot had no effect is run again.
    (base / "state" / "initramfs-fails" / "fail-update-initramfs").unlink()
    second = {}
    _, second["report"], second["failures"] = play("--limit", "initramfs-fails,reboot-no-effect")
    locks_after = {name: (root_path(base, name) / "var/lib/open-gpu-cloud").exists() and sorted(
        p.name for p in (root_path(base, name) / "var/lib/open-gpu-cloud").iterdir() if p.name.endswith(".lock"))
        for name in hosts}

    # What the first two runs left, kept for the tests of their refusals (the advice below changes the hosts).
    snapshot = base / "before-advice"
    for part in ("roots", "state", "plans"):
        shutil.copytree(base / part, snapshot / part, symlinks=True)

    # The advice of every refusal, followed as the operator would (ADVICE), then one run of the play over those hosts
    # - and a further run over the hosts the advice left unlike the demo's seed host (AFTER_ADVICE_UNLIKE_SEED), which
    # must change nothing and run no tool.
    advised, reboots_before = {}, {}
    for name in sorted(set(failures) | set(second["failures"])):
        if name == "initramfs-fails":
            continue  # its advice (fix the tool, run again) was the second run
        new_name = ADVICE[name](Ctx(base, name, hosts, bmc, etcd.url))
        advised[name] = new_name if isinstance(new_name, str) else name  # a renamed host
        reboots_before[advised[name]] = simulated_reboots(root_path(base, name))
    save_inventory()
    # A host pointed at a coordination service runs apart: the waves' play here has no serial, so its whole batch
    # would ask for one wave's slots.
    apart = [n for n in advised.values() if hosts[n].get("passthrough_rollout_coordination_url")]
    advice = {"failures": {}, "changed_tasks": {}}
    for names in ([n for n in advised.values() if n not in apart], *([n] for n in apart)):
        _, report_, failures_ = play("--limit", ",".join(names))
        advice["failures"].update(failures_)
        for host, tasks in report_["changed_tasks"].items():
            advice["changed_tasks"].setdefault(host, []).extend(tasks)
    original = {new: old for old, new in advised.items()}
    calls_before = {name: calls_at(base, original.get(name, name)) for name in hosts}
    further = {}
    assert set(AFTER_ADVICE_UNLIKE_SEED) <= set(advised.values()) | {"initramfs-fails"}, AFTER_ADVICE_UNLIKE_SEED
    _, further["report"], further["failures"] = play("--limit", ",".join(AFTER_ADVICE_UNLIKE_SEED))
    yield {"base": snapshot, "live": base, "failures": failures, "stats": report["stats"], "originals": originals,
           "proc": proc,
           "changed_tasks": report["changed_tasks"], "second": second, "after_first": after_first,
           "locks_after": locks_after, "advised": advised, "advice": advice, "further": further,
           "reboots_before": reboots_before, "calls_before": calls_before}
    shutil.rmtree(base, ignore_errors=True)


def root_path(base, name):
    return base / "roots" / safe_name(name)


def simulated_reboots(root):
    path = root / ".simulated-reboots"
    return len(path.read_text().splitlines()) if path.exists() else 0


def calls_at(base, name):
    path = base / "state" / safe_name(name) / "calls.jsonl"
    return path.read_text() if path.exists() else ""


class Ctx:
    """What following one refusal's advice touches: the host's variables, its sandbox root and fixture, the BMC."""

    def __init__(self, base, name, hosts, bmc, etcd_url):
        self.base, self.name, self.hosts, self.bmc, self.etcd_url = base, name, hosts, bmc, etcd_url
        self.vars = hosts[name]
        self.root = root_path(base, name)
        self.fixture = base / (safe_name(name) + ".yml")

    def set(self, **values):
        self.vars.update(values)

    def unset(self, *names):
        for name in names:
            self.vars.pop(name, None)

    def firmware(self, change):
        """Change a setting in the firmware setup (the fixture the next boot reads), then reboot the host by hand."""
        fix = yaml.safe_load(self.fixture.read_text())
        change(fix)
        self.fixture.write_text(yaml.safe_dump(fix))
        subprocess.run(reboot_standin(self.fixture, self.root), check=True)

    def grub(self, text):
        path = self.root / "etc/default/grub"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def rename(self, new):
        """Rename the host in the inventory (its address, here its sandbox, stays)."""
        self.hosts[new] = self.hosts.pop(self.name)
        return new

    def bmc_right(self, address=None):
        self.set(passthrough_host_bmc_address=address or self.bmc, passthrough_host_bmc_username="ogc-admin",
                 passthrough_host_bmc_password="right-password", passthrough_host_bmc_bios_attributes_extra=BMC_TABLE)


SEED_GRUB = yaml.safe_load((REPO / "fixtures" / "hosts" / "seed-v100.yml").read_text())["files"]["etc/default/grub"]


def _seed_reboot(ctx):
    ctx.set(passthrough_host_reboot_command=reboot_standin(ctx.fixture, ctx.root))


# What each refusal's message tells the operator to do, done (the message's words are checked by the tests above).
ADVICE = {
    "no-virt": lambda c: c.firmware(lambda f: f["cpu"].update(virtualization=True)),
    "vtd-off": lambda c: c.firmware(lambda f: f.update(firmware={"iommu": True})),
    "iommu-inactive": lambda c: c.firmware(lambda f: f.update(firmware={"iommu": True}, iommu=True)),
    "amd-iommu-off": lambda c: c.firmware(lambda f: f.update(iommu=True)),
    "no-grub": lambda c: c.grub(SEED_GRUB),
    "no-variable": lambda c: c.set(passthrough_host_grub_variable="GRUB_CMDLINE_LINUX"),
    "bootcfg-fails": lambda c: (c.base / "state" / "bootcfg-fails" / "fail-update-grub").unlink(),
    "no-reboot": lambda c: c.set(passthrough_host_allow_reboot=True),
    "none-selected": lambda c: c.set(passthrough_host_expect_no_gpus=True),
    # Enabling the IOMMU in the firmware setup makes the firmware publish its table (DMAR, IVRS).
    "vtd-off-tables": lambda c: c.firmware(lambda f: f.update(firmware={"iommu": True},
                                                              acpi_tables=["APIC", "DMAR", "DSDT", "FACP"])),
    "forced": lambda c: c.set(passthrough_policy={"keep_on_host": ["0000:28:00.0"], "exclude": ["0000:27:00.0"]}),
    "retired-policy": lambda c: (c.unset("passthrough_host_policy"),
                                 c.set(passthrough_policy={"exclude": ["0000:27:00.0"]})),
    "bmc-unreachable": lambda c: c.bmc_right(),
    "bmc-wrong-password": lambda c: c.bmc_right(),
    "bmc-https-short": lambda c: c.bmc_right(f"https://{c.bmc}/"),
    "bmc-http": lambda c: c.bmc_right(),
    "bmc-credentials": lambda c: c.bmc_right(),
    # The boot loader now boots the generated entry; the configuration did not change, so the state file goes.
    "reboot-no-effect": lambda c: (_seed_reboot(c), (c.root / STATE).unlink()),
    "stale-output": lambda c: c.unset("passthrough_host_boot_config_output"),
    "relative-path": lambda c: c.set(passthrough_host_modprobe_file="/etc/modprobe.d/vfio.conf"),
    "bad-batch": lambda c: c.set(passthrough_rollout_reboot_batch=1),
    "adjacent-quotes": lambda c: c.grub(SEED_GRUB),
    "sourced-file": lambda c: c.grub(SEED_GRUB),
    "conditional": lambda c: c.grub(SEED_GRUB),
    "systemd-boot": lambda c: c.set(passthrough_host_boot_loader="grub"),
    "iscsi-secret": lambda c: c.set(passthrough_host_allow_reboot=True),
    "../../escape": lambda c: c.rename("escape"),
    "rack1/h1": lambda c: c.rename("rack1-h1"),
    "relative-plans": lambda c: c.set(passthrough_plan_dir=str(c.base / "plans")),
    "lock-is-state-dir": lambda c: c.unset("passthrough_host_lock_file"),
    "lock-dir-on-host": lambda c: c.unset("passthrough_host_lock_file"),
    "state-symlink": lambda c: c.set(passthrough_host_state_file="/var/lib/open-gpu-cloud/passthrough_host-own.json"),
    "coordination-credentials": lambda c: c.set(passthrough_rollout_coordination_url=c.etcd_url),
    "retired-slots-dir": lambda c: c.unset("passthrough_host_reboot_slots_dir"),
    "renamed-rollout-vars": lambda c: (c.unset("passthrough_host_reboot_batch", "passthrough_host_drain_mode"),
                                       c.set(passthrough_rollout_reboot_batch=2, passthrough_rollout_drain_mode="shelve")),
    "bad-timeout": lambda c: c.unset("passthrough_host_tool_timeout"),
}
STATE = "var/lib/open-gpu-cloud/passthrough_host.json"
# After its advice most hosts are the seed V100 host with the demo's settings (its firmware or GRUB file put right, a
# variable set as the demo sets it, a name that is a file name): that such a host changes nothing on a further run is
# what the end-to-end test's second site.yml run proves on the seed host itself. These hosts are left configured
# otherwise (another GRUB variable, state file or policy, no GPU expected, their own reboot, a coordination service,
# a tool that failed once), so the further run covers them. A further run over every host cost a quarter of this
# file's CPU (bench/README.md, "Test command, stage by stage").
AFTER_ADVICE_UNLIKE_SEED = ("no-variable", "state-symlink", "forced", "none-selected", "reboot-no-effect",
                            "initramfs-fails", "bootcfg-fails", "coordination-credentials", "stale-output",
                            "systemd-boot", "relative-path")


def safe_name(name):
    """The directory of a case's sandbox (inventory names with '/' or '.' are cases too)."""
    return name.replace("/", "_").replace(".", "_")


def root_of(run, name):
    return run["base"] / "roots" / safe_name(name)


def failure(run, name):
    assert name in run["failures"], f"{name} did not fail: {run['stats'].get(name)}"
    return run["failures"][name][1]


def nothing_written(run, name):
    root = root_of(run, name)
    for rel in ("etc/modprobe.d/vfio.conf", "etc/modules-load.d/vfio.conf", "etc/initramfs-tools/modules"):
        assert not (root / rel).exists(), rel
    assert not (run["base"] / "state" / safe_name(name) / "calls.jsonl").exists()
    grub = root / "etc" / "default" / "grub"
    assert (grub.read_text() if grub.exists() else None) == run["originals"][name]


def test_no_cpu_virtualization(run):
    msg = failure(run, "no-virt")
    assert msg.startswith("no-virt: ") and "Enable SVM Mode (AMD) / VT-x (Intel) in the firmware setup" in msg
    nothing_written(run, "no-virt")


def test_iommu_still_off_after_the_reboot_blames_the_firmware(run):
    msg = failure(run, "vtd-off")
    assert msg.startswith("vtd-off: the IOMMU is still inactive after booting with")
    assert "intel_iommu=on" in msg and "enable AMD-Vi/IOMMU or VT-d in the firmware setup" in msg
    assert len((root_of(run, "vtd-off") / ".simulated-reboots").read_text().splitlines()) == 1


def test_iommu_off_although_the_running_cmdline_asks_for_it(run):
    msg = failure(run, "iommu-inactive")
    assert msg.startswith("iommu-inactive: the IOMMU is inactive") and "already asks for it" in msg
    assert "Enable AMD-Vi/IOMMU or VT-d in the firmware setup" in msg
    nothing_written(run, "iommu-inactive")


def test_amd_iommu_off_in_the_firmware_is_refused_before_any_reboot(run):
    msg = failure(run, "amd-iommu-off")
    assert "on AMD the firmware switches it on and nothing on the running command line turns it off" in msg
    assert "Enable AMD-Vi/IOMMU or VT-d in the firmware setup" in msg
    nothing_written(run, "amd-iommu-off")


def test_missing_grub_file(run):
    msg = failure(run, "no-grub")
    assert msg.startswith("no-grub: ") and "/etc/default/grub does not exist" in msg
    assert "passthrough_host_grub_path" in msg
    nothing_written(run, "no-grub")


def test_missing_cmdline_variable(run):
    msg = failure(run, "no-variable")
    assert "no line assigns GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub" in msg
    assert "passthrough_host_grub_variable" in msg
    nothing_written(run, "no-variable")


def test_failing_boot_config_restores_the_backup(run):
    msg = failure(run, "bootcfg-fails")
    assert msg.startswith("bootcfg-fails: ") and "update-grub failed (rc 1: /usr/sbin/grub-mkconfig: error: no such device" in msg
    assert "restored from the backups" in msg and "still boots with its previous kernel command line" in msg
    assert "stays pending" in msg
    root = root_of(run, "bootcfg-fails")
    assert json.loads((root / "var/lib/open-gpu-cloud/passthrough_host.json").read_text())["pending"] == ["boot_config"]
    assert (root / "etc/default/grub").read_text() == run["originals"]["bootcfg-fails"]
    assert not (root / "etc/modprobe.d/vfio.conf").exists()       # stopped before the vfio phase
    assert not (root / ".simulated-reboots").exists()


def test_reboot_not_allowed_lists_what_is_pending(run):
    msg = failure(run, "no-reboot")
    assert "a reboot is needed and passthrough_host_allow_reboot is false" in msg
    assert "kernel command line lacks iommu=pt" in msg and "0000:0b:00.0 is on nvidia, not vfio-pci" in msg
    root = root_of(run, "no-reboot")
    assert "iommu=pt" in (root / "etc/default/grub").read_text()          # configuration complete
    assert (root / "usr/local/sbin/vfio-pci-bind").exists()
    assert not (root / ".simulated-reboots").exists()


def left_alone(run, name):
    """The host ran green, nothing was written there and it was not rebooted; returns its left-alone message."""
    assert name not in run["failures"], run["failures"].get(name)
    nothing_written(run, name)
    assert not (root_of(run, name) / ".simulated-reboots").exists()
    assert not (root_of(run, name) / "var/lib/open-gpu-cloud/passthrough_host.json").exists()
    # The plan role's plan file on the control host is its only change.
    assert [t for t in run["changed_tasks"].get(name, []) if not t.endswith("Create the plan directory on the control host")] \
        == ["open_gpu_cloud.toolkit.passthrough : Write the plan file on the control host"]
    report = json_report(run["proc"].stdout)
    found = [result.get("msg", "") for play in report["plays"] for task in play["tasks"]
             if task["task"]["name"].endswith("Leave the host alone, saying why and what to do first")
             for host, result in task["hosts"].items() if host == name and not result.get("skipped")]
    assert len(found) == 1, f"no left-alone message for {name}"
    assert found[0].startswith(name) and "left alone - nothing is written on this host and it is not rebooted" in found[0]
    return found[0]


def test_a_host_without_a_gpu_is_left_alone_whatever_the_inventory_says(run):
    for name in ("no-gpus", "no-gpus-expected"):
        msg = left_alone(run, name)
        assert "[no_gpu] The host has no GPU for passthrough" in msg and "remove it from gpu_hosts" in msg


def test_plan_selecting_nothing_is_refused_unless_expected(run):
    msg = failure(run, "none-selected")
    assert "the plan selects no device for passthrough" in msg and "passthrough_host_expect_no_gpus: true" in msg
    nothing_written(run, "none-selected")


def test_a_vm_without_a_virtual_iommu_is_left_alone_and_the_run_goes_on(run):
    msg = left_alone(run, "vm-no-viommu")  # its inventory's BMC (nothing listens there) is never asked
    assert msg.startswith("vm-no-viommu (GPU 0000:18:00.0, 0000:3b:00.0): left alone")
    assert "[vm_without_iommu] This host is a virtual machine" in msg and "no DMAR or IVRS table" in msg
    assert "give the virtual machine a virtual IOMMU" in msg


def test_an_iommu_the_firmware_does_not_offer_is_refused_before_any_reboot(run):
    msg = failure(run, "vtd-off-tables")
    assert msg.startswith("vtd-off-tables: the IOMMU is inactive (no /sys/kernel/iommu_groups) and a reboot cannot "
                          "change that: the firmware's ACPI tables (/sys/firmware/acpi/tables) have no DMAR or IVRS table")
    assert "Enable AMD-Vi/IOMMU or VT-d in the firmware setup" in msg
    nothing_written(run, "vtd-off-tables")
    assert not (root_of(run, "vtd-off-tables") / ".simulated-reboots").exists()


def test_device_kept_on_host_that_the_plan_needs(run):
    msg = failure(run, "forced")
    assert "keep_on_host (0000:28:00.0)" in msg and "0000:27:00.0 cannot go to Nova" in msg
    assert "remove the device from keep_on_host" in msg and "passthrough_policy.exclude" in msg
    nothing_written(run, "forced")


def test_retired_policy_variable_is_refused(run):
    msg = failure(run, "retired-policy")
    assert msg.startswith("Host retired-policy: passthrough_host_policy is no longer read")
    assert "Rename passthrough_host_policy to passthrough_policy in the inventory" in msg
    assert "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit retired-policy" in msg
    assert not (run["base"] / "plans" / "retired-policy.json").exists()
    nothing_written(run, "retired-policy")


def test_bad_reboot_batch_is_refused_before_anything_is_written(run):
    msg = failure(run, "bad-batch")
    assert msg.startswith("bad-batch: passthrough_rollout_reboot_batch='half' must be a percentage from 1% to 100%")
    nothing_written(run, "bad-batch")


def test_bios_attributes_that_switch_on_virtualization_are_staged_and_applied_by_the_reboot(run):
    name = "bmc-enables-virt"
    assert name not in run["failures"], run["failures"].get(name)
    changed = run["changed_tasks"][name]
    # Staged before the files, applied by the reboot's power cycle after them; the OS reboot for what still lacked.
    order = [next((i for i, task in enumerate(changed) if task.startswith(prefix)), None)
             for prefix in ("open_gpu_cloud.toolkit.passthrough_host : Stage the BIOS attributes that differ",
                            "open_gpu_cloud.toolkit.passthrough_host : Write the vfio files",
                            "open_gpu_cloud.toolkit.passthrough_host : Power-cycle through the BMC",
                            "open_gpu_cloud.toolkit.passthrough_host : Reboot through passthrough_host_reboot_command")]
    assert None not in order and order == sorted(order), changed
    assert len((root_of(run, name) / ".simulated-reboots").read_text().splitlines()) == 1
    assert "svm" in (root_of(run, name) / "proc" / "cpuinfo").read_text()


def test_bmc_unreachable(run):
    msg = failure(run, "bmc-unreachable")
    assert "cannot be reached over HTTPS (Redfish)" in msg and "passthrough_host_bmc_address" in msg
    nothing_written(run, "bmc-unreachable")


def test_bmc_wrong_password(run):
    msg = failure(run, "bmc-wrong-password")
    assert "refused the user ogc-admin (HTTP 401): wrong user or password" in msg
    assert "bad-Secret-42" not in json.dumps(run["failures"]) and "bad-Secret-42" not in run["proc"].stdout
    nothing_written(run, "bmc-wrong-password")


def state_of(run, name):
    return json.loads((root_of(run, name) / "var/lib/open-gpu-cloud/passthrough_host.json").read_text())


def calls(run, name):
    log = run["base"] / "state" / safe_name(name) / "calls.jsonl"
    return [json.loads(line)["name"] for line in log.read_text().splitlines()] if log.exists() else []


def test_failed_initramfs_is_remembered_and_retried(run):
    msg = failure(run, "initramfs-fails")
    # The command as configured (the sandbox's recorder in front of update-initramfs), its rc and the tool's error.
    assert msg.startswith("initramfs-fails: "), msg
    assert " update-initramfs -u -k all failed (rc 1: E: /usr/share/initramfs-tools/hooks/x failed). The host was " \
        "not rebooted;" in msg, msg
    assert "stays pending" in msg and "/var/lib/open-gpu-cloud/passthrough_host.json" in msg
    first = run["after_first"]["initramfs-fails"]
    assert first["rebooted"] is False and first["state"]["pending"] == ["initramfs"]
    # The second run changes no input file, yet repeats the rebuild, then reboots and verifies.
    assert "initramfs-fails" not in run["second"]["failures"], run["second"]["failures"].get("initramfs-fails")
    assert calls(run, "initramfs-fails").count("update-initramfs") == 1      # the successful run
    assert len((root_of(run, "initramfs-fails") / ".simulated-reboots").read_text().splitlines()) == 1
    state = state_of(run, "initramfs-fails")
    assert state["pending"] == [] and state["reboot"] is None and state["generated_from"].startswith("sha256:")


def test_reboot_without_effect_is_not_repeated(run):
    root = root_of(run, "reboot-no-effect")
    assert "reboot-no-effect" in run["failures"]                              # verification after the first reboot
    first = run["after_first"]["reboot-no-effect"]
    assert first["rebooted"] is True and first["state"]["reboot"]["fingerprint"]
    msg = run["second"]["failures"]["reboot-no-effect"][1]
    assert msg.startswith("reboot-no-effect: the host was already rebooted (from boot ")
    assert "still lacks it" in msg and "kernel command line lacks iommu=pt" in msg
    assert "/boot/grub/grub.cfg default entry" in msg and "it reboots again only when the configuration changes" in msg
    assert len((root / ".simulated-reboots").read_text().splitlines()) == 1


def test_generated_configuration_without_the_plan_is_not_rebooted(run):
    msg = failure(run, "stale-output")
    assert msg.startswith("stale-output: the boot configuration the tool generated does not carry the planned "
                          "arguments: /boot/grub/custom.cfg default entry lacks iommu=pt")
    assert "The GRUB files give them (GRUB_CMDLINE_LINUX from /etc/default/grub line" in msg
    assert "GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub line" in msg
    assert "has run on them since they last changed, yet /boot/grub/custom.cfg lacks them: something outside the " \
           "files overrides them" in msg
    assert not (root_of(run, "stale-output") / ".simulated-reboots").exists()


def test_relative_path_variable_is_refused(run):
    msg = failure(run, "relative-path")
    assert msg == ("relative-path: passthrough_host_modprobe_file (etc/modprobe.d/vfio.conf) is not an absolute path. "
                   "Give every passthrough_host_* path as it is on the host, starting with / (e.g. /etc/default/grub); "
                   "the role puts passthrough_host_root in front of it.")
    nothing_written(run, "relative-path")
    assert not (run["live"] / "etc").exists()


def test_adjacent_quoting_is_refused_with_the_line(run):
    msg = failure(run, "adjacent-quotes")
    assert msg.startswith("adjacent-quotes: /etc/default/grub line ")
    assert "adjacent quoting or text after the closing quote" in msg
    nothing_written(run, "adjacent-quotes")


def test_a_sourced_file_is_refused_with_file_line_and_text_before_anything_is_written(run):
    msg = failure(run, "sourced-file")
    assert msg.startswith("sourced-file: /etc/default/grub line 12 (. /etc/default/grub.local): sources another file, "
                          "whose assignments the editor cannot follow"), msg
    nothing_written(run, "sourced-file")


def test_a_conditional_assignment_is_refused_with_file_line_and_text(run):
    msg = failure(run, "conditional")
    assert msg.startswith("conditional: /etc/default/grub line 13 (GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"): "
                          "GRUB_CMDLINE_LINUX_DEFAULT is assigned inside a compound command"), msg
    nothing_written(run, "conditional")


def test_a_hand_edited_grub_file_with_a_stale_grub_cfg_is_regenerated_not_stuck(run):
    # The files already give the plan, so nothing is edited; the tool runs because what it generated lacks them.
    assert "hand-edited" not in run["failures"], run["failures"].get("hand-edited")
    assert calls(run, "hand-edited").count("update-grub") == 1
    assert len((root_of(run, "hand-edited") / ".simulated-reboots").read_text().splitlines()) == 1
    assert (root_of(run, "hand-edited") / "etc/default/grub").read_text() == run["originals"]["hand-edited"]


def test_a_host_booting_through_systemd_boot_is_refused_before_any_write_or_reboot(run):
    msg = failure(run, "systemd-boot")
    assert msg.startswith("systemd-boot: this host does not boot through GRUB's defaults: kernel-install / "
                          "systemd-boot, which takes the kernel command line from /etc/kernel/cmdline"), msg
    assert "systemd-boot (/boot/efi/loader/loader.conf exists)" in msg and "passthrough_host_boot_loader: grub" in msg
    assert "iommu=pt" in msg                                       # the arguments to give it by hand
    nothing_written(run, "systemd-boot")
    assert not (root_of(run, "systemd-boot") / ".simulated-reboots").exists()


def test_a_credential_on_the_kernel_line_is_never_stored_or_shown(run):
    plan_file = (run["base"] / "plans" / "iscsi-secret.json").read_text()
    assert ISCSI_SECRET not in plan_file and ISCSI_SECRET not in run["proc"].stdout + run["proc"].stderr
    facts = json.loads(plan_file)["facts"]["kernel_cmdline"]
    assert "netroot=iscsi:ogc:********@10.0.0.5::3260::iqn.2026-01.example:gpu" in facts
    assert "rd.iscsi.password=********" in facts
    assert "a reboot is needed and passthrough_host_allow_reboot is false" in failure(run, "iscsi-secret")


def test_host_names_that_are_not_file_names_are_refused(run):
    msg = failure(run, "../../escape")
    assert msg.startswith("Host '../../escape': the inventory host name '../../escape' holds a '/'"), msg
    assert "Rename the host in the inventory" in msg
    assert not (run["live"].parent / "escape.json").exists() and not (run["live"] / "escape.json").exists()
    msg = failure(run, "rack1/h1")
    assert msg.startswith("Host 'rack1/h1': the inventory host name 'rack1/h1' holds a '/'"), msg
    assert not (run["base"] / "plans" / "rack1").exists()
    nothing_written(run, "../../escape")


def test_a_relative_plan_directory_is_refused(run):
    msg = failure(run, "relative-plans")
    assert "relative-plans: passthrough_plan_dir ('plans') is not an absolute path" in msg, msg
    assert not (run["base"] / "plans" / "relative-plans.json").exists()


def test_a_bmc_address_with_https_is_used_and_a_short_password_does_not_garble_the_message(run):
    msg = failure(run, "bmc-https-short")
    assert "refused the user ogc-admin (HTTP 401): wrong user or password" in msg, msg
    assert "cannot be reached" not in msg and "https://https" not in msg
    msg = failure(run, "bmc-http")
    assert "bmc-http: passthrough_host_bmc_address (http://10.0.0.21) uses http://" in msg, msg
    nothing_written(run, "bmc-http")


def test_every_way_out_gives_the_host_s_lock_back(run):
    """Refused in the first play (before or after its plan was loaded, its reboot needed and allowed), failed in the
    waves, or done: no host keeps a lock once the run has ended on it."""
    assert len(run["failures"]) >= 30
    held = {name: locks for name, locks in run["locks_after"].items() if locks}
    assert held == {}


def test_a_lock_that_would_replace_the_state_s_directory_is_refused_naming_the_variable(run):
    msg = failure(run, "lock-is-state-dir")
    assert msg.startswith("lock-is-state-dir: passthrough_host_lock_file (/var/lib/open-gpu-cloud) is a directory "
                          "of passthrough_host_state_file (/var/lib/open-gpu-cloud/passthrough_host.json)"), msg
    nothing_written(run, "lock-is-state-dir")


def test_a_lock_or_state_path_that_is_a_directory_or_a_symlink_on_the_host_is_refused_before_any_write(run):
    msg = failure(run, "lock-dir-on-host")
    assert msg.startswith("lock-dir-on-host: passthrough_host_lock_file (/var/lib/open-gpu-cloud/held.d) is a "
                          "directory on the host, not a file: nothing was written."), msg
    nothing_written(run, "lock-dir-on-host")
    msg = failure(run, "state-symlink")
    assert msg.startswith("state-symlink: passthrough_host_state_file (/var/lib/open-gpu-cloud/passthrough_host.json) "
                          "is a symlink on the host, not a file"), msg
    nothing_written(run, "state-symlink")


def test_credentials_in_an_address_are_refused_and_never_shown(run):
    assert "passthrough_host_bmc_address (********@BMC) must be the BMC's host[:port]" in failure(run, "bmc-credentials")
    msg = failure(run, "coordination-credentials")
    assert msg.startswith("coordination-credentials: passthrough_rollout_coordination_url carries credentials"), msg
    text = json.dumps(run["failures"]) + run["proc"].stdout + run["proc"].stderr
    assert URL_SECRET not in text
    nothing_written(run, "bmc-credentials")
    nothing_written(run, "coordination-credentials")


def test_the_retired_slot_directory_and_a_duration_that_is_no_number_are_refused(run):
    msg = failure(run, "retired-slots-dir")
    assert "passthrough_host_reboot_slots_dir is no longer read" in msg and "Remove passthrough_host_reboot_slots_dir" in msg
    # The role's argument specification refuses it first, naming it (a wrong type is refused, not converted).
    msg = failure(run, "bad-timeout")
    assert "passthrough_host_tool_timeout" in msg and "'soon'" in msg and "cannot be converted to an int" in msg
    nothing_written(run, "retired-slots-dir")
    nothing_written(run, "bad-timeout")


def test_the_rollout_s_old_variable_names_are_refused_naming_the_new_ones(run):
    msg = failure(run, "renamed-rollout-vars")
    assert msg.startswith("renamed-rollout-vars: passthrough_host_drain_mode, passthrough_host_reboot_batch are no "
                          "longer read"), msg
    assert ("passthrough_host_drain_mode -> passthrough_rollout_drain_mode, "
            "passthrough_host_reboot_batch -> passthrough_rollout_reboot_batch") in msg, msg
    nothing_written(run, "renamed-rollout-vars")


@pytest.mark.parametrize("name", sorted(set(ADVICE) | {"initramfs-fails"}))
def test_following_each_refusal_s_advice_converges_the_host(run, name):
    """The refusal's advice, followed (ADVICE), then the play again: the host converges - no failure, at most the one
    reboot its configuration needs, nothing pending, its lock given back - and, for a host the advice left unlike the
    seed host (AFTER_ADVICE_UNLIKE_SEED), a further run changes nothing and runs no tool (so each tool ran after the
    last change of its inputs)."""
    host = run["advised"].get(name, name)
    assert name in run["failures"] or name in run["second"]["failures"], f"{name} was never refused"
    assert host not in run["advice"]["failures"], run["advice"]["failures"].get(host)
    root = root_path(run["live"], name)
    if name in run["reboots_before"]:
        assert simulated_reboots(root) - run["reboots_before"][host] <= 1
    if host in AFTER_ADVICE_UNLIKE_SEED:
        assert host not in run["further"]["failures"], run["further"]["failures"].get(host)
        assert run["further"]["report"]["stats"][host]["changed"] == 0, run["further"]["report"]["changed_tasks"].get(host)
        assert calls_at(run["live"], name) == run["calls_before"][host]
    state_name = "passthrough_host-own.json" if name == "state-symlink" else "passthrough_host.json"
    state = root / "var/lib/open-gpu-cloud" / state_name
    if state.exists():
        record = json.loads(state.read_text())
        assert record["pending"] == [] and record["reboot"] is None
    assert not [p for p in (root / "var/lib/open-gpu-cloud").glob("*.lock")] if (root / "var/lib").exists() else True


def test_the_operators_modes_of_the_plan_directory_and_files_are_kept(run):
    assert (run["base"] / "plans").stat().st_mode & 0o777 == 0o700
    plan = run["base"] / "plans" / "no-virt.json"
    assert json.loads(plan.read_text())["plan"]["host"] == "no-virt" and plan.stat().st_mode & 0o777 == 0o600
    assert (run["base"] / "plans" / "bootcfg-fails.json").stat().st_mode & 0o777 == 0o644   # a new file
