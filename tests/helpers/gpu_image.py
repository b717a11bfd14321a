#!/usr/bin/env python3
"""The GPU guest image the tests boot and upload: the demo inventory's Debian image (``debian-12-nvidia``),
built by the project's own role (``playbooks/images.yml`` on a build host that is this machine: real
``disk-image-create``, our elements, Debian's pinned NVIDIA driver) and kept in a cache keyed by its inputs.

    tests/helpers/gpu_image.py build    build it, or find it built; print the image's path
    tests/helpers/gpu_image.py key      print the cache key and the directory

Where: ``${OGC_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/open-gpu-cloud}/gpu-image/<key>/`` holds the role's build
directory (elements, DIB's work directory ``tmp/``, ``<image>.qcow2`` and DIB's log), the playbook's logs and
``state.json`` (every run: when, how long, its CPU, rc, changed, the load average). The key is a hash of every
input of the build: the elements, the role's build tasks, wrapper and defaults (diskimage-builder's version),
the image rules (the collection's ``images/gpu_images.py`` and its ``gpu_images`` filters), the image as declared with
its pins, and the Debian mirrors. diskimage-builder's venv (``dib-venv/<version>``) and its download cache (``dib-cache/``) sit
beside it. Nothing is written in the checkout.

The Debian mirrors come from this machine's own APT configuration (``apt-get indextargets``: the source of the
Debian release, and the one of ``<release>-security``) unless ``OGC_DEBIAN_MIRROR`` and
``OGC_DEBIAN_SECURITY_MIRROR`` say otherwise.

Each run of the playbook is recorded with the test command's run id (``OGC_TEST_RUN_ID``): scripts/test.sh
starts ``build`` in the background before pytest, and the tests' ``ensure()`` waits on the same lock and reuses
that run; a run that failed in this test command is reported, not repeated. Loop devices left attached to files
of the build directory are detached: before a run (an interrupted earlier build's), and after it, when they are
an error of that run.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
import uuid

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tests' shared library (tests/ogc_testlib.py): how every test runs ansible-playbook. This file is also run as a
# script (scripts/test.sh's prebuild, bench/gpu_image), where pytest does not put tests/ on the path.
sys.path.insert(0, os.path.join(ROOT, "tests"))
import ogc_testlib  # noqa: E402  pylint: disable=wrong-import-position
import qemu_harness  # noqa: E402  pylint: disable=wrong-import-position
IMAGE_NAME = "debian-12-nvidia"
BUILDER = "ogc-image-builder"
DEMO_OPS = os.path.join(ROOT, "inventory", "demo", "group_vars", "all", "ops.yml")
ROLE_DEFAULTS = os.path.join(ROOT, "roles", "gpu_images", "defaults", "main.yml")
# What the image is made of: the elements, how the role runs disk-image-create (its build tasks, wrapper and
# defaults) and what it passes it (the image rules). The checks before the build, the upload and the docs are not.
KEY_INPUTS = ("images/elements", "roles/gpu_images/tasks/build.yml", "roles/gpu_images/files",
              "roles/gpu_images/defaults/main.yml", "collections/ansible_collections/open_gpu_cloud/toolkit/plugins/module_utils/images/gpu_images.py",
              "collections/ansible_collections/open_gpu_cloud/toolkit/plugins/filter/gpu_images.py")
# Documentation does not change the image.
KEY_IGNORED = re.compile(r"(^|/)(README[^/]*|__pycache__(/.*)?)$")
PLAYBOOK_TIMEOUT = int(os.environ.get("OGC_GPU_IMAGE_TIMEOUT", "3600"))
RECAP = re.compile(rf"^{BUILDER}\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says why and where the log is."""


def cache_root() -> str:
    if os.environ.get("OGC_CACHE_DIR"):
        return os.environ["OGC_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "open-gpu-cloud")


def dib_version() -> str:
    with open(ROLE_DEFAULTS, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["gpu_images_dib_version"]


def debian_mirrors(release: str) -> tuple[str, str]:
    """(mirror, security mirror) for ``release``: the environment's, else this machine's APT sources."""
    mirror, security = os.environ.get("OGC_DEBIAN_MIRROR", ""), os.environ.get("OGC_DEBIAN_SECURITY_MIRROR", "")
    if mirror and security:
        return mirror, security
    proc = subprocess.run(["apt-get", "indextargets", "--no-release-info", "--format", "$(REPO_URI) $(RELEASE)"],
                          capture_output=True, text=True, check=False, timeout=60)
    targets = [line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2]
    # This machine's own release may differ from the image's: any Debian suite's URI is the mirror.
    main = [uri for uri, suite in targets if suite == release] + \
        [uri for uri, suite in targets if "-" not in suite]
    secure = [uri for uri, suite in targets if suite == f"{release}-security"] + \
        [uri for uri, suite in targets if suite.endswith("-security")]
    mirror = mirror or (main[0].rstrip("/") if main else "")
    security = security or (secure[0].rstrip("/") if secure else "")
    if not mirror or not security:
        raise ImageBuildError("no Debian mirror: this machine's APT sources (apt-get indextargets) name no Debian "
                              f"suite and no -security suite ({targets}); set OGC_DEBIAN_MIRROR and "
                              "OGC_DEBIAN_SECURITY_MIRROR")
    return mirror, security


def declared_image() -> dict:
    """The demo inventory's image as declared, with its pins made explicit."""
    with open(DEMO_OPS, encoding="utf-8") as handle:
        ops = yaml.safe_load(handle)
    for image in ops["image_builds"]:
        if image["name"] == IMAGE_NAME:
            image = dict(image)
            image.setdefault("nvidia_branch", ops.get("image_nvidia_branch"))
            image.setdefault("nvidia_version", ops.get("image_nvidia_version"))
            return image
    raise ImageBuildError(f"{DEMO_OPS} declares no image {IMAGE_NAME} in image_builds")


def build_vars() -> dict:
    """The extra variables of the build: the declared image with this machine's mirrors, and where things go."""
    image = declared_image()
    mirror, security = debian_mirrors(image.get("release") or "bookworm")
    image.update(mirror=mirror, security_mirror=security)
    root = cache_root()
    return {
        "image_builds": [image],
        "gpu_images_dib_venv": os.path.join(root, "dib-venv", dib_version()),
        # Built on disk, not in a tmpfs (a shared machine's memory); DIB's downloads kept between builds.
        "gpu_images_dib_environment": {"DIB_NO_TMPFS": "1", "DIB_IMAGE_CACHE": os.path.join(root, "dib-cache")},
        # Built and used in place: nothing to fetch.
        "image_output_dir": "",
    }


def dib_debian_sources() -> str:
    """DIB_APT_SOURCES_CONF as diskimage-builder's debian-minimal element computes it for the build's image."""
    variables = build_vars()
    image = variables["image_builds"][0]
    python = os.path.join(variables["gpu_images_dib_venv"], "bin", "python")
    elements = subprocess.run([python, "-c", "import diskimage_builder, os; print(os.path.join(os.path.dirname("
                               "diskimage_builder.__file__), 'elements'))"], capture_output=True, text=True,
                              check=True).stdout.strip()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ARCH": "amd64", "DIB_RELEASE": image["release"],
           "DIB_DISTRIBUTION_MIRROR": image["mirror"], "DIB_DEBIAN_SECURITY_MIRROR": image["security_mirror"]}
    script = os.path.join(elements, "debian-minimal", "environment.d", "10-debian-minimal.bash")
    return subprocess.run(["bash", "-c", 'source "$1" && printf "%s" "$DIB_APT_SOURCES_CONF"', "dib-env", script],
                          capture_output=True, text=True, check=True, env=env).stdout


def cache_key(variables: dict) -> str:
    digest = hashlib.sha256()
    for top in KEY_INPUTS:
        path = os.path.join(ROOT, top)
        files = [path] if os.path.isfile(path) else sorted(
            os.path.join(d, f) for d, _dirs, names in os.walk(path) for f in names)
        for name in files:
            rel = os.path.relpath(name, ROOT)
            if KEY_IGNORED.search(rel):
                continue
            digest.update(f"{rel} {os.stat(name).st_mode & 0o777:o}\n".encode())
            with open(name, "rb") as handle:
                digest.update(handle.read())
    settings = {k: v for k, v in variables.items() if k != "gpu_images_build_dir"}
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def playbook(directory: str, variables: dict, *args) -> list:
    """The arguments of ansible-playbook (ogc_testlib.run_playbook) for playbooks/images.yml on the demo inventory plus this machine as the build host, with
    ``variables`` as extra variables (the inventory and the variables are written to ``directory``). It builds only,
    as docs/ops.md ("GPU images") tells an operator to: the upload's tag skipped, the limit keeping the control host
    (a limit without it is refused, playbooks/run_scope.yml)."""
    inventory = os.path.join(directory, "builder.yml")
    with open(inventory, "w", encoding="utf-8") as handle:
        # The system Python has apt's bindings (ansible.builtin.apt), as on any Debian build host.
        yaml.safe_dump({"image_builders": {"hosts": {BUILDER: {
            "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}, handle)
    extra = os.path.join(directory, "vars.json")
    with open(extra, "w", encoding="utf-8") as handle:
        json.dump(variables, handle, indent=1)
    return [os.path.join(ROOT, "playbooks", "images.yml"), "-i", os.path.join(ROOT, "inventory", "demo"),
            "-i", inventory, "--limit", f"{BUILDER},localhost", "--skip-tags", "gpu_images_upload", "-e", f"@{extra}", *args]


class Build:
    """One keyed build directory and its record."""

    def __init__(self):
        self.variables = build_vars()
        self.key = cache_key(self.variables)
        self.dir = os.path.join(cache_root(), "gpu-image", self.key)
        self.variables["gpu_images_build_dir"] = self.dir
        self.image = os.path.join(self.dir, f"{IMAGE_NAME}.qcow2")
        self.state_path = os.path.join(self.dir, "state.json")
        self.lock_path = os.path.join(cache_root(), "gpu-image", f"{self.key}.lock")
        self.dib_log = os.path.join(self.dir, f"{IMAGE_NAME}.log")

    def state(self) -> dict:
        try:
            with open(self.state_path, encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return {"runs": []}

    def _record(self, run: dict) -> None:
        state = self.state()
        state["runs"].append(run)
        if run["rc"] == 0 and run["built"] and "first_build" not in state:
            state["first_build"] = run
        with open(self.state_path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1)
        os.replace(self.state_path + ".tmp", self.state_path)

    def leftover_loops(self) -> list[str]:
        """Loop devices still attached to files of this build directory (detached here)."""
        proc = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                              capture_output=True, text=True, check=False)
        left = []
        for line in proc.stdout.splitlines():
            name, _, back = line.strip().partition(" ")
            if back.strip().startswith(self.dir + "/"):
                subprocess.run(["losetup", "--detach", name], capture_output=True, check=False)
                left.append(f"{name} ({back.strip()})")
        return left

    def clear_work_dir(self) -> list[str]:
        """Remove what an interrupted earlier build left in DIB's work directory (gigabytes); never while anything
        is mounted there (a bind-mounted /dev or /proc of a build killed on a host with device-mapper)."""
        work = os.path.join(self.dir, "tmp")
        if not os.path.isdir(work):
            return []
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            mounted = [line.split()[1] for line in handle if line.split()[1].startswith(work + "/")]
        if mounted:
            raise ImageBuildError(f"an earlier build left mounts under {work}: {', '.join(mounted)}; unmount them "
                                  "(umount -R) before building again")
        left = sorted(os.listdir(work))
        for name in left:
            shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        return left

    def run_playbook(self, run_id: str) -> dict:
        os.makedirs(self.dir, exist_ok=True)
        number = len(self.state()["runs"]) + 1
        args = playbook(self.dir, self.variables)
        stale = self.leftover_loops() + self.clear_work_dir()  # an interrupted earlier run's
        log = os.path.join(self.dir, f"playbook-{number}.log")
        built = not os.path.exists(self.image)
        load = os.getloadavg()
        started, cpu0 = time.time(), _children_cpu()
        with open(log, "w", encoding="utf-8") as out:
            out.write("ansible-playbook " + " ".join(args) + "\n")
            out.flush()
            try:
                rc = ogc_testlib.run_playbook(*args, stdout=out, timeout=PLAYBOOK_TIMEOUT).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        wall = time.time() - started
        with open(log, encoding="utf-8") as handle:
            text = handle.read()
        recap = RECAP.search(text)
        run = {"number": number, "run_id": run_id, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                           time.gmtime(started)),
               "wall_s": round(wall, 1), "cpu_s": round(_children_cpu() - cpu0, 1), "rc": rc, "built": built and os.path.exists(self.image),
               "changed": int(recap.group(2)) if recap else None, "log": log,
               "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
               "stale_removed": stale, "leftover_loops": self.leftover_loops()}
        if run["built"]:
            run["image_bytes"] = os.path.getsize(self.image)
        self._record(run)
        return run


def _children_cpu() -> float:
    """CPU seconds of the processes this one waited for, theirs included (the whole playbook run, DIB's too)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "\n".join(handle.read().splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def ensure(run_id: str | None = None) -> Build:
    """The built image of the current inputs: built (or checked by a no-op run of the role) once per test run."""
    run_id = run_id or os.environ.get("OGC_TEST_RUN_ID") or f"pid-{os.getpid()}-{time.time():.0f}"
    build = Build()
    os.makedirs(os.path.dirname(build.lock_path), exist_ok=True)
    with open(build.lock_path, "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = [r for r in build.state()["runs"] if r["run_id"] == run_id]
        run = runs[-1] if runs else build.run_playbook(run_id)
    problems = []
    if run["rc"] != 0:
        problems.append(f"playbooks/images.yml failed (rc {run['rc']}, {run['wall_s']} s); playbook log "
                        f"{run['log']}:\n{_tail(run['log'])}\n--- diskimage-builder's log {build.dib_log}:\n"
                        f"{_tail(build.dib_log, 25)}")
    if run["leftover_loops"]:
        problems.append(f"the build left loop devices attached (detached now): {', '.join(run['leftover_loops'])}")
    if not os.path.exists(build.image):
        problems.append(f"no image at {build.image} after the run")
    if problems:
        raise ImageBuildError("\n".join(problems))
    return build


# ---- Booting the image under qemu (TCG), as Nova would: q35, virtio disk and NIC, a config drive ----
GUEST_REPORT = os.path.join(ROOT, "tests", "helpers", "gpu-image-guest-report.sh")
BOOT_TIMEOUT = float(os.environ.get("OGC_GPU_IMAGE_BOOT_TIMEOUT", "1200"))
MAC = "fa:16:3e:00:00:01"  # Nova's prefix
REPORT_LINE = re.compile(r"^OGC-REPORT (\S+) (\d+) ([\d.]+) ([\d.]+) (\S*)\s*$", re.M)


def config_drive(directory: str, user_data: str) -> str:
    """An OpenStack config drive as Nova writes one (iso9660, label config-2, openstack/latest/...), with genisoimage
    and Nova's own options; cloud-init's ConfigDrive datasource reads it."""
    latest = os.path.join(directory, "drive", "openstack", "latest")
    os.makedirs(latest)
    instance = str(uuid.uuid4())
    meta = {"uuid": instance, "name": "ogc-image-test", "hostname": "ogc-image-test", "launch_index": 0,
            "availability_zone": "nova", "project_id": uuid.uuid4().hex, "public_keys": {}, "keys": [],
            "files": [], "meta": {}, "random_seed": base64.b64encode(os.urandom(512)).decode()}
    network = {"links": [{"id": "tap0", "type": "phy", "ethernet_mac_address": MAC, "mtu": 1450,
                          "vif_id": str(uuid.uuid4())}],
               "networks": [{"id": "network0", "type": "ipv4_dhcp", "link": "tap0",
                             "network_id": str(uuid.uuid4())}],
               "services": []}
    for name, data in (("meta_data.json", json.dumps(meta)), ("network_data.json", json.dumps(network)),
                       ("vendor_data.json", "{}"), ("vendor_data2.json", "{}"), ("user_data", user_data)):
        with open(os.path.join(latest, name), "w", encoding="utf-8") as handle:
            handle.write(data)
    iso = os.path.join(directory, "disk.config")
    subprocess.run(["genisoimage", "-o", iso, "-ldots", "-allow-lowercase", "-allow-multidot", "-l", "-publisher",
                    "open-gpu-cloud image test", "-quiet", "-J", "-r", "-V", "config-2",
                    os.path.join(directory, "drive")], check=True, capture_output=True, timeout=60)
    return iso


def user_data() -> str:
    """cloud-config: the report script, started as a unit of its own once cloud-init runs the user's commands."""
    with open(GUEST_REPORT, encoding="utf-8") as handle:
        script = handle.read()
    # One host key type: each key is generated under TCG at first boot, RSA-3072 alone takes a while; a real
    # server's user data decides for itself.
    config = {"ssh_genkeytypes": ["ed25519"],
              "write_files": [{"path": "/usr/local/sbin/ogc-image-report", "permissions": "0755",
                               "content": script}],
              "runcmd": [["systemd-run", "--no-block", "--unit", "ogc-image-report", "--collect",
                          "/usr/local/sbin/ogc-image-report"]]}
    return "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ssh_banner(port: int) -> str:
    """The first line the forwarded SSH port says, or '' (slirp accepts and closes while the guest has no sshd)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.settimeout(3)
            return sock.recv(256).decode("ascii", "replace").strip()
    except OSError:
        return ""


def boot(image: str, workdir: str, machine: str = "q35", smp: int = 1, memory_mb: int = 2048,
         timeout: float = BOOT_TIMEOUT) -> dict:
    """Boot ``image`` (through a qcow2 overlay: the image is not written) with a config drive; return the guest's
    report {name: {"rc", "output"}}, the SSH banner seen through the forwarded port, the timings and the logs.

    qemu runs under TCG with user-mode networking (the guest's SSH port forwarded from 127.0.0.1 only); it is
    killed on every way out (timeout, error, interrupt). Raises ImageBuildError with the console's tail when the
    guest does not report and power off in time."""
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    overlay = os.path.join(workdir, "disk.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", os.path.abspath(image), overlay,
                    "20G"], check=True, capture_output=True, timeout=60)
    seed = config_drive(workdir, user_data())
    console, report = os.path.join(workdir, "console.log"), os.path.join(workdir, "report.log")
    port = free_port()
    cmd = [*qemu_harness.command(memory_mb, smp=smp, machine=machine),
           "-drive", f"file={overlay},format=qcow2,if=virtio",
           "-drive", f"file={seed},format=raw,if=ide,media=cdrom,readonly=on",
           "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
           "-device", f"virtio-net-pci,netdev=net0,mac={MAC}",
           "-device", "virtio-rng-pci",
           "-serial", f"file:{console}", "-serial", f"file:{report}"]
    started = time.monotonic()
    seen = {"banner": "", "banner_s": None}

    def look_for_ssh():
        if not seen["banner"]:
            seen["banner"] = ssh_banner(port)
            seen["banner_s"] = round(time.monotonic() - started, 1) if seen["banner"] else None

    run = qemu_harness.run_to_poweroff(cmd, timeout, log_dir=workdir, poll=look_for_ssh, interval=2)
    if run.timed_out:
        raise ImageBuildError(f"the guest did not report and power off within {timeout:.0f} s (qemu "
                              f"killed); console tail:\n{qemu_harness.tail(console)}")
    banner, banner_s, wall = seen["banner"], seen["banner_s"], run.wall_s
    with open(report, encoding="ascii", errors="replace") as handle:
        text = handle.read()
    facts = {}
    for name, status_text, started_s, ended_s, data in REPORT_LINE.findall(text):
        try:
            output = base64.b64decode(data).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            output = f"(undecodable: {data[:80]})"
        facts[name] = {"rc": int(status_text), "output": output, "uptime_s": float(started_s),
                       "took_s": round(float(ended_s) - float(started_s), 1)}
    if run.returncode != 0 or "OGC-REPORT-END" not in text:
        raise ImageBuildError(f"qemu exited {run.returncode} after {wall:.0f} s; the guest reported "
                              f"{sorted(facts) or 'nothing'}; console tail:\n{qemu_harness.tail(console)}")
    return {"facts": facts, "ssh_banner": banner, "ssh_banner_s": banner_s, "wall_s": wall, "cpu_s": run.cpu_s,
            "console": console, "workdir": workdir, "command": cmd}


def main(argv) -> int:
    if argv[1:] == ["key"]:
        build = Build()
        print(build.key, build.dir)
        return 0
    if argv[1:] != ["build"]:
        print(__doc__.split("\n\n", 2)[1], file=sys.stderr)
        return 2
    try:
        build = ensure()
    except ImageBuildError as exc:
        print(f"gpu_image: {exc}", file=sys.stderr)
        return 1
    state = build.state()
    print(json.dumps({"image": build.image, "key": build.key, "last_run": state["runs"][-1],
                      "first_build": state.get("first_build")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
