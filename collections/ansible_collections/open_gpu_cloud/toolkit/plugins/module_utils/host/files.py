# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Files a role owns on a host, all in one pass: plan each file's change from what is there, then apply it
(plugins/modules/host_files.py is the module; these are its rules).

An entry says what one path must be (paths as on the host, below ``root``: ``/`` on a real host, a sandbox
copy in tests):

* ``file``: exactly ``content`` (the role renders it). A symlink in its place is replaced by the file, never
  written through (what ``ansible.builtin.copy``/``template`` do), so nothing lands outside the root.
* ``block``: ``block`` between two marker lines inside a file the operator owns, the rest of the file kept
  (the text ``ansible.builtin.blockinfile`` writes, appended at the end when the markers are missing; a file
  written by it is found unchanged). A symlinked file is edited at its target, resolved the way the host
  resolves it (inside the root).
* ``link``: a symbolic link to ``src`` (what ``systemctl enable`` makes); whatever else is there is replaced.
* ``absent``: no file there (a link is removed, not its target; a directory is refused).

The directories above a path are resolved the host's way (an absolute link inside a sandbox points into the
sandbox; ``..`` stops at the root) and created with ``directory_mode`` when missing; existing directories are
left as they are. ``mode`` (octal string) is set when given; without it a new file gets 0644 and an existing
one keeps its mode. Owners are never changed.

``plan(root, entries)`` reads and decides (pure but for reading the files); ``apply(action, move)`` carries
out one action; ``plan`` again after ``apply`` finds nothing to do.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs

STATES = ("file", "block", "link", "absent")
KEYS = {"path", "state", "content", "block", "marker", "src", "mode", "needs"}
MODE_RE = re.compile(r"^0?[0-7]{3,4}$")
DEFAULT_FILE_MODE = 0o644


class HostFilesError(Exception):
    """An entry or a file on the host this model refuses, worded for the operator."""


def _str(entry, key, where, required=False):
    value = entry.get(key)
    if value is None:
        if required:
            raise HostFilesError(f"{where}: {key} is required for state {entry.get('state', 'file')}")
        return None
    if not isinstance(value, str):
        raise HostFilesError(f"{where}: {key} must be a string, not {type(value).__name__} ({value!r})")
    return value


def validate(entries):
    """Normalised copies of ``entries`` (dicts); every problem of one entry is an error naming it and its
    path. Types are checked, never coerced: a mode given as a number (YAML reads 0644 as 420) is refused."""
    if not isinstance(entries, list):
        raise HostFilesError(f"files must be a list of entries, not {type(entries).__name__}")
    out, seen = [], {}
    for index, entry in enumerate(entries):
        where = f"files[{index}]"
        if not isinstance(entry, dict):
            raise HostFilesError(f"{where} must be a dict (path, state, content, ...), not {type(entry).__name__}")
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            raise HostFilesError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
        path = _str(entry, "path", where, required=True)
        where = f"{where} ({path})"
        if not path.startswith("/"):
            raise HostFilesError(f"{where}: the path is not absolute: give it as on the host, e.g. "
                                 "/etc/modprobe.d/vfio.conf")
        norm = os.path.normpath(path)
        if norm == "/":
            raise HostFilesError(f"{where}: the path names the root directory, not a file")
        state = _str(entry, "state", where) or "file"
        if state not in STATES:
            raise HostFilesError(f"{where}: state {state!r} is not one of {', '.join(STATES)}")
        mode = _str(entry, "mode", where)
        if mode is not None and not MODE_RE.match(mode):
            raise HostFilesError(f"{where}: mode {mode!r} is not an octal mode such as \"0644\" (quote it in YAML)")
        if mode is not None and state in ("link", "absent"):
            raise HostFilesError(f"{where}: mode is not used with state {state}")
        needs = entry.get("needs") or []
        if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
            raise HostFilesError(f"{where}: needs must be a list of strings, not {needs!r}")
        norm_entry = dict(path=norm, state=state, mode=int(mode, 8) if mode is not None else None, needs=list(needs))
        for key, only in (("content", "file"), ("block", "block"), ("marker", "block"), ("src", "link")):
            value = _str(entry, key, where, required=(state == only and key != "marker"))
            if value and state != only:
                raise HostFilesError(f"{where}: {key} is only used with state {only} (this entry is state {state})")
            norm_entry[key] = value if state == only else None
        if state == "block":
            marker = norm_entry["marker"] or "# {mark} ANSIBLE MANAGED BLOCK"
            if "{mark}" not in marker or "\n" in marker:
                raise HostFilesError(f"{where}: marker {marker!r} must be one line holding {{mark}}")
            norm_entry["marker"] = marker
        if norm in seen:
            other_index, other_path = seen[norm]
            raise HostFilesError(f"{where}: the same file as files[{other_index}] ({other_path}); give each path once")
        seen[norm] = (index, path)
        out.append(norm_entry)
    return out


def inputs(entries):
    """``{step: fingerprint}`` of what each step named in the entries' ``needs`` runs on: the entries that need it, as
    they are to be (path, state, content, block, marker, link target, mode). host_state records the fingerprint a
    step's tool last ran on; a step whose inputs differ from it is due, whether or not a file changes in this run."""
    entries = validate(entries)
    steps = sorted({step for entry in entries for step in entry["needs"]})
    return {step: hs.inputs_fingerprint([[e["path"], e["state"], e["content"], e["block"], e["marker"], e["src"],
                                          e["mode"]] for e in entries if step in e["needs"]])
            for step in steps}


def block_edit(text, block, marker):
    """``text`` (None: no file) with ``block`` between the marker lines, as ``ansible.builtin.blockinfile``
    (state present, insertafter EOF, markers BEGIN/END) writes it: an existing marked block is replaced in
    place, otherwise the block is appended; an empty block removes the markers and what is between them."""
    marker0 = marker.replace("{mark}", "BEGIN") + "\n"
    marker1 = marker.replace("{mark}", "END") + "\n"
    lines = (text or "").splitlines(True)
    if block:
        if not block.endswith("\n"):
            block += "\n"
        blocklines = [marker0] + block.splitlines(True) + [marker1]
    else:
        blocklines = []
    n0 = n1 = None
    for i, line in enumerate(lines):
        if line == marker0:
            n0 = i
        if line == marker1:
            n1 = i
    if n0 is None or n1 is None:
        n0 = len(lines)
    elif n0 < n1:
        lines[n0:n1 + 1] = []
    else:
        lines[n1:n0 + 1] = []
        n0 = n1
    if n0 > 0 and not lines[n0 - 1].endswith("\n"):
        lines[n0 - 1] += "\n"
    lines[n0:n0] = blocklines
    return "".join(lines)


def _dir_of(root, path):
    """The real directory a host path's parent names (links followed inside the root) and the host
    directories that are missing, outermost first."""
    parent_host, parent_real = bf.resolve(root, os.path.dirname(path))
    missing = []
    probe_host, probe_real = parent_host, parent_real
    while not os.path.lexists(probe_real):
        missing.insert(0, probe_host)
        probe_host = os.path.dirname(probe_host)
        probe_host, probe_real = bf.resolve(root, probe_host)
    if not os.path.isdir(probe_real):
        raise HostFilesError(f"{path}: {probe_host} is not a directory")
    return parent_real, missing


def _read(real, shown):
    try:
        with open(real, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise HostFilesError(f"cannot read {shown}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise HostFilesError(f"{shown} is not UTF-8 text; it was not changed (look at it: the role writes only text "
                             "files)") from None


def _mode_str(mode):
    return f"{mode:04o}"


def plan_entry(root, entry):
    """What one entry needs: a dict with ``path`` (as on the host), ``real`` (where it is on this machine),
    ``state``, ``changed``, ``action`` (``create``, ``update``, ``replace-link``, ``chmod``, ``remove``,
    ``link``, or ``none``), the ``diff`` entries, and what ``apply`` needs."""
    path, state = entry["path"], entry["state"]
    shown = bf.host_path(root, path)
    act = dict(path=path, state=state, needs=entry["needs"], changed=False, action="none", diff=[], mkdirs=[])
    parent_real, missing = _dir_of(root, path)
    real = os.path.join(parent_real, os.path.basename(path))
    if state == "block" and not missing and os.path.islink(real):
        target = bf.resolve(root, path)[0]  # edited at its target, inside the root
        parent_real, missing = _dir_of(root, target)
        real = os.path.join(parent_real, os.path.basename(target))
    act["real"] = real
    exists = os.path.lexists(real)
    is_link = exists and os.path.islink(real)
    if exists and not is_link and os.path.isdir(real):
        raise HostFilesError(f"{real} is a directory; the role expects "
                             f"{'nothing' if state == 'absent' else 'a ' + ('link' if state == 'link' else 'file')} "
                             "there: move the directory away")
    if exists and not is_link and not os.path.isfile(real):
        raise HostFilesError(f"{real} is not a regular file (a device, socket or pipe): remove it")

    if state == "absent":
        if exists:
            before = f"symlink to {os.readlink(real)}\n" if is_link else _read(real, real)
            act.update(changed=True, action="remove",
                       diff=[dict(before_header=real, after_header=f"{real} (removed)", before=before, after="")])
        return act

    if state == "link":
        current = os.readlink(real) if is_link else None
        if current != entry["src"]:
            before = dict(path=real, state="link" if is_link else ("file" if exists else "absent"))
            if is_link:
                before["src"] = current
            act.update(changed=True, action="link", src=entry["src"], mkdirs=missing,
                       diff=[dict(before_header=real, after_header=real, before=before,
                                  after=dict(path=real, state="link", src=entry["src"]))])
        return act

    before_text = None if (not exists or is_link) else _read(real, real)
    after_text = entry["content"] if state == "file" else block_edit(before_text, entry["block"], entry["marker"])
    current_mode = stat.S_IMODE(os.lstat(real).st_mode) if exists and not is_link else None
    want_mode = entry["mode"] if entry["mode"] is not None else (current_mode if current_mode is not None
                                                                 else DEFAULT_FILE_MODE)
    act.update(text=after_text, mode=want_mode, mkdirs=missing, unlink_first=is_link)
    if is_link:
        act.update(changed=True, action="replace-link", diff=[dict(
            before_header=f"{real} (a symlink to {os.readlink(real)})", after_header=real, before="",
            after=after_text)])
    elif before_text is None:
        act.update(changed=True, action="create",
                   diff=[dict(before_header=real, after_header=real, before="", after=after_text)])
    elif before_text != after_text:
        act.update(changed=True, action="update",
                   diff=[dict(before_header=real, after_header=real, before=before_text, after=after_text)])
    if current_mode is not None and current_mode != want_mode:
        if not act["changed"]:
            act["action"] = "chmod"
        act["changed"] = True
        act["diff"].append(dict(before_header=f"{real} (file attributes)", after_header=f"{real} (file attributes)",
                                before=dict(path=real, mode=_mode_str(current_mode)),
                                after=dict(path=real, mode=_mode_str(want_mode))))
    return act


def plan(root, entries):
    """Every entry's action (see ``plan_entry``), in the given order. ``entries`` are validated first."""
    if not isinstance(root, str) or not root.startswith("/"):
        raise HostFilesError(f"root {root!r} is not an absolute path")
    if not os.path.isdir(root):
        raise HostFilesError(f"root {root} is not a directory on this machine")
    try:
        actions = [plan_entry(root, entry) for entry in validate(entries)]
    except bf.BootFilesError as exc:
        raise HostFilesError(str(exc)) from None
    first_at = {}
    for index, act in enumerate(actions):  # two entries on one file would undo each other's edit on every run
        other = first_at.setdefault(os.path.normpath(act["real"]), index)
        if other != index:
            raise HostFilesError(
                f"files[{other}] ({actions[other]['path']}) and files[{index}] ({act['path']}) are the same file on "
                f"this host ({act['real']}, reached through a symlink): each run would undo the other's edit. Replace "
                "the symlink with a file, or point one of the role's path variables elsewhere")
    made = set()
    for act in actions:  # a missing directory is made (and shown) once, by the first entry below it
        mkdirs = [d for d in act["mkdirs"] if d not in made] if act["changed"] else []
        made.update(mkdirs)
        act["mkdirs"] = mkdirs
        act["diff"][:0] = [dict(before_header=r, after_header=r, before=dict(path=r, state="absent"),
                                after=dict(path=r, state="directory"))
                           for r in (bf.host_path(root, d) for d in mkdirs)]
    return actions


def replace_file(real, text, mode, move):
    """Write ``text`` to a temporary file beside ``real``, flush it, and ``move(tmp, real)`` (the module's
    ``atomic_move``: the rename keeps an existing file's owner); then set ``mode``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        move(tmp, real)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    os.chmod(real, mode)


def plain_move(tmp, real):
    """``move`` for ``apply`` outside a module: rename over the file, keeping its owner."""
    if os.path.exists(real):
        st = os.stat(real)
        os.chown(tmp, st.st_uid, st.st_gid)
    os.replace(tmp, real)


def apply(root, act, move=plain_move, directory_mode=0o755):
    """Carry out one planned action (nothing when it is unchanged)."""
    if not act["changed"]:
        return
    for host_dir in act.get("mkdirs", []):
        real_dir = bf.host_path(root, host_dir)
        if not os.path.isdir(real_dir):
            os.mkdir(real_dir)
            os.chmod(real_dir, directory_mode)
    real = act["real"]
    if act["action"] == "remove":
        os.unlink(real)
    elif act["action"] == "link":
        if os.path.lexists(real):
            os.unlink(real)
        os.symlink(act["src"], real)
    elif act["action"] == "chmod":
        os.chmod(real, act["mode"])
    else:
        if act.get("unlink_first"):
            os.unlink(real)
        replace_file(real, act["text"], act["mode"], move)
