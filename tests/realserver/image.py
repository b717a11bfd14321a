"""Build the Debian 12 test server's disk image from Debian packages only, with Debian's own tools.

The server is what the host phase meets on a real GPU host: Debian's kernel, systemd and udev, openssh-server,
initramfs-tools, GRUB for EFI (``grub-efi-amd64``, booted by Debian's OVMF), python3, and an operator account
holding the test key. The build:

1. ``mmdebstrap`` installs the packages into a directory, from the mirror this machine's apt is configured with
   (``/etc/apt/sources.list.d/debian.sources``, or ``$OGC_DEBIAN_SOURCES``: a sources file; nothing names a
   mirror in the project), and runs ``customize.sh`` on the tree (account, network, fstab, the operator's GRUB
   settings). Its downloads are kept in ``<cache>/debian-server/debs`` for the next build;
2. the disk: a GPT written by ``sfdisk``, an EFI system partition formatted with ``mformat`` (mtools), the root
   file system made from the tree by ``mke2fs -d`` (nothing is mounted);
3. one boot of the new disk under qemu (Debian's kernel and initramfs from the tree) runs ``install-boot.sh``:
   ``grub-install`` on the EFI partition and ``update-grub``, Debian's own tools on the machine they configure.

Nothing from the machine running the build ends up inside but the test's public key. The result is cached in
``<cache>/debian-server/<key>/`` (``scripts/cache_dir.py``): the key hashes the versions of every package as the
archive resolves them and this builder's files, so an unchanged input reuses the image. ``python
tests/realserver/image.py build`` builds (or finds) it and prints where it is and how long each step took.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts"))
if str(REPO / "tests") not in sys.path:  # run as a script: the tests' qemu harness beside it
    sys.path.insert(0, str(REPO / "tests"))
import cache_dir  # noqa: E402  pylint: disable=wrong-import-position
import qemu_harness  # noqa: E402  pylint: disable=wrong-import-position

WHAT = "debian-server"
SUITE = "bookworm"
# What a GPU host runs that the host phase touches or needs: the kernel, systemd and D-Bus (shutdown, as
# ansible.builtin.reboot calls it, asks logind over D-Bus), udev (who binds a device), initramfs-tools (zstd: its
# default compression), GRUB for EFI, sshd, python3 for Ansible, sudo for become, e2fsprogs to check the root
# file system at boot.
PACKAGES = ["linux-image-amd64", "systemd-sysv", "dbus", "udev", "openssh-server", "initramfs-tools", "zstd",
            "grub-efi-amd64", "python3", "sudo", "e2fsprogs"]
USER = "ogc"
MGMT_MAC = "52:54:00:4f:47:43"
ESP_MIB, ROOT_MIB = 63, 3072
BUILDER_FILES = [HERE / "image.py", HERE / "customize.sh", HERE / "install-boot.sh"]
SOURCES_FILES = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
INSTALLED_MARK = "OGC-BOOT-LOADER-INSTALLED"
INSTALL_BOOT_TIMEOUT = float(os.environ.get("OGC_SERVER_INSTALL_TIMEOUT", "1500"))


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says what failed and what to do."""


@dataclass(frozen=True)
class Image:
    """A built server image and what the tests need to reach it."""

    directory: Path
    disk: Path            # raw, read-only: each virtual machine writes to a qcow2 overlay of its own
    ssh_key: Path         # the operator account's private key
    host_key: str         # the server's SSH host key (public), for known_hosts
    manifest: dict

    @property
    def user(self) -> str:
        return self.manifest["user"]


def _run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=timeout, **kwargs)
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{cmd[0]} is not installed: run scripts/setup-system.sh as root (it installs the "
                              "Debian packages of requirements/debian-packages.txt)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"`{shlex.join(cmd)}` did not finish within {timeout:.0f} s") from exc
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"`{shlex.join(cmd)}` failed (exit {exc.returncode}): "
                              f"{(exc.stderr or exc.stdout or '').strip()[-3000:]}") from exc


def sources() -> str:
    """The Debian archive mmdebstrap installs from: $OGC_DEBIAN_SOURCES, else this machine's own apt sources."""
    explicit = os.environ.get("OGC_DEBIAN_SOURCES")
    if explicit:
        if not Path(explicit).is_file():
            raise ImageBuildError(f"OGC_DEBIAN_SOURCES={explicit} is not a file (a deb822 .sources or a .list file)")
        return explicit
    for path in SOURCES_FILES:
        if path.is_file() and path.stat().st_size > 0:
            return str(path)
    raise ImageBuildError("this machine's apt has no Debian sources (/etc/apt/sources.list.d/debian.sources or "
                          "/etc/apt/sources.list): configure a mirror, or set OGC_DEBIAN_SOURCES to a sources file")


_INST = re.compile(r"^Inst (\S+) \((\S+) ")


def resolve_versions() -> dict:
    """{package: version} of everything the image installs (the packages above, apt and the Essential set), as
    the archive in this machine's apt lists resolves them; empty when the lists do not know a package."""
    try:
        out = _run(["apt-get", "-s", "-o", "Dir::State::Status=/dev/null", "-o", "APT::Install-Recommends=false",
                    "install", "apt", "?essential", *PACKAGES], timeout=300).stdout
    except ImageBuildError:
        return {}
    versions = dict(m.groups() for m in map(_INST.match, out.splitlines()) if m)
    return versions if all(p in versions for p in PACKAGES) else {}


def image_key(versions: dict) -> str:
    return cache_dir.input_key(json.dumps(versions, sort_keys=True), json.dumps(PACKAGES), SUITE, *BUILDER_FILES)


def _load(directory: Path) -> Image | None:
    manifest = directory / "manifest.json"
    if not (manifest.is_file() and (directory / "disk.raw").is_file() and (directory / "id_ed25519").is_file()):
        return None
    data = json.loads(manifest.read_text())
    return Image(directory=directory, disk=directory / "disk.raw", ssh_key=directory / "id_ed25519",
                 host_key=data["host_key"], manifest=data)


def find() -> Image | None:
    """The cached image for the package versions the apt lists give now, or None."""
    versions = resolve_versions()
    return _load(cache_dir.directory(WHAT, image_key(versions))) if versions else None


def build(refresh_lists: bool = True, log=print) -> Image:
    """Return the cached image for the current package versions, building it when missing."""
    base = cache_dir.directory(WHAT)
    base.mkdir(parents=True, exist_ok=True)
    with (base / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        versions = resolve_versions()
        if not versions and refresh_lists:
            if os.geteuid() != 0:
                raise ImageBuildError("the apt lists know none of the image's packages and apt-get update needs "
                                      "root: run the tests as root, as CI does")
            _run(["apt-get", "update", "-q"], timeout=600)
            versions = resolve_versions()
        if not versions:
            raise ImageBuildError(f"apt cannot resolve {', '.join(PACKAGES)} for {SUITE}: run `apt-get update` on "
                                  "this Debian 12 host (amd64) and retry")
        key = image_key(versions)
        target = cache_dir.directory(WHAT, key)
        found = _load(target)
        if found:
            return found
        if os.geteuid() != 0:
            raise ImageBuildError("building the server image needs root (mmdebstrap, chroot): run the tests as root")
        work = base / f".build-{key}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            manifest = _build(work, versions, key, base / "debs", log)
            out = work / "out"
            (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            out.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        image = _load(target)
        if not image:
            raise ImageBuildError(f"built {target} but it is incomplete")
        return image


def _build(work: Path, versions: dict, key: str, debs: Path, log) -> dict:
    started = time.monotonic()
    times = {}
    out = work / "out"
    out.mkdir()
    root_uuid, esp_serial = str(uuid.uuid4()), uuid.uuid4().hex[:8].upper()
    esp_uuid = f"{esp_serial[:4]}-{esp_serial[4:]}"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "open-gpu-cloud test server",
          "-f", str(out / "id_ed25519")], timeout=60)

    tree = work / "tree"
    debs.mkdir(parents=True, exist_ok=True)
    hook = " ".join(shlex.quote(str(part)) for part in (HERE / "customize.sh",)) + ' "$1" ' + " ".join(
        shlex.quote(str(part)) for part in (out / "id_ed25519.pub", root_uuid, esp_uuid, MGMT_MAC))
    cached = shlex.quote(str(debs))
    log(f"server image {key}: mmdebstrap {SUITE} ({len(versions)} packages) from {sources()}")
    _run(["mmdebstrap", "--variant=apt", "--mode=root", "--format=directory", "--include=" + ",".join(PACKAGES),
          # The downloaded packages are kept for the next build (mmdebstrap's own recipe).
          "--skip=download/empty", "--skip=essential/unlink",
          f'--setup-hook=mkdir -p "$1"/var/cache/apt/archives && cp -a {cached}/. "$1"/var/cache/apt/archives/',
          f"--customize-hook={hook}",
          f'--customize-hook=cp -an "$1"/var/cache/apt/archives/*.deb {cached}/ && rm -f "$1"/var/cache/apt/archives/*.deb',
          SUITE, str(tree), sources()], timeout=3600)
    times["mmdebstrap_s"] = round(time.monotonic() - started, 1)
    _prune_debs(debs, versions)

    host_key = (tree / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise ImageBuildError(f"expected one kernel in the image's /boot, found {[k.name for k in kernels]}")
    release = kernels[0].name[len("vmlinuz-"):]
    shutil.copy2(kernels[0], work / "vmlinuz")
    shutil.copy2(tree / "boot" / f"initrd.img-{release}", work / "initrd.img")

    step = time.monotonic()
    disk = out / "disk.raw"
    make_disk(disk, tree, root_uuid, esp_serial)
    shutil.rmtree(tree)
    times["disk_s"] = round(time.monotonic() - step, 1)

    step = time.monotonic()
    log(f"server image {key}: installing the boot loader (one boot under qemu, TCG)")
    console = out / "install-boot.log"
    install_boot_loader(disk, work / "vmlinuz", work / "initrd.img", root_uuid, console)
    times["install_boot_s"] = round(time.monotonic() - step, 1)
    disk.chmod(0o444)
    times["total_s"] = round(time.monotonic() - started, 1)
    log(f"server image {key}: built in {times['total_s']} s ({times})")
    return {"key": key, "suite": SUITE, "packages": PACKAGES, "versions": versions, "kernel_release": release,
            "root_uuid": root_uuid, "esp_uuid": esp_uuid, "user": USER, "mgmt_mac": MGMT_MAC,
            "host_key": " ".join(host_key[:2]), "build_times": times,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _prune_debs(debs: Path, versions: dict) -> None:
    """Keep only the downloads of the versions this build used."""
    wanted = {f"{p.split(':')[0]}_{v.split(':')[-1]}" for p, v in versions.items()}
    for deb in debs.glob("*.deb"):
        name, _, rest = deb.name.partition("_")
        version = rest.rsplit("_", 1)[0].replace("%3a", ":").split(":")[-1]
        if f"{name}_{version}" not in wanted:
            deb.unlink()


def make_disk(disk: Path, tree: Path, root_uuid: str, esp_serial: str) -> None:
    """A GPT disk: the EFI system partition (FAT, mtools) at 1 MiB, the root file system (ext4 from the tree,
    mke2fs -d) after it. Nothing is mounted."""
    size_mib = 1 + ESP_MIB + ROOT_MIB + 1  # the backup GPT needs the last MiB
    with disk.open("wb") as handle:
        handle.truncate(size_mib * 1024 * 1024)
    layout = (f"label: gpt\nstart=1MiB, size={ESP_MIB}MiB, type=uefi, name=esp\n"
              f"start={1 + ESP_MIB}MiB, size={ROOT_MIB}MiB, type=linux, name=root\n")
    _run(["sfdisk", "--quiet", str(disk)], input=layout, timeout=60)
    _run(["mformat", "-i", f"{disk}@@1M", "-T", str(ESP_MIB * 2048), "-N", esp_serial, "-v", "ESP", "::"],
         timeout=60)
    # mformat also writes a one-entry partition table into the FAT boot sector; nothing reads it (FAT's own
    # fields end long before), but GRUB's probes take it for a nested one and warn on every update-grub
    # ("Discarding improperly nested partition"). An ESP made by mkfs.fat has none: clear it.
    with disk.open("r+b") as handle:
        handle.seek(1024 * 1024 + 0x1BE)
        handle.write(bytes(0x1FE - 0x1BE))
    _run(["mke2fs", "-q", "-t", "ext4", "-U", root_uuid, "-L", "root", "-d", str(tree),
          "-E", f"offset={(1 + ESP_MIB) * 1024 * 1024}", str(disk), f"{ROOT_MIB * 1024}k"], timeout=900)


def install_boot_loader(disk: Path, kernel: Path, initrd: Path, root_uuid: str, console: Path) -> None:
    """Boot the new disk once with its own kernel and initramfs; systemd runs install-boot.sh, then powers off."""
    cmd = [*qemu_harness.command(1024, "qemu64"),
           "-drive", f"file={disk},format=raw,if=virtio", "-serial", f"file:{console}",
           "-kernel", str(kernel), "-initrd", str(initrd),
           "-append", f"root=UUID={root_uuid} ro console=ttyS0,115200n8 no_timer_check mitigations=off init_on_alloc=0 "
                      "systemd.run=/usr/local/sbin/ogc-install-boot "
                      "systemd.run_success_action=poweroff systemd.run_failure_action=poweroff"]
    run = qemu_harness.run_to_poweroff(cmd, INSTALL_BOOT_TIMEOUT)
    if run.timed_out:
        raise ImageBuildError(f"the boot that installs GRUB did not power off within {INSTALL_BOOT_TIMEOUT:.0f} s "
                              f"(qemu killed; OGC_SERVER_INSTALL_TIMEOUT raises the limit); console: "
                              f"{qemu_harness.tail(console)}")
    text = console.read_text(errors="replace") if console.exists() else ""
    if run.returncode != 0 or INSTALLED_MARK not in text:
        raise ImageBuildError(f"the boot that installs GRUB failed (qemu exit {run.returncode}: {run.output}); "
                              f"console: {qemu_harness.tail(console)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("command", choices=["build", "find"])
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        image = build(log=lambda msg: print(msg, file=sys.stderr)) if args.command == "build" else find()
    except ImageBuildError as exc:
        print(f"server image: {exc}", file=sys.stderr)
        return 1
    if image is None:
        print("server image: not built for the current package versions", file=sys.stderr)
        return 1
    print(json.dumps({"directory": str(image.directory), "disk": str(image.disk), "ssh_key": str(image.ssh_key),
                      "kernel_release": image.manifest["kernel_release"],
                      "build_times": image.manifest["build_times"],
                      "ready_s": round(time.monotonic() - started, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
