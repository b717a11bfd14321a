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
- a cloud configured as an earlier version did (Nova's PCI pools only) moves to PCI in Placement by re-running
  playbooks/nova.yml and playbooks/deploy.yml (kolla-ansible genconfig for the seed V100 host and the controller):
  the test cloud is restarted each time with its compute services taking Nova's PCI settings from the files
  kolla-ansible rendered (the seed host's nova-compute, the controller's nova-scheduler) and nothing else, the
  running services' settings compared with those files key by key through Nova's own config objects, a fake
  driver reporting the PCI devices at the addresses that host's facts show; in each mode servers of a flavor the
  cloud phase declared land on the devices the plan selected (never on their group-mates held on vfio-pci), the
  next one beyond them is refused, and a GPU server started in pool mode keeps its device throughout.

About 5 minutes of CPU on 2 cores (bench/README.md, "Test command, stage by stage").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ogc_testlib import (ROOT, TestCloudHandle, ansible_env, openstack_python, output, recap,
                         run_playbook, wait_status)

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
            "kolla_deploy_action_plugins": [os.path.join(ROOT, "tests", "standins", "kolla")],
        }))
        self.cloud = TestCloudHandle(self.dir / "cloud")
        self.timings = {}

    def _confined(self, name, env, run):
        """RUN(argv prefix, environment) from the checkout where only the demo's directories are writable, its time
        kept under NAME; (rc, stdout + stderr)."""
        scratch = self.dir.parent / "tmp"
        scratch.mkdir(exist_ok=True)
        env = dict(env, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   OGC_TESTCLOUD_LIFETIME="2400", TMPDIR=str(scratch), ANSIBLE_LOCAL_TEMP=str(scratch / "ansible-local"),
                   ANSIBLE_REMOTE_TMP=str(scratch / "ansible-remote"))
        env.pop("OS_CLOUD", None)
        cache = os.path.join(ROOT, ".cache")
        os.makedirs(cache, exist_ok=True)
        writable = [str(self.dir.parent), cache, *sorted({os.path.realpath(os.path.join(cache, name))
                                                          for name in os.listdir(cache)} - {cache})]
        started = time.time()
        proc = run(read_only_but(writable, []), env)
        self.timings[name] = round(time.time() - started, 1)
        return proc.returncode, output(proc)

    def site(self, name, *args, playbook="site.yml"):
        """A playbook run by ansible-playbook; (rc, output)."""
        return self._confined(name, ansible_env(), lambda prefix, env: run_playbook(
            playbook, "-i", "inventory/demo", "-e", "@" + str(self.extra), *args, prefix=prefix, env=env, timeout=1800))

    def site_through_runner(self, name):
        """site.yml run by ansible-runner as AWX runs it (tests/helpers/runner_site.py), in a private data
        directory of its own beside the demo directory; the helper's result (rc, status, stdout, hosts,
        changed_tasks, failed_tasks, summary, report)."""
        private = self.dir.parent / "awx" / name
        private.mkdir(parents=True)
        result = private / "result.json"
        # As in an execution environment: ansible-playbook is the first on PATH, and ansible.cfg is the one in
        # the project directory where ansible-runner starts the job (no ANSIBLE_CONFIG).
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        env.pop("ANSIBLE_CONFIG", None)
        rc, out = self._confined(name, env, lambda prefix, env: subprocess.run([
            *prefix, sys.executable, os.path.join(ROOT, "tests", "helpers", "runner_site.py"), "--private-data-dir",
            str(private), "--ident", name, "--inventory", "inventory/demo", "--extravars", str(self.extra),
            "--result", str(result)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800, check=False))
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
    """A demo host's sandbox root, the commands the role ran there (tests/standins/record_command.py) and its
    simulated reboots (tests/standins/simulate_reboot.py).

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


NOVA_PCI_SETTINGS = os.path.join(ROOT, "tests", "helpers", "nova_pci_settings.py")


def nova_pci_settings(*files):
    """Every [pci] and [filter_scheduler] option as Nova's own configuration objects read them from FILES."""
    out = subprocess.run([openstack_python(), NOVA_PCI_SETTINGS, *map(str, files)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return json.loads(out)


class NovaPlacementMove:
    """The seed V100 host's Nova configuration rendered by playbooks/nova.yml and kolla-ansible genconfig
    (playbooks/deploy.yml, the seed host and the controller) in a kolla directory of its own, and the compute test
    cloud started from exactly those files. The cloud has one GPU compute, the seed host: the move's plan directory
    holds that host's plan alone, so the fleet whose devices the scheduler waits for in Placement is that host (the
    other demo hosts' devices would never reach its Placement), and nova_pci_config_hosts writes its override alone."""

    def __init__(self, demo, name):
        self.demo = demo
        self.kolla = demo.dir / name
        self.plans = demo.dir / f"{name}-plans"
        self.plans.mkdir()
        shutil.copy2(demo.dir / "plans" / "seed-v100.json", self.plans / "seed-v100.json")
        self.compute_conf = self.kolla / "node" / "seed-v100" / "nova-compute" / "nova.conf"
        self.scheduler_conf = self.kolla / "node" / "demo-controller" / "nova-scheduler" / "nova.conf"
        self.gpus = demo.dir / "seed-v100-pci.json"
        self.gpus.write_text(json.dumps(fake_gpus_from_facts(demo.plans()["seed-v100"]["facts"])))

    def render(self, label, **extra):
        """playbooks/nova.yml then playbooks/deploy.yml (genconfig) into this kolla directory; nova.yml's output."""
        extra_file = self.demo.dir.parent / f"{label}.json"
        extra_file.write_text(json.dumps(dict(self.vars(), **extra)))
        rc, nova_out = self.demo.site(f"{label}-nova", "-e", "@" + str(extra_file), playbook="playbooks/nova.yml")
        assert rc == 0, nova_out[-6000:]
        rc, out = self.demo.site(f"{label}-deploy", "-e", "@" + str(extra_file), playbook="playbooks/deploy.yml")
        assert rc == 0, out[-6000:]
        return " ".join(nova_out.split())

    def check(self):
        """playbooks/nova.yml --check --diff with this move's settings (the release as rendered next): rc, output."""
        return self.demo.site("release-check", "-e", json.dumps(self.vars()), "--check", "--diff",
                              playbook="playbooks/nova.yml")

    def vars(self):
        return {"ogc_kolla_demo_dir": str(self.kolla), "nova_pci_config_hosts": ["seed-v100"],
                "passthrough_plan_dir": str(self.plans),
                "kolla_deploy_extra_args": ["--limit", "seed-v100,demo-controller"]}

    def start_cloud(self):
        out = self.demo.cloud.script("start", "--lifetime", "2400", "--with-compute",
                                     "--nova-pci-from", str(self.compute_conf),
                                     "--nova-scheduler-from", str(self.scheduler_conf),
                                     "--fake-gpus", str(self.gpus), "--compute-host", "seed-v100")
        assert f"PCI configuration {self.compute_conf}, scheduler {self.scheduler_conf}" in out, out

    def assert_services_run_the_rendered_settings(self):
        """Key by key, every [pci] and [filter_scheduler] option the test cloud's services run with (Nova's config
        objects over their files) is what kolla-ansible rendered for the seed host's nova-compute and the
        controller's nova-scheduler."""
        etc = self.demo.dir / "cloud" / "etc" / "nova"
        running_compute = nova_pci_settings(etc / "nova.conf", etc / "nova-compute.conf")
        rendered_compute = nova_pci_settings(self.compute_conf)
        assert {k: v for k, v in running_compute.items() if k.startswith("pci.")} == \
            {k: v for k, v in rendered_compute.items() if k.startswith("pci.")}
        assert nova_pci_settings(etc / "nova.conf") == nova_pci_settings(self.scheduler_conf)
        return rendered_compute, nova_pci_settings(self.scheduler_conf)


def pci_devices_in_use(demo):
    """{server id: PCI address} from the cell database's pci_devices (Nova's own record, whichever path scheduled)."""
    conf = demo.dir / "cloud" / "etc" / "mariadb" / "my.cnf"
    out = subprocess.run(["mariadb", f"--defaults-file={conf}", "-N", "-B", "-e",
                          "SELECT instance_uuid, address FROM nova.pci_devices WHERE deleted = 0 AND "
                          "instance_uuid IS NOT NULL AND status = 'allocated'"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(line.split("\t") for line in out.splitlines())


def placement_devices(conn, server_id):
    """The addresses of the device providers Placement allocated to the server."""
    allocations = conn.placement.get(f"/allocations/{server_id}", microversion="1.12").json()["allocations"]
    names = [conn.placement.get_resource_provider(rp).name for rp, alloc in allocations.items()
             if any(rc.startswith("CUSTOM_GPU_") for rc in alloc["resources"])]
    return sorted(n.split("_", 1)[1].lower() for n in names)  # "<hypervisor>_<ADDRESS>" (placement upper-cases)


def openstack_cli(demo, *args):
    """An `openstack` command of the guide, as written, against the demo's test cloud; its output."""
    cli = os.path.join(os.path.dirname(openstack_python()), "openstack")
    env = dict(os.environ, OS_CLIENT_CONFIG_FILE=demo.cloud.clouds_yaml, OS_CLOUD="ogc-test")
    proc = subprocess.run([cli, *args], capture_output=True, text=True, env=env, timeout=180, check=False)
    assert proc.returncode == 0, f"openstack {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def boot(conn, name, flavor, image):
    server = conn.compute.create_server(name=name, flavor_id=flavor.id, image_id=image.id, networks="none")
    return wait_status(conn, server.id, ("ACTIVE", "ERROR"), timeout=240)


def test_a_pool_cloud_moves_to_placement_with_a_gpu_server_running(demo):
    """A Zed cloud (Nova's PCI pools only) with a GPU server on it is moved to a newer release, and so to PCI in
    Placement, by re-running the phases: what changes is shown first, then the computes, then the scheduler once
    Placement has the devices.
    In each mode the services run exactly the rendered settings, the declared flavor lands on the devices the plan
    selected (never on their group-mates held on vfio-pci) and the one beyond them is refused; the first server
    keeps its device and its host throughout, its allocation healed into Placement. Then one-time-use is turned on
    and a GPU goes from one tenant to the next as docs/ops.md says: Nova itself reserves it, the next server is
    refused, playbooks/return_gpus.yml resets and returns it, the next server gets it."""
    seed = demo.plans()["seed-v100"]["plan"]
    selected = {d["address"] for d in seed["selected"]}
    held_back = {e["address"] for e in seed["excluded"] if "bound to vfio-pci so the group stays viable" in e["reason"]}
    assert len(selected) == 4 and held_back == {"0000:28:00.0", "0000:c4:00.0"}
    move = NovaPlacementMove(demo, "kolla-move")

    # 1. Pools only, as a Zed cloud has it (Zed cannot schedule PCI devices in Placement); the services run Nova 33
    # with those files, as the cloud after kolla-ansible's own upgrade, before this project is told of the release.
    out = move.render("pool", nova_pci_config_openstack_release="zed")
    assert "Nova zed cannot schedule PCI devices in Placement (2023.1 and later can): the GPUs are configured for " \
        "Nova''s PCI pools only." in out, out[-4000:]  # the YAML callback doubles the quote
    move.start_cloud()
    compute, scheduler = move.assert_services_run_the_rendered_settings()
    assert compute["pci.report_in_placement"] is False and scheduler["filter_scheduler.pci_in_placement"] is False
    assert len(compute["pci.device_spec"]) == 4 and "PciPassthroughFilter" in scheduler["filter_scheduler.enabled_filters"]
    conn = demo.cloud.connect()
    flavor = conn.compute.find_flavor("gpu_tiny", ignore_missing=False)  # declared by the cloud phase
    assert flavor.extra_specs["pci_passthrough:alias"] == "tesla-v100:1"
    image = conn.image.find_image("it-tiny") or conn.image.create_image(
        name="it-tiny", disk_format="raw", container_format="bare", data=b"\0" * 65536, visibility="public")
    pool_servers = [boot(conn, f"pool-{n}", flavor, image) for n in range(1, 5)]
    assert all(s.status == "ACTIVE" and s.compute_host == "seed-v100" for s in pool_servers), \
        [(s.name, s.status, s.fault) for s in pool_servers]
    in_use = pci_devices_in_use(demo)
    assert set(in_use.values()) == selected and not set(in_use.values()) & held_back, in_use
    beyond = boot(conn, "pool-beyond", flavor, image)
    assert beyond.status == "ERROR" and "No valid host was found" in beyond.fault["message"], beyond.fault
    # The first server stays throughout; the others give their GPU back.
    first = pool_servers[0]
    first_device = in_use[first.id]
    for server in pool_servers[1:] + [beyond]:
        conn.compute.delete_server(server.id)
    for server in pool_servers[1:] + [beyond]:
        conn.compute.wait_for_delete(server, wait=120)

    # 2. The release moves on, as docs/operator-guide.md, "Moving to a newer OpenStack release", says: what changes is
    # shown first (--check --diff, nothing written), then the first run: the computes report to Placement, the
    # scheduler waits for the devices there.
    written = {path: path.read_bytes() for path in sorted(move.kolla.rglob("*")) if path.is_file()}
    rc, out = move.check()
    said = " ".join(out.split())
    assert rc == 0 and "+report_in_placement = true" in said and '"resource_class": "CUSTOM_GPU_TESLA_V100"' in said, \
        said[-6000:]
    assert {path: path.read_bytes() for path in sorted(move.kolla.rglob("*")) if path.is_file()} == written
    out = move.render("report")
    assert "the scheduler keeps Nova's PCI pools until Placement has every GPU host's devices, and it lacks " \
           "seed-v100: 0000:27:00.0 (no provider seed-v100_0000:27:00.0)" in out, out[-4000:]
    move.start_cloud()
    compute, scheduler = move.assert_services_run_the_rendered_settings()
    assert compute["pci.report_in_placement"] is True and scheduler["filter_scheduler.pci_in_placement"] is False
    providers = {p.name.split("_", 1)[1].lower(): p for p in conn.placement.resource_providers()
                 if p.name.startswith("seed-v100_")}
    assert set(providers) == selected, providers
    for address, provider in providers.items():
        inventory = {i.resource_class: i.total for i in conn.placement.resource_provider_inventories(provider)}
        assert inventory == {"CUSTOM_GPU_TESLA_V100": 1}, (address, inventory)
        traits = set(conn.placement.get(f"/resource_providers/{provider.id}/traits", microversion="1.6")
                     .json()["traits"])
        assert {"CUSTOM_GPU_10DE_1DB4", "COMPUTE_MANAGED_PCI_DEVICE"} <= traits, traits
    first = conn.compute.get_server(first.id)
    assert first.status == "ACTIVE" and first.compute_host == "seed-v100"
    assert pci_devices_in_use(demo) == {first.id: first_device}
    assert placement_devices(conn, first.id) == [first_device]  # its allocation healed into Placement

    # 3. The next run finds every device in Placement: the scheduler allocates there from now on.
    out = move.render("schedule")
    assert "the scheduler keeps Nova's PCI pools" not in out, out[-4000:]
    move.start_cloud()
    compute, scheduler = move.assert_services_run_the_rendered_settings()
    assert scheduler["filter_scheduler.pci_in_placement"] is True and compute["pci.report_in_placement"] is True
    first = conn.compute.get_server(first.id)
    assert first.status == "ACTIVE" and first.compute_host == "seed-v100"
    assert placement_devices(conn, first.id) == [first_device]
    placed = {first.id: first_device}
    for n in range(2, 5):
        server = boot(conn, f"placement-{n}", flavor, image)
        assert server.status == "ACTIVE" and server.compute_host == "seed-v100", server.fault
        (placed[server.id],) = placement_devices(conn, server.id)
    assert set(placed.values()) == selected and pci_devices_in_use(demo) == placed, placed
    beyond = boot(conn, "placement-beyond", flavor, image)
    assert beyond.status == "ERROR" and "No valid host was found" in beyond.fault["message"], beyond.fault

    # 4. Nothing left to switch: a further run changes nothing, and turning Placement off is refused.
    rc, out = demo.site("move-again", "-e", json.dumps(move.vars()), playbook="playbooks/nova.yml")
    assert rc == 0 and recap(out)["localhost"]["changed"] == 0, out[-4000:]
    rc, out = demo.site("move-off", "-e", json.dumps(dict(move.vars(), nova_pci_config_placement=False)),
                        playbook="playbooks/nova.yml")
    assert rc != 0 and "cannot be disabled any more" in " ".join(out.split()), out[-4000:]
    rc, out = demo.site("move-back", "-e", json.dumps(dict(move.vars(), nova_pci_config_openstack_release="zed")),
                        playbook="playbooks/nova.yml")
    assert rc != 0 and "cannot be disabled any more" in " ".join(out.split()), out[-4000:]

    # 5. One-time-use on (nova_pci_config_one_time_use, Nova 2025.2 and later: the test cloud runs Nova 33), proven on
    # Nova's own reservation: no test writes reserved or the trait. Nova reserves an allocated one-time-use device
    # (nova/compute/pci_placement_translator.py: reserved = total) and never lowers it; a server deleted leaves its
    # GPU reserved, so the next server is refused until playbooks/return_gpus.yml resets and returns that GPU.
    out = move.render("one-time-use", nova_pci_config_one_time_use=True)
    move.start_cloud()
    compute, _ = move.assert_services_run_the_rendered_settings()
    specs = [json.loads(spec) for spec in compute["pci.device_spec"]]
    assert sorted(s["address"] for s in specs) == sorted(selected) and all(s["one_time_use"] == "true" for s in specs)
    deadline = time.time() + 240
    while True:  # the compute's first update of its providers after the restart writes the reservations
        states = {address: provider_state(conn, provider.id) for address, provider in providers.items()}
        if all(state[0] == 1 for state in states.values()) or time.time() > deadline:
            break
        time.sleep(5)
    assert all(state[:2] == (1, 1) and "HW_PCI_ONE_TIME_USE" in state[2] for state in states.values()), states
    gone_id, device = next(iter(placed.items()))
    conn.compute.delete_server(gone_id)
    conn.compute.wait_for_delete(conn.compute.get_server(gone_id), wait=180)
    deadline = time.time() + 120
    while provider_state(conn, providers[device].id)[1] and time.time() < deadline:  # the allocation goes after the server
        time.sleep(3)
    assert provider_state(conn, providers[device].id)[:2] == (1, 0)  # free, and still reserved: Nova never lowers it
    blocked = boot(conn, "otu-blocked", flavor, image)
    assert blocked.status == "ERROR" and "No valid host was found" in blocked.fault["message"], blocked.fault
    conn.compute.delete_server(blocked.id)
    rc, out = demo.site("otu-return", playbook="playbooks/return_gpus.yml")
    said = " ".join(out.split())
    assert rc == 0 and f"seed-v100: GPU {device} (hypervisor seed-v100, provider {providers[device].id}): returned to " \
        "Nova, reset first: reserved 1 -> 0" in said, said[-4000:]
    assert provider_state(conn, providers[device].id)[:2] == (0, 0)
    after = boot(conn, "otu-next", flavor, image)
    assert after.status == "ACTIVE" and placement_devices(conn, after.id) == [device], after.fault
    rc, out = demo.site("otu-return-again", playbook="playbooks/return_gpus.yml")
    assert rc == 0 and recap(out)["localhost"]["changed"] == 0, out[-6000:]
    assert "Nothing waits to be returned" in " ".join(out.split()), out[-4000:]

    # 6. The host is removed as docs/operator-guide.md, "Removing a GPU host", says. Refused while servers are on it,
    # each named, with nothing stopped or written; with them gone and its nova-compute stopped (kolla-ansible stop in
    # a deployment; in the demo, genconfig mode, the test cloud's compute process), its service, its providers, the
    # project's block in its Nova override and its plan go. A second run finds nothing left and changes nothing.
    remove = dict(move.vars(), remove_host="seed-v100")
    override = move.kolla / "config" / "nova" / "seed-v100" / "nova.conf"
    assert "open-gpu-cloud nova_pci_config: managed block" in override.read_text()
    on_host = [s for s in conn.compute.servers(all_projects=True, compute_host="seed-v100")]
    assert on_host
    rc, out = demo.site("remove-check", "-e", json.dumps(remove), "--check", "--diff", playbook="playbooks/remove_host.yml")
    said = " ".join(out.split())
    assert rc != 0 and f"seed-v100: {len(on_host)} server" in said and \
        all(f"{s.name} ({s.id}, ACTIVE, project" in said for s in on_host), said[-4000:]
    assert "Nothing was changed" in said and (move.plans / "seed-v100.json").is_file()
    # The guide's step 1 commands, as written (python-openstackclient of the services venv, the test cloud's
    # clouds.yaml): new servers kept off the host, then, once its servers are deleted, the listing waited for until it
    # is empty (a deleted server stays listed, status DELETED, until the host's nova-compute has finished deleting it;
    # stopped before that, the removal is refused: its advice is in the unit tests of compute_removal).
    openstack_cli(demo, "compute", "service", "set", "--disable", "--disable-reason", "removing", "seed-v100",
                  "nova-compute")
    assert [s.status for s in conn.compute.services(host="seed-v100", binary="nova-compute")] == ["disabled"]
    for server in on_host:
        conn.compute.delete_server(server.id)
    deadline = time.time() + 180
    while any(s.id in (listed := openstack_cli(demo, "server", "list", "--all-projects", "--host", "seed-v100"))
              for s in on_host) and time.time() < deadline:
        time.sleep(5)
    assert not any(s.id in listed for s in on_host), listed
    assert not list(conn.compute.servers(all_projects=True, compute_host="seed-v100"))
    stop_compute(demo.dir / "cloud")
    rc, out = demo.site("remove", "-e", json.dumps(remove), "--diff", playbook="playbooks/remove_host.yml")
    said = " ".join(out.split())
    assert rc == 0, said[-6000:]
    assert "seed-v100: its service" in said and "were deleted" in said and "out of gpu_hosts" in said, said[-4000:]
    assert not list(conn.compute.services(host="seed-v100", binary="nova-compute"))
    assert not [p.name for p in conn.placement.resource_providers() if p.name.startswith("seed-v100")]
    assert not override.exists() and not override.parent.exists()  # only the project's block was in it
    assert not (move.plans / "seed-v100.json").exists()
    rc, out = demo.site("remove-again", "-e", json.dumps(remove), "--diff", playbook="playbooks/remove_host.yml")
    assert rc == 0 and recap(out)["localhost"]["changed"] == 0, out[-6000:]
    assert "Nova and Placement had nothing of it left" in " ".join(out.split()), out[-4000:]


def stop_compute(cloud_dir):
    """Stop the test cloud's nova-compute alone (its supervisor stops it and everything it started), as
    kolla-ansible stop stops a removed host's containers."""
    with open(cloud_dir / "state.json", encoding="utf-8") as handle:
        pid = json.load(handle)["pids"]["compute"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 60
    while running(pid) and time.time() < deadline:
        time.sleep(0.5)
    assert not running(pid), f"the test cloud's nova-compute (supervisor {pid}) did not stop"


def running(pid):
    """True while PID is a live process (not gone, not a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def provider_state(conn, provider_id):
    """(reserved, used, traits) of a GPU device's provider, as Placement answers."""
    inventories = conn.placement.get(f"/resource_providers/{provider_id}/inventories", microversion="1.26").json()
    (inventory,) = inventories["inventories"].values()
    usages = conn.placement.get(f"/resource_providers/{provider_id}/usages", microversion="1.26").json()["usages"]
    traits = conn.placement.get(f"/resource_providers/{provider_id}/traits", microversion="1.6").json()["traits"]
    return inventory["reserved"], sum(usages.values()), set(traits)
