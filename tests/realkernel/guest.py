"""Build the tiny real-kernel test guest from Debian packages only.

The guest is Debian's own kernel (``linux-image-<abi>-amd64``, the one ``linux-image-amd64`` points
at) plus an initramfs holding busybox (``busybox-static``), kmod's ``modprobe``/``depmod`` (``kmod``
and the four libraries it links: ``libc6``, ``liblzma5``, ``libssl3``, ``libzstd1``), the vfio
modules, the host drivers of the emulated devices (so that a wrong command line lets them grab a
device, as on a real host) and ``/init`` (``init.sh`` next to this file).

Everything is fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``; nothing from
the machine running the build ends up in the guest. The result is cached under
``.cache/realkernel/guest-<key>/`` where the key hashes the package versions and the inputs of
this builder, so a second run reuses it (``python tests/realkernel/guest.py build`` prints it).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = REPO / ".cache" / "realkernel"

# Packages besides the kernel. kmod's binary links libzstd, liblzma, libcrypto and libc.
USERSPACE_PACKAGES = ["busybox-static", "kmod", "libc6", "liblzma5", "libssl3", "libzstd1"]
KERNEL_META_PACKAGE = "linux-image-amd64"
# Libraries kmod needs at run time (sonames, found under LIBDIRS of the unpacked packages).
KMOD_LIBRARIES = ["ld-linux-x86-64.so.2", "libc.so.6", "liblzma.so.5", "libcrypto.so.3", "libzstd.so.1"]
LIBDIRS = ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"]

# Modules in the initramfs (their dependencies are added). vfio for passthrough; the drivers a
# host would load for the emulated devices: bochs (QEMU's VGA/bochs-display), cirrus, e1000e,
# e1000, snd_hda_intel (the audio function of the multifunction "GPU"), virtio_gpu.
MODULES = [
    "vfio",
    "vfio_iommu_type1",
    "vfio_pci",
    "bochs",
    "cirrus",
    "e1000e",
    "e1000",
    "snd_hda_intel",
    "virtio_pci",
    "virtio_gpu",
]
BUSYBOX_APPLETS = ["sh", "mount", "umount", "mkdir", "cat", "ls", "cp", "tar", "gzip", "base64", "readlink",
                   "basename", "dmesg", "poweroff", "sleep", "echo", "printf", "tr", "find", "stty", "rm",
                   "ln", "grep", "sed", "wc", "sync", "head", "cut", "sort", "timeout", "xargs", "test", "["]
KMOD_TOOLS = ["modprobe", "depmod", "lsmod", "insmod", "rmmod", "modinfo"]

# Bump when the layout of the initramfs changes in a way the inputs below do not capture.
BUILDER_REVISION = "1"


class GuestBuildError(RuntimeError):
    """The guest could not be built; the message says what failed and what to do."""


@dataclass(frozen=True)
class Guest:
    """A built guest: kernel image, base initramfs, and what they were built from."""

    kernel: Path
    initramfs: Path
    kernel_release: str
    versions: dict
    directory: Path


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, **kwargs)
    except FileNotFoundError as exc:
        raise GuestBuildError(f"{cmd[0]} is not installed: the real-kernel guest needs a Debian host") from exc
    except subprocess.CalledProcessError as exc:
        raise GuestBuildError(
            f"`{' '.join(cmd)}` failed (exit {exc.returncode}): {(exc.stderr or exc.stdout).strip()[-2000:]}"
        ) from exc


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise GuestBuildError(f"{what} needs root (apt-get); run the tests as root, as CI does")


def apt_update() -> None:
    _need_root("apt-get update")
    _run(["apt-get", "update", "-q"], timeout=300)


def _candidates(packages: list[str]) -> dict:
    """Return {package: {Version, Depends}} of candidate versions from the local apt lists (one call)."""
    try:
        out = _run(["apt-cache", "show", "--no-all-versions", *packages], timeout=120).stdout
    except GuestBuildError:
        return {}
    found: dict[str, dict] = {}
    for stanza in out.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" ") and key in ("Package", "Version", "Depends"):
                fields.setdefault(key, value.strip())
        if fields.get("Package") and fields.get("Version"):
            found.setdefault(fields["Package"], fields)
    return found


def resolve_versions() -> dict:
    """Map each package the guest is built from to its candidate version (local apt lists only).

    Empty when the apt lists do not know one of them (run `apt-get update`).
    """
    found = _candidates([KERNEL_META_PACKAGE, *USERSPACE_PACKAGES])
    kernel = os.environ.get("OGC_REALKERNEL_KERNEL_PACKAGE")
    if not kernel:
        meta = found.get(KERNEL_META_PACKAGE)
        if not meta:
            return {}
        match = re.search(r"\b(linux-image-[0-9][^\s,|]*-amd64)\b", meta.get("Depends", ""))
        if not match:
            raise GuestBuildError(f"cannot find the kernel package {KERNEL_META_PACKAGE} depends on: {meta}")
        kernel = match.group(1)
    found.update(_candidates([kernel]))
    if any(package not in found for package in [kernel, *USERSPACE_PACKAGES]):
        return {}
    return {package: found[package]["Version"] for package in [kernel, *USERSPACE_PACKAGES]}


def _builder_digest() -> str:
    digest = hashlib.sha256()
    for part in (BUILDER_REVISION, json.dumps(MODULES), json.dumps(BUSYBOX_APPLETS), json.dumps(KMOD_TOOLS)):
        digest.update(part.encode())
    digest.update((HERE / "init.sh").read_bytes())
    return digest.hexdigest()


def cache_key(versions: dict) -> str:
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode())
    digest.update(_builder_digest().encode())
    return digest.hexdigest()[:16]


def _download(versions: dict, debs: Path) -> dict:
    """apt-get download each package=version into debs/ (kept: a rebuild reuses them)."""
    debs.mkdir(parents=True, exist_ok=True)
    files = {}
    for package, version in versions.items():
        name = f"{package}_{version.replace(':', '%3a')}_amd64.deb"
        if not (debs / name).is_file():
            with tempfile.TemporaryDirectory(dir=debs) as tmp:
                os.chmod(tmp, 0o755)
                _run(["apt-get", "download", "-q", f"{package}={version}"], cwd=tmp, timeout=600)
                got = list(Path(tmp).glob(f"{package}_*.deb"))
                if len(got) != 1:
                    raise GuestBuildError(f"apt-get download {package}={version} produced {got}")
                got[0].rename(debs / name)
        files[package] = debs / name
    return files


def _modinfo_fields(ko: Path) -> dict:
    data = ko.read_bytes()
    fields: dict[str, list[str]] = {}
    for key, value in re.findall(rb"(?:^|\x00)(depends|softdep)=([^\x00]*)", data):
        fields.setdefault(key.decode(), []).append(value.decode())
    return fields


def _norm(name: str) -> str:
    return name.replace("-", "_")


def module_closure(moddir: Path, wanted: list[str]) -> list[Path]:
    """Return the .ko files of the wanted modules and of everything they depend on (incl. softdeps)."""
    index = {_norm(p.name[: -len(".ko")]): p for p in (moddir / "kernel").rglob("*.ko")}
    builtin = set()
    builtin_file = moddir / "modules.builtin"
    if builtin_file.is_file():
        builtin = {_norm(Path(line).name[: -len(".ko")]) for line in builtin_file.read_text().split() if line}
    todo = [_norm(m) for m in wanted]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen or name in builtin:
            continue
        if name not in index:
            raise GuestBuildError(f"module {name} is neither in {moddir}/kernel nor built into the kernel")
        seen[name] = index[name]
        fields = _modinfo_fields(index[name])
        for dep in ",".join(fields.get("depends", [])).split(","):
            if dep:
                todo.append(_norm(dep))
        for soft in fields.get("softdep", []):
            for token in soft.split():
                if not token.endswith(":") and _norm(token) in index:
                    todo.append(_norm(token))
    return sorted(seen.values())


def _copy_lib(unpacked: Path, soname: str, dest: Path) -> None:
    src = None
    for libdir in LIBDIRS:
        if (unpacked / libdir / soname).exists() or (unpacked / libdir / soname).is_symlink():
            src = unpacked / libdir / soname
            break
    if src is None:
        raise GuestBuildError(f"{soname} is not in the unpacked packages {USERSPACE_PACKAGES}")
    # Follow relative symlinks inside the unpacked tree (libfoo.so.1 -> libfoo.so.1.2.3).
    for _ in range(10):
        if not src.is_symlink():
            break
        target = os.readlink(src)
        src = (src.parent / target) if not os.path.isabs(target) else unpacked / target.lstrip("/")
    shutil.copy2(src, dest)


def _write_newc(root: Path, out: Path) -> None:
    """Write root as an uncompressed newc cpio archive (what the kernel unpacks as initramfs)."""
    ino = 1
    with out.open("wb") as fh:
        paths = [root] + sorted(root.rglob("*"))
        for path in paths:
            rel = "." if path == root else str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(path).encode()
            elif stat.S_ISREG(st.st_mode):
                body = path.read_bytes()
            else:
                body = b""
            _newc_entry(fh, rel, st.st_mode, body, ino)
            ino += 1
        _newc_entry(fh, "TRAILER!!!", 0, b"", 0)


def _newc_entry(fh, name: str, mode: int, body: bytes, ino: int) -> None:
    encoded = name.encode() + b"\0"
    header = "070701" + "".join(
        f"{value:08x}"
        for value in (ino, mode, 0, 0, 1, 0, len(body), 0, 0, 0, 0, len(encoded), 0)
    )
    fh.write(header.encode() + encoded)
    fh.write(b"\0" * ((4 - (110 + len(encoded)) % 4) % 4))
    fh.write(body)
    fh.write(b"\0" * ((4 - len(body) % 4) % 4))


def newc_archive(files: dict[str, bytes], out: Path) -> None:
    """Write a small initramfs overlay: {"etc/modprobe.d/x.conf": b"..."} (directories implied)."""
    with out.open("wb") as fh:
        ino = 1
        dirs = sorted({str(Path(name).parents[i]) for name in files for i in range(len(Path(name).parents) - 1)})
        for directory in dirs:
            _newc_entry(fh, directory, stat.S_IFDIR | 0o755, b"", ino)
            ino += 1
        for name, body in sorted(files.items()):
            _newc_entry(fh, name, stat.S_IFREG | 0o644, body, ino)
            ino += 1
        _newc_entry(fh, "TRAILER!!!", 0, b"", 0)


def _assemble(debfiles: dict, work: Path, out: Path) -> str:
    unpacked = work / "unpacked"
    unpacked.mkdir()
    for deb in debfiles.values():
        _run(["dpkg-deb", "-x", str(deb), str(unpacked)], timeout=300)
    releases = [p.name for p in (unpacked / "lib" / "modules").iterdir()]
    if len(releases) != 1:
        raise GuestBuildError(f"expected one kernel under lib/modules, found {releases}")
    release = releases[0]
    moddir = unpacked / "lib" / "modules" / release

    root = work / "initramfs"
    for sub in ("bin", "sbin", "dev", "proc", "sys", "tmp", "run", "etc/modprobe.d", "etc/modules-load.d",
                "etc/realkernel", "lib/x86_64-linux-gnu", "lib64", f"lib/modules/{release}"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(unpacked / "bin" / "busybox", root / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    shutil.copy2(unpacked / "bin" / "kmod", root / "bin" / "kmod")
    for tool in KMOD_TOOLS:
        (root / "sbin" / tool).symlink_to("../bin/kmod")
    for soname in KMOD_LIBRARIES:
        _copy_lib(unpacked, soname, root / "lib" / "x86_64-linux-gnu" / soname)
    (root / "lib64" / "ld-linux-x86-64.so.2").symlink_to("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    init = root / "init"
    shutil.copy2(HERE / "init.sh", init)
    init.chmod(0o755)

    for ko in module_closure(moddir, MODULES):
        dest = root / "lib" / "modules" / release / ko.relative_to(moddir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ko, dest)
    for name in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
        if (moddir / name).is_file():
            shutil.copy2(moddir / name, root / "lib" / "modules" / release / name)
    # depmod from the kmod package, run through the package's own dynamic loader and libraries.
    loader = unpacked / "lib" / "x86_64-linux-gnu" / "ld-linux-x86-64.so.2"
    libpath = ":".join(str(unpacked / d) for d in LIBDIRS)
    _run([str(loader), "--library-path", libpath, "--argv0", "depmod", str(unpacked / "bin" / "kmod"),
          "-b", str(root), release], timeout=120)
    if not (root / "lib" / "modules" / release / "modules.dep").is_file():
        raise GuestBuildError("depmod did not write modules.dep")

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(unpacked / "boot" / f"vmlinuz-{release}", out / "vmlinuz")
    _write_newc(root, out / "initramfs.cpio")
    return release


def build(cache_dir: Path = DEFAULT_CACHE, refresh_lists: bool = True) -> Guest:
    """Return the cached guest for the current package versions, building it when missing."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        versions = resolve_versions()
        if versions:
            guest = _load(cache_dir / f"guest-{cache_key(versions)}")
            if guest:
                return guest
        if refresh_lists:
            apt_update()
            versions = resolve_versions()
        if not versions:
            raise GuestBuildError(
                f"apt-cache knows no {KERNEL_META_PACKAGE} or one of {USERSPACE_PACKAGES}: "
                "run `apt-get update` on this Debian host (amd64) and retry"
            )
        target = cache_dir / f"guest-{cache_key(versions)}"
        guest = _load(target)
        if guest:
            return guest
        debfiles = _download(versions, cache_dir / "debs")
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            staging = Path(tmp) / "out"
            release = _assemble(debfiles, Path(tmp), staging)
            manifest = {"kernel_release": release, "versions": versions, "modules": MODULES,
                        "builder": _builder_digest()}
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        guest = _load(target)
        if not guest:
            raise GuestBuildError(f"built {target} but it is incomplete")
        return guest


def _load(directory: Path) -> Guest | None:
    manifest = directory / "manifest.json"
    if not (manifest.is_file() and (directory / "vmlinuz").is_file() and (directory / "initramfs.cpio").is_file()):
        return None
    data = json.loads(manifest.read_text())
    return Guest(kernel=directory / "vmlinuz", initramfs=directory / "initramfs.cpio",
                 kernel_release=data["kernel_release"], versions=data["versions"], directory=directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    try:
        guest = build(args.cache_dir)
    except GuestBuildError as exc:
        print(f"guest build failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"kernel": str(guest.kernel), "initramfs": str(guest.initramfs),
                      "kernel_release": guest.kernel_release, "versions": guest.versions}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
