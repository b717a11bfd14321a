"""Run the Debian test server (image.py) as a virtual machine that Ansible reaches over SSH on 127.0.0.1.

The machine is the emulated GPU host of the real-kernel tests (``tests/realkernel/vm.py``: a multifunction
"GPU" with its audio function and a second one in groups of their own, a third behind a PCI bridge sharing its
group with a NIC, a console VGA, the host's NIC), on q35 with the AMD vIOMMU and an AMD CPU with SVM, booted by
Debian's OVMF through the GRUB on its disk. TCG, no KVM. (An Intel CPU cannot stand in here: TCG does not emulate
VT-x, so its /proc/cpuinfo has no vmx flag and the host role rightly refuses it.)

- SSH only: qemu's user-mode network, isolated (``restrict=on``), with one forward from 127.0.0.1:<free port> to
  the server's port 22, through its management NIC (virtio).
- Each virtual machine writes to a qcow2 overlay of the cached image in its state directory; a restart boots
  the same disk again.
- Bounded: qemu runs under ``timeout -s KILL`` (``$OGC_SERVER_TIME_LIMIT`` s, default 3600), and ``stop`` ends
  it by the PID it wrote (checked against its command line first).
- ``qmp`` speaks to qemu's monitor: ``set-action reboot=shutdown`` turns the next reboot into a power-off (a
  server that does not come back).

    python tests/realserver/vm.py start STATE_DIR     # start or restart; prints the connection as JSON
    python tests/realserver/vm.py start --no-iommu STATE_DIR   # the same machine without its vIOMMU
    python tests/realserver/vm.py stop STATE_DIR
    python tests/realserver/vm.py report STATE_DIR [-- --initramfs]   # tests/realserver/report.py on the server
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import qemu_harness  # noqa: E402  pylint: disable=wrong-import-position
from realkernel import vm as rk  # noqa: E402  pylint: disable=wrong-import-position
from realserver import image as imagelib  # noqa: E402  pylint: disable=wrong-import-position

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
CPU, IOMMU = rk.MACHINES["amd"]
MEMORY_MIB = 1024
TIME_LIMIT = float(os.environ.get("OGC_SERVER_TIME_LIMIT", "3600"))
BOOT_TIMEOUT = float(os.environ.get("OGC_SERVER_BOOT_TIMEOUT", "900"))
HOST_KEY_ALIAS = "open-gpu-cloud-test-server"
SSH_HOST = "ogc-test-server"  # the Host of STATE/ssh_config


class ServerError(RuntimeError):
    """The virtual machine could not be started, reached or stopped; the message carries the console tail."""


def devices() -> list[str]:
    """The real-kernel tests' emulated GPU host without option ROMs on its NICs (the firmware would try to boot
    from the network), plus the server's management NIC and its disk (the first boot device). The management
    NIC is virtio: qemu's emulated e1000e stops transmitting behind the AMD vIOMMU ("NETDEV WATCHDOG: transmit
    queue 0 timed out"), so it stays the host's second NIC, unconnected, as in the real-kernel tests."""
    out = [device + ",romfile=" if device.startswith(("e1000e,", "e1000,")) else device for device in rk.DEVICES]
    return out + [f"virtio-net-pci,netdev=mgmt,mac={imagelib.MGMT_MAC},bus=pcie.0,addr=0x8,romfile=",
                  "virtio-blk-pci,drive=disk0,bus=pcie.0,addr=0x7,bootindex=0"]


def qemu_command(state: Path, port: int, iommu: bool = True) -> list[str]:
    """iommu false: the same machine without the vIOMMU (a virtual machine whose hypervisor offers none)."""
    # A server reboots (the host phase's reboot): qemu keeps running through it.
    cmd = [*qemu_harness.command(MEMORY_MIB, CPU, reboot=True),
           *(["-device", IOMMU] if iommu else []),  # before the devices it translates for
           "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
           "-drive", f"if=pflash,format=raw,unit=1,file={state / 'OVMF_VARS.fd'}",
           "-drive", f"if=none,id=disk0,format=qcow2,file={state / 'disk.qcow2'}",
           "-netdev", f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
           *[arg for netdev in rk.NETDEVS for arg in ("-netdev", netdev)]]
    for device in devices():
        cmd += ["-device", device]
    cmd += ["-chardev", f"file,id=console,append=on,path={state / 'console.log'}", "-serial", "chardev:console", "-qmp", f"unix:{state / 'qmp.sock'},server=on,wait=off",
            "-pidfile", str(state / "qemu.pid")]
    return cmd


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int, state: Path) -> bool:
    """pid is a process started for this state directory (its command line names it)."""
    try:
        return str(state) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def read_state(state: Path) -> dict:
    path = state / "vm.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def running(state: Path) -> bool:
    info = read_state(state)
    return bool(info.get("pid")) and _alive(info["pid"], state)


def start(state: Path, image: imagelib.Image | None = None, iommu: bool = True) -> dict:
    """Start the server on the state directory's disk (created from the cached image the first time), wait for
    its SSH server, and return the connection (also written to STATE/vm.json). iommu false: without the vIOMMU."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    if running(state):
        raise ServerError(f"a virtual machine already runs for {state} (pid {read_state(state)['pid']}): stop it first")
    image = image or imagelib.build(log=lambda msg: print(msg, file=sys.stderr))
    if not OVMF_CODE.is_file():
        raise ServerError(f"{OVMF_CODE} is missing: run scripts/setup-system.sh as root (Debian's ovmf package)")
    if not (state / "disk.qcow2").exists():
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.disk), "-F", "raw",
                        str(state / "disk.qcow2")], check=True, capture_output=True, text=True)
        shutil.copyfile(OVMF_VARS, state / "OVMF_VARS.fd")
    boots = [json.loads(line) for line in (state / "boots.jsonl").read_text().splitlines()] \
        if (state / "boots.jsonl").exists() else []
    with (state / "console.log").open("a") as console:
        console.write(f"\n==== open-gpu-cloud test server: boot {len(boots) + 1} ====\n")
    for name in ("qemu.pid", "qmp.sock"):
        (state / name).unlink(missing_ok=True)
    port = _free_port()
    cmd = ["timeout", "-s", "KILL", str(int(TIME_LIMIT)), *qemu_command(state, port, iommu)]
    (state / "qemu.cmd").write_text(" ".join(cmd) + "\n")
    started = time.monotonic()
    with (state / "qemu.out").open("ab") as out:
        limiter = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    pid = _wait_pid(state, limiter)
    info = {"pid": pid, "limiter_pid": limiter.pid, "port": port, "host": "127.0.0.1", "user": image.user,
            "ssh_key": str(image.ssh_key), "known_hosts": str(state / "known_hosts"), "host_key_alias": HOST_KEY_ALIAS,
            "image": str(image.directory), "kernel_release": image.manifest["kernel_release"]}
    (state / "known_hosts").write_text(f"{HOST_KEY_ALIAS} {image.host_key}\n")
    (state / "ssh_config").write_text(ssh_config(info, state))
    (state / "vm.json").write_text(json.dumps(info, indent=2) + "\n")
    try:
        wait_ssh(state, limiter)
    except ServerError:
        stop(state)
        raise
    boot = {"boot": len(boots) + 1, "iommu": IOMMU if iommu else None,
            "to_ssh_s": round(time.monotonic() - started, 1), "qemu_cpu_to_ssh_s":
            round(_cpu_s(pid), 1), "load": os.getloadavg()[0], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with (state / "boots.jsonl").open("a") as handle:
        handle.write(json.dumps(boot) + "\n")
    return {**info, **boot}


def ssh_config(info: dict, state: Path) -> str:
    """An ssh_config for the server (host name ``SSH_HOST``): its key, its host key (checked), one multiplexed
    connection for the commands of a test run (closed by stop)."""
    return (f"Host {SSH_HOST}\n  HostName {info['host']}\n  Port {info['port']}\n  User {info['user']}\n"
            f"  IdentityFile {info['ssh_key']}\n  IdentitiesOnly yes\n  UserKnownHostsFile {info['known_hosts']}\n"
            f"  HostKeyAlias {HOST_KEY_ALIAS}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
            f"  ControlMaster auto\n  ControlPath {state}/ssh-%p\n  ControlPersist 300\n")


def _wait_pid(state: Path, limiter: subprocess.Popen) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = (state / "qemu.pid").read_text().strip() if (state / "qemu.pid").exists() else ""
        if text.isdigit():
            return int(text)
        if limiter.poll() is not None:
            raise ServerError(f"qemu exited at once ({limiter.returncode}): "
                              f"{(state / 'qemu.out').read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    limiter.kill()
    raise ServerError("qemu wrote no pid file within 30 s")


def wait_ssh(state: Path, limiter: subprocess.Popen | None = None, timeout: float = BOOT_TIMEOUT) -> None:
    """Until the server's SSH server answers on the forwarded port (its banner), or the timeout."""
    info = read_state(state)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(info["pid"], state):
            raise ServerError(f"the test server stopped while booting; console:\n{console_tail(state)}")
        try:
            with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as sock:
                sock.settimeout(10)
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(2)
    raise ServerError(f"the test server's SSH did not answer within {timeout:.0f} s; console:\n{console_tail(state)}")


def wait_stopped(state: Path, timeout: float) -> bool:
    """Until qemu has exited (the guest powered off); False at the timeout."""
    info = read_state(state)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(info.get("pid", 0), state):
            return True
        time.sleep(1)
    return False


def stop(state: Path) -> bool:
    """Stop the virtual machine by its PID (TERM, then KILL after 15 s), and its time limiter; True when one ran."""
    state = state.resolve()
    info = read_state(state)
    stopped = False
    if (state / "ssh_config").exists():  # the multiplexed SSH connection of the tests, if one is open
        subprocess.run(["ssh", "-F", str(state / "ssh_config"), "-O", "exit", SSH_HOST], capture_output=True,
                       timeout=30, check=False)
    for key in ("pid", "limiter_pid"):
        pid = info.get(key)
        if not pid or not _alive(pid, state):
            continue
        stopped = True
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _alive(pid, state) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid, state):
            os.kill(pid, signal.SIGKILL)
    for name in ("qemu.pid", "qmp.sock"):
        (state / name).unlink(missing_ok=True)
    return stopped


def qmp(state: Path, execute: str, arguments: dict | None = None) -> dict:
    """One command to qemu's monitor (QMP) of the running virtual machine; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(state / "qmp.sock"))
        stream = sock.makefile("rwb")

        def call(message: dict) -> dict:
            stream.write(json.dumps(message).encode() + b"\n")
            stream.flush()
            while True:
                answer = json.loads(stream.readline())
                if "return" in answer or "error" in answer:
                    return answer

        json.loads(stream.readline())  # the greeting
        call({"execute": "qmp_capabilities"})
        answer = call({"execute": execute, **({"arguments": arguments} if arguments else {})})
    if "error" in answer:
        raise ServerError(f"qemu refused {execute}: {answer['error']}")
    return answer["return"]


def report(state: Path, *options: str) -> dict:
    """tests/realserver/report.py run as root on the server (one SSH session through STATE/ssh_config)."""
    proc = subprocess.run(["ssh", "-F", str(state / "ssh_config"), SSH_HOST, "sudo", "python3", "-", *options],
                          input=(HERE / "report.py").read_bytes(), capture_output=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise ServerError(f"report.py failed on the server (exit {proc.returncode}): "
                          f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(proc.stdout)


def console_tail(state: Path, lines: int = 40) -> str:
    path = state / "console.log"
    text = path.read_text(errors="replace") if path.exists() else "(no console output)"
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("command", choices=["start", "stop", "report"])
    parser.add_argument("state", type=Path, help="the virtual machine's state directory (disk overlay, console, pid)")
    parser.add_argument("options", nargs="*", help="report: report.py's options (--initramfs, --journal-boots N)")
    parser.add_argument("--no-iommu", action="store_true", help="start: the machine without its vIOMMU")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            print(json.dumps(start(args.state, iommu=not args.no_iommu), indent=2))
        elif args.command == "report":
            print(json.dumps(report(args.state.resolve(), *args.options), indent=1, sort_keys=True))
        else:
            print("stopped" if stop(args.state) else "not running")
    except (ServerError, imagelib.ImageBuildError) as exc:
        print(f"test server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
