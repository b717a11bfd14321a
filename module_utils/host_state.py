# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The host's memory of unfinished work (pure functions; library/host_state.py reads and writes the file).

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

The record is written ahead: a module that is about to write files whose change needs a step marks the step
pending, durably (``save``: a temporary file, fsync, rename, fsync of the directory), before it writes the first
of them; the step is cleared only once its tool succeeded. A run killed anywhere in between leaves the step
pending, and the next run repeats it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from ansible.module_utils import boot_files as bf

STEPS = ("initramfs", "boot_config")
VERSION = 1


class StateError(Exception):
    """A state file or a request this model refuses, worded for the operator."""


def empty():
    return {"version": VERSION, "pending": [], "reboot": None, "generated_from": None}


def load(text, where):
    """Parse the state file's text; an empty text (no file yet) is the empty state."""
    if text is None or not text.strip():
        return empty()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError(f"{where} is not valid JSON ({exc}): remove it to start afresh; the next run then repeats the "
                         "initramfs and boot-config steps") from None
    if not isinstance(data, dict) or not isinstance(data.get("pending", []), list) \
            or any(p not in STEPS for p in data.get("pending", [])) \
            or not (data.get("reboot") is None or isinstance(data.get("reboot"), dict)) \
            or not (data.get("generated_from") is None or isinstance(data.get("generated_from"), str)):
        raise StateError(f"{where} does not hold a passthrough_host state (pending: a list of {', '.join(STEPS)}; "
                         "reboot: an object or null; generated_from: a string or null): remove it to start afresh")
    state = empty()
    state["pending"] = [p for p in STEPS if p in data.get("pending", [])]
    state["reboot"] = data.get("reboot")
    state["generated_from"] = data.get("generated_from")
    return state


def read(root, path):
    """The state file ``path`` (as on the host) under ``root``, read-only: (state, its real path, its text or None
    when there is no file). Every module that reads it goes through here; errors are StateError, worded for the
    operator (the role variable is passthrough_host_state_file)."""
    try:
        real = bf.host_path(root, path, "path (passthrough_host_state_file)")
        text = bf.read_text(real, path) if os.path.exists(real) else None
    except bf.BootFilesError as exc:
        raise StateError(str(exc)) from None
    return load(text, path), real, text


def dump(state):
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def update(state, pending_add=(), pending_remove=(), record_reboot=None, clear_reboot=False, generated_from=None):
    """The state after one change (a new dict; the input is not modified). ``generated_from`` (a fingerprint,
    ``boot_config.inputs_fingerprint``) records what the boot-config tool just generated from."""
    for step in list(pending_add) + list(pending_remove):
        if step not in STEPS:
            raise StateError(f"unknown step {step!r} (known: {', '.join(STEPS)})")
    pending = (set(state["pending"]) | set(pending_add)) - set(pending_remove)
    new = {"version": VERSION, "pending": [p for p in STEPS if p in pending], "reboot": state.get("reboot"),
           "generated_from": state.get("generated_from")}
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
        os.chmod(tmp, 0o644)
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


def write_ahead(root, path, steps):
    """Mark ``steps`` pending in the state file ``path`` (as on the host, under ``root``) before the files whose
    change needs them are written; nothing is written when they are pending already. Returns the state after."""
    state, real, _text = read(root, path)
    new = update(state, pending_add=steps)
    if new != state:
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
