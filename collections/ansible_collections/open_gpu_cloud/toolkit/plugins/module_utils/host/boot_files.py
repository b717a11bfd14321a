# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Reading a host's boot files under a root directory (``/`` on a real host, a sandbox copy in tests):
paths resolved the way the host itself would resolve them (an absolute symlink inside a sandbox
points into the sandbox), the files grub-mkconfig sources, in its order, what the boot-config tool
generated (``read_entries``), and the signs of a boot mechanism other than GRUB's defaults
(``other_boot_mechanisms``). Shared by the grub_cmdline and boot_entries modules; the rules themselves
are in boot_config."""

from __future__ import annotations

import glob
import os

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_config as bc

MAX_LINKS = 40


class BootFilesError(Exception):
    """A path or file problem, worded for the operator."""


def host_path(root, path, what="path"):
    """``path`` (absolute, as on the host) joined under ``root``. A relative path is refused: it would
    resolve against the controller's working directory, outside the host."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise BootFilesError(f"{what} {path!r} is not an absolute path: give it as on the host, e.g. /etc/default/grub")
    if not isinstance(root, str) or not root.startswith("/"):
        raise BootFilesError(f"root {root!r} is not an absolute path")
    if root.rstrip("/") == "":
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(root, path.lstrip("/")))


def resolve(root, path):
    """The file a host path really names, symlinks followed inside ``root`` (so an edit lands on the
    link's target and the link stays a link). Returns the host path of the target (absolute, under
    nothing) and the real path on this machine."""
    parts = [p for p in path.split("/") if p]
    done = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = "/" + "/".join(done + [part])
        real = host_path(root, candidate)
        if os.path.islink(real):
            links += 1
            if links > MAX_LINKS:
                raise BootFilesError(f"{path}: too many levels of symbolic links")
            target = os.readlink(real)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        done.append(part)
    hpath = "/" + "/".join(done)
    return hpath, host_path(root, hpath)


def read_text(real, shown):
    """A regular file's text (UTF-8). ``shown`` is how errors name it."""
    if not os.path.exists(real):
        raise FileNotFoundError(shown)
    if not os.path.isfile(real):
        raise BootFilesError(f"{shown} is not a regular file")
    try:
        with open(real, "rb") as handle:
            return handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BootFilesError(f"cannot read {shown}: {exc}") from None


def sourced_files(root, family, grub_path, dropin_dir):
    """The files grub-mkconfig sources, in order: ``[(host path shown, real path, text)]``. The GRUB
    file must exist; the drop-in directory may not."""
    order_paths = [grub_path]
    if bc.FAMILIES[family][1]:
        _shown, real_dir = resolve(root, dropin_dir)
        if os.path.isdir(real_dir):
            names = [n for n in os.listdir(real_dir) if n.endswith(".cfg")]
            dropins = [dropin_dir.rstrip("/") + "/" + n for n in names]
            dropins = [d for d in dropins if os.path.exists(resolve(root, d)[1])]  # the shell's [ -e ]
            order_paths = bc.source_order(family, grub_path, dropins)
    out = []
    for shown in order_paths:
        target, real = resolve(root, shown)
        out.append((shown, target, real, read_text(real, shown)))
    return out


def read_entries(root, family, output):
    """``[(where, args)]`` of what the boot-config tool generated: the default (first) menu entry of a grub.cfg, or
    every kernel BLS entry of a directory (rescue entries left out). Raises BootFilesError / BootConfigError."""
    _target, real = resolve(root, output)
    if os.path.isdir(real):
        entries = []
        for name in sorted(os.listdir(real)):
            if not name.endswith(".conf"):
                continue
            shown = output.rstrip("/") + "/" + name
            fields = bc.bls_entry(read_text(os.path.join(real, name), shown), shown)
            if "-rescue-" in fields.get("linux", "") or fields.get("version", "").startswith("0-rescue"):
                continue
            entries.append((shown, fields["options"]))
        if not entries:
            raise BootFilesError(f"{output} has no kernel entry: the boot-config tool generated nothing to boot")
        return entries
    if not os.path.exists(real):
        raise BootFilesError(f"{output} does not exist: the boot-config tool did not generate it (set "
                             "passthrough_host_boot_config_output to what it writes)")
    return [(output + " default entry", bc.grub_cfg_default_args(read_text(real, output), output))]


def read_bls_entries(root, output):
    """``[(where, args)]`` of every BLS entry of the directory ``output`` (rescue and debug entries included: the
    tool rewrites them all), or [] when it is not a directory."""
    _target, real = resolve(root, output)
    if not os.path.isdir(real):
        return []
    out = []
    for name in sorted(os.listdir(real)):
        if name.endswith(".conf"):
            shown = output.rstrip("/") + "/" + name
            out.append((shown, bc.bls_entry(read_text(os.path.join(real, name), shown), shown)["options"]))
    return out


# EFI variables of the Boot Loader Interface (systemd's boot loader and stub set them; GRUB 2.12's bli module sets
# LoaderInfo too, naming itself): <name>-<vendor GUID> under /sys/firmware/efi/efivars.
BLI_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
EFI_SYSTEM_PARTITIONS = ("/boot/efi", "/efi", "/boot")


def _efivar_text(root, name):
    """The UTF-16 string of an EFI variable (after its 4 bytes of attributes), or None."""
    real = host_path(root, f"/sys/firmware/efi/efivars/{name}-{BLI_GUID}")
    try:
        with open(real, "rb") as handle:
            data = handle.read()[4:]
    except OSError:
        return None
    return data.decode("utf-16-le", "replace").split("\0", 1)[0].strip() or None


def other_boot_mechanisms(root, family):
    """The signs that this host boots through something else than GRUB's defaults, each ``"what (evidence)"``:
    systemd-boot (its loader.conf on the EFI system partition, or the running boot loader naming itself),
    unified kernel images (EFI/Linux/*.efi there, kernel-install's layout=uki, or systemd-stub having booted the
    running kernel), and on the Debian family kernel-install's /etc/kernel/cmdline (on the RHEL family that file
    is GRUB's own: grub2-mkconfig --update-bls-cmdline writes it). Empty on a host booted by GRUB."""
    found = []

    def exists(path):
        return os.path.lexists(host_path(root, path))

    if family == "Debian" and exists("/etc/kernel/cmdline"):
        found.append("kernel-install / systemd-boot, which takes the kernel command line from /etc/kernel/cmdline "
                     "(/etc/kernel/cmdline exists)")
    for esp in EFI_SYSTEM_PARTITIONS:
        if exists(esp + "/loader/loader.conf"):
            found.append(f"systemd-boot ({esp}/loader/loader.conf exists)")
        ukis = sorted(glob.glob(glob.escape(host_path(root, esp + "/EFI/Linux")) + "/*.efi"))
        if ukis:
            found.append("unified kernel images, whose command line is built into each image "
                         f"({esp}/EFI/Linux/{os.path.basename(ukis[0])})")
    try:
        install_conf = read_text(host_path(root, "/etc/kernel/install.conf"), "/etc/kernel/install.conf")
    except (FileNotFoundError, BootFilesError):
        install_conf = ""
    for line in install_conf.splitlines():
        key, _sep, value = line.strip().partition("=")
        layout = value.strip().strip("\"'")
        if key.strip() == "layout" and layout in ("uki", "bls"):
            found.append(f"kernel-install (/etc/kernel/install.conf sets layout={layout})")
    loader = _efivar_text(root, "LoaderInfo")
    if loader and loader.lower().startswith("systemd-boot"):
        found.append(f"systemd-boot (the running system was booted by it: LoaderInfo {loader})")
    stub = _efivar_text(root, "StubInfo")
    if stub:
        found.append(f"a unified kernel image (the running kernel was started by its stub: StubInfo {stub})")
    return found
