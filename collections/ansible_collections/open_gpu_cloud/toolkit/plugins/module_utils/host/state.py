# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The host's memory of unfinished work (pure functions; plugins/modules/host_state.py reads and writes the file).

The state file (``/var/lib/open-gpu-cloud/passthrough_host.json`` on the host) records:

* ``pending``: steps that must run before a reboot can settle the plan - ``initramfs`` (rebuild the
  initramfs) and ``boot_config`` (regenerate the boot configuration). A step is marked before it runs
  and cleared only when it succeeded, so a failed run is retried by the next one.
* ``reboot``: the reboot made to settle the plan - the boot id the host had when it was rebooted and a
  fingerprint of what that reboot was to apply (the generated boot line and what was pending). A host
  that came back (another boot id) with the same fingerprint still pending is not rebooted again:
  the reboot did not help, and only a changed configuration can.
* ``generated_from``: a fingerprint of the kernel arguments the GRUB files gave when the boot-config tool last
  succeeded (``boot_config.inputs_fingerprint``). When the generated configuration lacks the plan while the files give it,
  this tells "the tool has not run since the files changed" (it is run) from "something outside the files
  overrides them" (the reboot is refused with that cause).

* ``inputs``: for each step, a fingerprint of what its tool last ran on successfully (``inputs_fingerprint``; for the
  initramfs, the files it takes, as plugins/modules/host_files.py computes it). A step whose inputs are not those it last ran
  on is due - also when the file is gone or holds no fingerprint (removed by hand, or from an earlier version): the
  initramfs is rebuilt after the last change of its inputs whatever happened to this file.
* ``machine``: a digest of the host's machine id. A file that names another machine (copied with an image) is not
  this host's record: ``read`` sets it aside and starts afresh (every step repeated once, no reboot on record), so a
  host that was never rebooted is not refused a reboot as if it had been.

The file is private (mode 0600). The record is written ahead: a module that is about to write files whose change needs a step marks the step
pending, durably (``save``: a temporary file, fsync, rename, fsync of the directory), before it writes the first
of them; the step is cleared only once its tool succeeded. A run killed anywhere in between leaves the step
pending, and the next run repeats it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import tempfile

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf

STEPS = ("initramfs", "boot_config")
VERSION = 2
MACHINE_ID = "/etc/machine-id"

# What read() returns: the state (normalised), the file's real path, its text (None: no file), and a note for the
# operator (None, or why the file's record was set aside: it was written on another machine).
Read = collections.namedtuple("Read", "state real text note")


class StateError(Exception):
    """A state file or a request this model refuses, worded for the operator."""


def empty(machine=""):
    return {"version": VERSION, "machine": machine, "pending": [], "reboot": None, "generated_from": None,
            "inputs": {}}


def afresh(machine=""):
    """The state of a host nothing is known of (no record of its own): every step pending, so each is repeated once,
    and no reboot on record."""
    return dict(empty(machine), pending=list(STEPS))


def machine_digest(root):
    """The host's machine id (``/etc/machine-id`` under ``root``) as a digest, or "" when it has none: what the state
    records to tell its own host from a copy of the file on another machine, without storing the id itself."""
    try:
        real = bf.host_path(root, MACHINE_ID, "machine id")
        with open(real, encoding="utf-8") as handle:
            machine = handle.read().strip()
    except (OSError, bf.BootFilesError):
        return ""
    return hashlib.sha256(b"open-gpu-cloud host state\0" + machine.encode("utf-8")).hexdigest()[:16] if machine else ""


def load(text, where, machine=""):
    """Parse the state file's text; an empty text (no file yet) is the empty state. Raises StateError naming the file
    and the fix for anything else. A state written on another machine (its ``machine`` is not ``machine``) is not
    this host's record: see ``read``."""
    if text is None or not text.strip():
        return empty(machine)
    advice = (f"remove {where} to start afresh: the next run then repeats the initramfs and boot-config steps once "
              "(and reboots only if the running system still lacks the plan)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError(f"{where} is not valid JSON ({exc}): {advice}") from None
    inputs = data.get("inputs", {}) if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("pending", []), list) \
            or any(p not in STEPS for p in data.get("pending", [])) \
            or not (data.get("reboot") is None or isinstance(data.get("reboot"), dict)) \
            or not (data.get("generated_from") is None or isinstance(data.get("generated_from"), str)) \
            or not isinstance(data.get("machine", ""), str) \
            or not (isinstance(inputs, dict) and all(k in STEPS and isinstance(v, str) for k, v in inputs.items())):
        raise StateError(f"{where} does not hold a passthrough_host state (pending: a list of {', '.join(STEPS)}; "
                         "reboot: an object or null; generated_from: a string or null; inputs: an object of "
                         f"fingerprints): {advice}")
    state = empty(data.get("machine") or machine)
    state["pending"] = [p for p in STEPS if p in data.get("pending", [])]
    state["reboot"] = data.get("reboot")
    state["generated_from"] = data.get("generated_from")
    state["inputs"] = dict(inputs)
    return state


def read(root, path):
    """The state file ``path`` (as on the host) under ``root``, read-only: ``Read(state, real path, text or None when
    there is no file, note)``. Every module that reads it goes through here; errors are StateError, worded for the
    operator (the role variable is passthrough_host_state_file).

    A file written on another machine (copied with an image, or by hand) is set aside: its steps and its reboot are not
    this host's, so the state is ``afresh`` - every step repeated once, no reboot on record - and ``note`` says so.
    A path that is a directory or a symbolic link is refused."""
    try:
        real = bf.host_path(root, path, "path (passthrough_host_state_file)")
        if os.path.islink(real) or os.path.isdir(real):
            kind = "symbolic link" if os.path.islink(real) else "directory"
            raise StateError(f"passthrough_host_state_file ({path}) is a {kind} on the host, not a file: nothing was "
                             "written. Give passthrough_host_state_file the path of a file of its own (the default is "
                             "/var/lib/open-gpu-cloud/passthrough_host.json), then run this play again")
        text = bf.read_text(real, path) if os.path.exists(real) else None
    except bf.BootFilesError as exc:
        raise StateError(str(exc)) from None
    machine = machine_digest(root)
    state = load(text, path, machine)
    if machine and text is not None and state["machine"] and state["machine"] != machine:
        return Read(afresh(machine), real, text,
                    f"{path} was written on another machine (its machine id is not this host's: copied with an image?): "
                    "its pending steps and its reboot record are not this host's, so they are set aside - the "
                    "initramfs and boot-config steps are repeated once, and the host is rebooted only if the running "
                    "system lacks the plan")
    if machine and not state["machine"]:
        state["machine"] = machine
    return Read(state, real, text, None)


def dump(state):
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def update(state, pending_add=(), pending_remove=(), record_reboot=None, clear_reboot=False, generated_from=None,
           inputs=None):
    """The state after one change (a new dict; the input is not modified). ``generated_from`` (a fingerprint,
    ``boot_config.inputs_fingerprint``) records what the boot-config tool just generated from; ``inputs``
    ({step: fingerprint}, host_files' ``inputs``) what a step's tool just ran on."""
    for step in list(pending_add) + list(pending_remove) + list(inputs or {}):
        if step not in STEPS:
            raise StateError(f"unknown step {step!r} (known: {', '.join(STEPS)})")
    pending = (set(state["pending"]) | set(pending_add)) - set(pending_remove)
    new = dict(state, version=VERSION, pending=[p for p in STEPS if p in pending],
               inputs=dict(state.get("inputs") or {}, **(inputs or {})))
    if clear_reboot:
        new["reboot"] = None
    if record_reboot is not None:
        new["reboot"] = dict(record_reboot)
    if generated_from:
        new["generated_from"] = generated_from
    return new


def save(real, state, shown=None):
    """Write ``state`` to the real path ``real`` durably: a temporary file beside it, flushed and fsync'd, renamed
    over it, and the directory fsync'd, so a crash leaves the old state or the new one, never a torn file or a lost
    rename. The directory is created (0755) when missing. Raises StateError naming ``shown``."""
    directory = os.path.dirname(real)
    tmp = None
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".host_state.", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(dump(state).encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.rename(tmp, real)
        tmp = None
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise StateError(f"cannot write {shown or real}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)


def inputs_fingerprint(items):
    """A fingerprint of what a step's tool runs on: ``items`` (any JSON-able description of its inputs as they are
    to be, e.g. the content of each file the initramfs takes)."""
    data = json.dumps(items, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def write_ahead(root, path, steps):
    """Mark ``steps`` pending in the state file ``path`` (as on the host, under ``root``) before the files whose
    change needs them are written; nothing is written when they are pending already. Returns the state after."""
    state, real, text, _note = read(root, path)
    new = update(state, pending_add=steps)
    if new != state or text is None:
        save(real, new, path)
    return new


def fingerprint(boot_args, pending):
    """What a reboot is to apply: the generated boot line(s) and the plan's pending list."""
    data = json.dumps({"boot": [list(a) for a in boot_args], "pending": sorted(pending)}, sort_keys=True)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def reboot_decision(state, boot_id, print_now):
    """Whether a reboot may be made now. Returns (allowed, reason)."""
    last = state.get("reboot")
    if not last:
        return True, "no reboot recorded"
    if last.get("boot_id") == boot_id:
        return True, f"the recorded reboot (boot {boot_id}) has not happened yet"
    if last.get("fingerprint") != print_now:
        return True, f"the configuration changed since the reboot from boot {last.get('boot_id')}"
    return False, (f"the host was already rebooted (from boot {last.get('boot_id')}, now boot {boot_id}) to apply this "
                   "same configuration, and the running system still lacks it")
