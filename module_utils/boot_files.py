# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Reading a host's boot files under a root directory (``/`` on a real host, a sandbox copy in tests):
paths resolved the way the host itself would resolve them (an absolute symlink inside a sandbox
points into the sandbox), and the files grub-mkconfig sources, in its order. Shared by the
grub_cmdline and boot_entries modules; the rules themselves are in boot_config."""

from __future__ import annotations

import os

try:
    from ansible.module_utils import boot_config as bc
except ImportError:  # pragma: no cover - scripts outside Ansible put module_utils on sys.path
    import boot_config as bc  # type: ignore

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
        _, real_dir = resolve(root, dropin_dir)
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
