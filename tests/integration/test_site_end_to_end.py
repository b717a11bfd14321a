"""site.yml end to end on the demo inventory, then the real scheduler on what it rendered.

One first run of the whole pipeline (sandbox GPU hosts, plans, host configuration with simulated reboots,
Nova overrides, kolla-ansible genconfig, the test cloud declared), in a temporary demo directory (the
checkout's .demo is not touched). The first and the second run go through ansible-runner's Python interface
as AWX (or Automation Platform) runs a job template (tests/helpers/runner_site.py): a private data directory
with the project, the inventory and the extra variables, the project's own ansible.cfg found in the project
directory (no ANSIBLE_CONFIG), ansible-runner's awx_display stdout callback writing every event. So this proves
that site.yml runs under AWX's engine, and that what an AWX job reports (the events' stats per host, the
summary's message, where the report went) is right. Then:
- every GPU host and localhost finish the first run with failed=0 in the runner's stats, the recap AWX's job
  output shows agreeing with them;
- a second run must report changed=0 on every host in the runner's stats (no event of a changed task), and
  `--check --diff` (plain ansible-playbook) must report no change and print no diff;
- the summary (the event of the summary play's task) and the report's paths (the event of the report play's last
  task) are those of the demo, and the summary's GPU figures are those of the plan files;
- every run writes only inside the demo directory (the rest of the file system is read-only to it), the
  README's day-2 steps on the demo (playbooks/health.yml, playbooks/report.yml) included, each simulated
  host's metrics in its own sandbox root;
- the test cloud is restarted with its compute services taking [pci] and [filter_scheduler] from the
  nova.conf kolla-ansible rendered for the seed V100 host's nova-compute, with a fake driver reporting the
  PCI devices at the addresses that host's facts show: servers of a flavor the cloud phase declared land on
  the devices the plan selected (never on their group-mates held on vfio-pci), and the next one beyond
  them is refused by the scheduler.

About 5 minutes of CPU on 2 cores (bench/README.md, "Test command, stage by stage").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from ogc_testlib import ANSIBLE_PLAYBOOK, ROOT, TestCloudHandle, recap, wait_status

# What a sandbox host's files say, as the molecule scenarios' tests read them.
sys.path.insert(0, os.path.join(ROOT, "molecule", "shared"))
from sandbox import (  # noqa: E402  pylint: disable=wrong-import-position
    bound_driver, content_lines, recorded_calls, simulated_reboots)

pytestmark = pytest.mark.integration
GPU_HOSTS = ("consumer-rtx", "intel-t4", "seed-v100")

# The demo's runs are made where the whole file system is read-only (a private mount namespace, util-linux's
# unshare and mount) except the demo directory and its scratch space beside it, and the checkout's .cache (the venvs
# the demo's bootstrap builds, the test cloud's schema cache inside one). A write anywhere else fails the run with
# "Read-only file system" and the path: nothing the demo does reaches this machine's own /etc, /var, /boot, /usr
# or the checkout's .demo, whoever else writes there meanwhile. (The kernel's /proc and /sys, /dev and /dev/shm
# are mounts of their own and stay writable.)
READ_ONLY_BUT = """
set -e
for path in "$@"; do
  [ "$path" = -- ] && break
  mount --bind "$path" "$path"
done
while [ "$1" != -- ]; do shift; done
shift
mount -o remount,bind,ro /
exec "$@"
"""


def read_only_but(writable, argv):
    """argv run with every file outside the paths in writable read-only (for this process tree alone). Not as
    root, a user namespace of its own lets it mount (its files are still written as the user running it)."""
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", *user, "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_BUT, "sh",
            *writable, "--", *argv]


class Demo:
    """The demo inventory pointed at a temporary directory."""

    def __init__(self, base):
        self.dir = base / "demo"
        self.extra = base / "extra.json"
        self.extra.write_text(json.dumps({
            "ogc_demo_dir": str(self.dir),
            # The implicit localhost (kolla, cloud) finds the demo directory through ogc_kolla_demo_dir, and
            # kolla's test stand-ins through the repository, not through the demo directory.
            "ogc_kolla_demo_dir": str(self.dir / "kolla"),
            "kolla_deploy_action_plugins": [os.path.join(ROOT, "tests", "integration", "nova", "kolla_standins")],
        }))
        self.cloud = TestCloudHandle(self.dir / "cloud")
        self.timings = {}

    def _confined(self, name, argv, env=None):
        """argv run from the checkout where only the demo's directories are writable; (rc, stdout + stderr)."""
        scratch = self.dir.parent / "tmp"
        scratch.mkdir(exist_ok=True)
        env = dict(os.environ if env is None else env, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   OGC_TESTCLOUD_LIFETIME="2400", TMPDIR=str(scratch), ANSIBLE_LOCAL_TEMP=str(scratch / "ansible-local"),
                   ANSIBLE_REMOTE_TMP=str(scratch / "ansible-remote"))
        env.pop("OS_CLOUD", None)
        cache = os.path.join(ROOT, ".cache")
        os.makedirs(cache, exist_ok=True)
        writable = [str(self.dir.parent), cache, *sorted({os.path.realpath(os.path.join(cache, name))
                                                          for name in os.listdir(cache)} - {cache})]
        started = time.time()
        proc = subprocess.run(read_only_but(writable, argv), capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=1800, check=False)
        self.timings[name] = round(time.time() - started, 1)
        return proc.returncode, proc.stdout + proc.stderr

    def site(self, name, *args, playbook="site.yml"):
        """A playbook run by ansible-playbook; (rc, output)."""
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        return self._confined(name, [ANSIBLE_PLAYBOOK, playbook, "-i", "inventory/demo", "-e", "@" + str(self.extra),
                                     *args], env)

    def site_through_runner(self, name):
        """site.yml run by ansible-runner as AWX runs it (tests/helpers/runner_site.py), in a private data
        directory of its own beside the demo directory; the helper's result (rc, status, stdout, hosts,
        changed_tasks, failed_tasks, summary, report)."""
        private = self.dir.parent / "awx" / name
        private.mkdir(parents=True)
        result = private / "result.json"
        # As in an execution environment: ansible-playbook is the first on PATH, and ansible.cfg is the one in
        # the project directory where ansible-runner starts the job (no ANSIBLE_CONFIG).
        env = dict(os.environ, PATH=os.path.dirname(ANSIBLE_PLAYBOOK) + os.pathsep + os.environ.get("PATH", ""))
        env.pop("ANSIBLE_CONFIG", None)
        rc, out = self._confined(name, [
            sys.executable, os.path.join(ROOT, "tests", "helpers", "runner_site.py"), "--private-data-dir",
            str(private), "--ident", name, "--inventory", "inventory/demo", "--extravars", str(self.extra),
            "--result", str(result)], env)
        assert rc == 0 and result.is_file(), f"tests/helpers/runner_site.py failed ({rc}):\n{out[-6000:]}"
        return json.loads(result.read_text())

    def plans(self):
        plans = {}
        for host in GPU_HOSTS:
            with open(self.dir / "plans" / f"{host}.json", encoding="utf-8") as handle:
                plans[host] = json.load(handle)
        return plans


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    demo = Demo(tmp_path_factory.mktemp("site"))
    try:
        demo.first_run = demo.site_through_runner("first")
        demo.first = demo.first_run["stdout"]
        assert demo.first_run["rc"] == 0 and demo.first_run["status"] == "successful", demo.first[-6000:]
        yield demo
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "testcloud.sh"), "stop", "--dir", demo.cloud.dir],
                       capture_output=True, check=False, timeout=300)
        print(f"\nsite.yml timings (s): {demo.timings}; test cloud: {demo.cloud.timings}")


def recap_of(run):
    """(the runner's stats per host as the recap prints them, the recap its stdout ends with). The run's own recap is
    the last: kolla-ansible's steps copy their output, recap included, to the job's terminal when there is one
    (kolla_deploy_stream_to_tty)."""
    counts = {host: {key: result[key] for key in ("ok", "changed", "unreachable", "failed")}
              for host, result in run["hosts"].items()}
    return counts, recap(run["stdout"].rsplit("PLAY RECAP", 1)[-1])


def test_first_run_configures_every_host(demo):
    first = demo.first_run["hosts"]
    assert set(first) == {*GPU_HOSTS, "localhost"}, first
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in first.values()), first
    assert demo.first_run["failed_tasks"] == [], demo.first_run["failed_tasks"]
    assert all(first[h]["changed"] > 0 for h in GPU_HOSTS), first
    assert set(demo.first_run["changed_tasks"]) >= set(GPU_HOSTS), demo.first_run["changed_tasks"]
    # AWX's job output (the stdout text) tells the same as the events.
    from_events, printed = recap_of(demo.first_run)
    assert printed == from_events, demo.first[-3000:]


def test_second_run_changes_nothing(demo):
    second = demo.site_through_runner("second")
    out = second["stdout"]
    assert second["rc"] == 0 and second["status"] == "successful", out[-6000:]
    assert set(second["hosts"]) == {*GPU_HOSTS, "localhost"}, second["hosts"]
    assert {h: r["changed"] for h, r in second["hosts"].items()} == {h: 0 for h in second["hosts"]}, out[-6000:]
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in second["hosts"].values()), second["hosts"]
    assert second["changed_tasks"] == {} and second["failed_tasks"] == [], (second["changed_tasks"],
                                                                            second["failed_tasks"])
    from_events, printed = recap_of(second)
    assert printed == from_events, out[-3000:]
    assert "WHAT CHANGED: nothing changed on any host." in out, out[-3000:]
    assert second["report"].startswith(report_where(demo)), second["report"]


def report_where(demo):
    """How the report's message (playbooks/report.yml, "Say where the report is") starts for the demo."""
    return f"Fleet report: {demo.dir}/report/fleet.html (HTML) and {demo.dir}/report/fleet.md (Markdown): "


def test_the_events_carry_the_summary_and_the_report(demo):
    summary, report = demo.first_run["summary"], demo.first_run["report"]
    assert summary and summary.startswith(f"GPU hosts: {len(GPU_HOSTS)} ({', '.join(sorted(GPU_HOSTS))})"), summary
    assert report and report.startswith(report_where(demo)), report
    assert f"{len(GPU_HOSTS)} host(s)" in report, report
    assert (demo.dir / "report" / "fleet.html").is_file() and (demo.dir / "report" / "fleet.md").is_file()


def test_check_diff_reports_no_change(demo):
    rc, out = demo.site("check", "--check", "--diff")
    assert rc == 0, out[-6000:]
    check = recap(out)
    assert set(check) == {*GPU_HOSTS, "localhost"}, check
    assert {h: r["changed"] for h, r in check.items()} == {h: 0 for h in check}, out[-6000:]
    assert "--- before" not in out and "+++ after" not in out, out[-6000:]
    assert "WHAT CHANGED: nothing would change on any host." in out, out[-3000:]


def test_summary_figures_are_the_plans(demo):
    summary = demo.first_run["summary"]  # the summary task's message, from its event
    plans = demo.plans()
    assert f"GPU hosts: {len(GPU_HOSTS)} ({', '.join(sorted(GPU_HOSTS))})" in summary
    offered = {}
    for host, data in plans.items():
        for device in data["plan"]["selected"]:
            entry = offered.setdefault((device["alias"], device["device_type"]), {})
            entry[host] = entry.get(host, 0) + 1
    assert offered, "the plans select no GPU at all"
    for (alias, device_type), per_host in offered.items():
        hosts = ", ".join(f"{n} on {h}" for h, n in sorted(per_host.items()))
        assert f"{alias} ({device_type}): {sum(per_host.values())} ({hosts})" in summary, summary[:2000]
    shown = re.findall(r"^\s+(\S+) \(type-\w+\): \d+ \(", summary, re.M)
    assert sorted(shown) == sorted(alias for alias, _t in offered), summary[:2000]
    # The seed server: 6 V100 in 4 IOMMU groups, 4 offered (the README's and the design's figure).
    assert offered[("tesla-v100", "type-PCI")] == {"seed-v100": 4}


# ---- What the host phase left on each simulated host (its sandbox root, the tools it ran, the reboot) ----
# The runs of this file are idempotent, so what is read here is the same whichever of them ran last.

class Sandbox:
    """A demo host's sandbox root, the commands the role ran there (scripts/record_command.py) and its
    simulated reboots (scripts/simulate_reboot.py).

    The readings are molecule/shared/sandbox.py's; only the demo's layout stays here (hosts/<host> and its calls
    log beside it, read on this machine, not through a testinfra host), and grub_line, which holds the variable
    to one line where the molecule tests take the first."""

    def __init__(self, demo, host):
        self.root = demo.dir / "hosts" / host
        self.calls_log = demo.dir / "hosts" / f"{host}.calls.jsonl"

    def read(self, rel):
        return (self.root / rel).read_text()

    def lines(self, rel):
        """The file's lines that are neither empty nor comments."""
        return content_lines(self.read(rel))

    def grub_line(self, variable="GRUB_CMDLINE_LINUX_DEFAULT"):
        (line,) = [line for line in self.read("etc/default/grub").splitlines() if line.startswith(variable + "=")]
        return line

    def calls(self):
        return recorded_calls(self.calls_log)

    def reboots(self):
        return simulated_reboots(self.root)

    def driver(self, address):
        return bound_driver(self.root, address)


PLANNED_LINES = {
    "seed-v100": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci '
                 'modprobe.blacklist=nouveau,nvidiafb"',
    "consumer-rtx": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt vfio-pci.ids=10de:10f7,10de:1ad6,10de:1ad7,10de:1e07 '
                    'rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"',
    "intel-t4": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on iommu=pt vfio-pci.ids=10de:1eb8 '
                'rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"',
}
ORIGINAL_LINES = {"seed-v100": "quiet splash", "consumer-rtx": "quiet", "intel-t4": "quiet"}
ON_VFIO = {
    "seed-v100": ["0000:27:00.0", "0000:28:00.0", "0000:44:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:c4:00.0"],
    "consumer-rtx": [f"0000:0{card}:00.{fn}" for card in (1, 2) for fn in range(4)],
    "intel-t4": ["0000:18:00.0", "0000:3b:00.0"],
}
CONSOLES = {"seed-v100": ("0000:03:00.0", "ast"), "consumer-rtx": ("0000:31:00.0", "ast"),
            "intel-t4": ("0000:03:00.0", "mgag200")}


@pytest.mark.parametrize("host", GPU_HOSTS)
def test_the_grub_line_has_the_planned_args_once_and_the_original_is_backed_up(demo, host):
    sandbox = Sandbox(demo, host)
    line = sandbox.grub_line()
    assert line == PLANNED_LINES[host]
    keys = [arg.split("=")[0].replace("_", "-") for arg in line.split("=", 1)[1].strip('"').split()]
    assert len(keys) == len(set(keys)), line
    grub = sandbox.read("etc/default/grub")
    assert 'GRUB_CMDLINE_LINUX=""' in grub and "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`" in grub
    backups = sorted((sandbox.root / "etc" / "default").glob("grub.*~"))
    assert len(backups) == 1, backups
    assert f'GRUB_CMDLINE_LINUX_DEFAULT="{ORIGINAL_LINES[host]}"\n' in backups[0].read_text()


@pytest.mark.parametrize("host", GPU_HOSTS)
def test_the_vfio_files_bind_by_id_before_the_host_drivers(demo, host):
    sandbox = Sandbox(demo, host)
    lines = sandbox.lines("etc/modprobe.d/vfio.conf")
    if host == "seed-v100":
        assert lines == ["options vfio-pci ids=10de:1db4", "softdep nouveau pre: vfio-pci",
                         "softdep nvidia pre: vfio-pci", "softdep nvidiafb pre: vfio-pci"]
    elif host == "consumer-rtx":
        assert lines[0] == "options vfio-pci ids=10de:10f7,10de:1ad6,10de:1ad7,10de:1e07"
        assert {"softdep snd_hda_intel pre: vfio-pci", "softdep xhci_pci pre: vfio-pci",
                "softdep i2c_nvidia_gpu pre: vfio-pci"} <= set(lines), lines
    else:
        assert lines[0] == "options vfio-pci ids=10de:1eb8" and "softdep nouveau pre: vfio-pci" in lines
    assert not [line for line in lines if line.startswith("install ")]
    assert sandbox.lines("etc/modprobe.d/blacklist-passthrough.conf") == ["blacklist nouveau", "blacklist nvidiafb"]
    assert sandbox.lines("etc/modules-load.d/vfio.conf") == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    modules = sandbox.read("etc/initramfs-tools/modules")
    assert "vfio\nvfio_iommu_type1\nvfio_pci\n" in modules and modules.count("vfio_pci") == 1
    # Every planned device is bound by its ID: no per-address binding is installed.
    for rel in ("usr/local/sbin/vfio-pci-bind", "etc/systemd/system/vfio-pci-bind.service",
                "etc/initramfs-tools/hooks/vfio-pci-bind"):
        assert not (sandbox.root / rel).exists(), rel


@pytest.mark.parametrize("host", GPU_HOSTS)
def test_the_tools_ran_once_and_one_reboot_put_the_gpus_on_vfio_pci(demo, host):
    sandbox = Sandbox(demo, host)
    assert sandbox.calls() == [["update-grub"], ["update-initramfs", "-u", "-k", "all"]]
    (reboot,) = sandbox.reboots()
    missing = [arg for arg in PLANNED_LINES[host].split('"')[1].split() if arg not in reboot.split()]
    assert not missing, (missing, reboot)
    assert sandbox.read("proc/cmdline").strip() == reboot
    for address in ON_VFIO[host]:
        assert sandbox.driver(address) == "vfio-pci", address
    console, driver = CONSOLES[host]
    assert sandbox.driver(console) == driver
    if host == "intel-t4":  # booted with the IOMMU off: the reboot turned it on
        assert "intel_iommu=off" not in reboot
        assert (sandbox.root / "sys/class/iommu/dmar0").exists()
        assert "20" in {group.name for group in (sandbox.root / "sys/kernel/iommu_groups").iterdir()}


def test_day2_steps_on_the_demo_write_only_in_the_demo_dir(demo):
    # Every run of this file writes only in the demo directory (Demo.site); the README's day-2 steps too, and
    # each simulated host's metrics land in its own sandbox root, where its node_exporter would read them.
    rc, out = demo.site("health", "-e", "health_fail_on_alert=false", playbook="playbooks/health.yml")
    assert rc == 0, out[-6000:]
    rc, out = demo.site("report", playbook="playbooks/report.yml")
    assert rc == 0, out[-6000:]
    for host in GPU_HOSTS:
        metrics = demo.dir / "hosts" / host / "var/lib/node_exporter/textfile_collector/ogc_gpu.prom"
        assert "ogc_gpu_health_ok" in metrics.read_text(), host
    assert (demo.dir / "report" / "fleet.html").is_file() and (demo.dir / "report" / "fleet.md").is_file()


def test_a_write_outside_the_demo_dir_fails_the_run(tmp_path):
    # What makes the tests above a proof: the same confinement refuses a write elsewhere.
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    proc = subprocess.run(read_only_but([str(inside)], ["sh", "-c", f"touch {inside}/ok && touch {outside}"]),
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode != 0 and "Read-only file system" in proc.stderr, proc.stderr
    assert (inside / "ok").exists() and not outside.exists()


def fake_gpus_from_facts(facts):
    """What a compute node's libvirt driver reports: every PCI device the host's facts show, at its address."""
    return [{"address": d["address"], "vendor_id": d["vendor_id"], "product_id": d["product_id"],
             "dev_type": "type-PF" if d.get("sriov_totalvfs") else "type-PCI", "numa_node": d.get("numa_node")}
            for d in facts["devices"]]


def test_scheduler_places_gpus_where_the_rendered_configuration_says(demo):
    seed = demo.plans()["seed-v100"]
    plan = seed["plan"]
    selected = {d["address"] for d in plan["selected"]}
    held_back = {e["address"] for e in plan["excluded"] if "bound to vfio-pci so the group stays viable" in e["reason"]}
    assert len(selected) == 4 and held_back == {"0000:28:00.0", "0000:c4:00.0"}
    rendered = demo.dir / "kolla" / "node" / "seed-v100" / "nova-compute" / "nova.conf"
    gpus = demo.dir / "seed-v100-pci.json"
    gpus.write_text(json.dumps(fake_gpus_from_facts(seed["facts"])))
    out = demo.cloud.script("start", "--lifetime", "2400", "--with-compute", "--nova-pci-from", str(rendered),
                            "--fake-gpus", str(gpus), "--compute-host", "seed-v100")
    assert f"PCI configuration {rendered}" in out, out
    # What nova-compute runs with is the rendered device_spec and alias, nothing of the test cloud's own.
    nova_compute_conf = (demo.dir / "cloud" / "etc" / "nova" / "nova-compute.conf").read_text()
    for address in selected:
        assert f'"address": "{address}"' in nova_compute_conf
    for address in held_back:
        assert address not in nova_compute_conf
    assert "rtx-2080ti" not in (demo.dir / "cloud" / "etc" / "nova" / "nova.conf").read_text()

    conn = demo.cloud.connect()
    flavor = conn.compute.find_flavor("gpu_tiny", ignore_missing=False)  # declared by the cloud phase
    assert flavor.extra_specs["pci_passthrough:alias"] == "tesla-v100:1"
    image = conn.image.find_image("it-tiny") or conn.image.create_image(
        name="it-tiny", disk_format="raw", container_format="bare", data=b"\0" * 65536, visibility="public")
    # Placement knows exactly the planned devices (named "<hypervisor>_<ADDRESS>"), not their group-mates.
    providers = {p.name.split("_", 1)[1].lower() for p in conn.placement.resource_providers()
                 if p.name.startswith("seed-v100_")}
    assert providers == selected, providers
    placed = {}
    for number in range(1, len(selected) + 1):
        server = conn.compute.create_server(name=f"gpu-{number}", flavor_id=flavor.id, image_id=image.id,
                                            networks="none")
        server = wait_status(conn, server.id, ("ACTIVE", "ERROR"), timeout=240)
        assert server.status == "ACTIVE", server.fault
        assert server.compute_host == "seed-v100"
        allocations = conn.placement.get(f"/allocations/{server.id}", microversion="1.12").json()["allocations"]
        devices = [conn.placement.get_resource_provider(rp).name for rp, alloc in allocations.items()
                   if any(rc.startswith("CUSTOM_PCI_") for rc in alloc["resources"])]
        assert len(devices) == 1, allocations
        placed[server.name] = devices[0].split("_", 1)[1].lower()  # "<hypervisor>_<ADDRESS>" (placement upper-cases)
    assert set(placed.values()) == selected, placed
    assert not set(placed.values()) & held_back

    beyond = conn.compute.create_server(name="gpu-beyond", flavor_id=flavor.id, image_id=image.id, networks="none")
    beyond = wait_status(conn, beyond.id, ("ACTIVE", "ERROR"), timeout=240)
    assert beyond.status == "ERROR"
    assert "No valid host was found" in beyond.fault["message"], beyond.fault
