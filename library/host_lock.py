#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""Take or release the host phase's lock on a host (one run of the passthrough_host role at a time)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: One run of the host phase per host at a time
description:
  - Takes (O(state=held)) or releases (O(state=released)) the lock file O(path) under O(root), which names the run
    holding it (O(owner)). The rules are in module_utils/host_lock.py.
  - Taking it - a missing lock, or one this run holds already, is taken; one whose run is O(takeover) (found gone by the
    control host) is replaced; any other is left as it is and returned in RV(held_by), with RV(acquired) false.
  - Releasing it removes the file only when this run holds it.
  - Every check and change happens under an exclusive flock on the lock's directory, so two runs cannot both take it;
    the file is written through a temporary file, fsync and rename.
  - Run through its action plugin (action_plugins/host_lock.py), which fills O(owner) with the run's identity on the
    control host, takes over a lock whose run is gone, and fails naming the run that holds it.
  - The lock is bookkeeping of the run, not configuration of the host - it is gone when the run ends - so the module
    never reports C(changed).
options:
  owner:
    description: The record naming this run (run, controller, user, pid, start_time, boot_id, machine_id).
    type: dict
    required: true
  path:
    description: The lock file as on the host (absolute).
    type: str
    default: /var/lib/open-gpu-cloud/passthrough_host.lock
  root:
    description: Directory the host's files are under; C(/) on a real host.
    type: str
    default: /
  state:
    description: C(held) takes the lock, C(released) gives it back.
    type: str
    choices: [held, released]
    default: held
  takeover:
    description: The run id of a lock found stale; the lock is replaced only if it still names that run.
    type: str
    default: ''
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Check mode takes nothing; it reports the run holding the lock, if any.
author:
  - open-gpu-cloud contributors
"""

EXAMPLES = r"""
- name: Take the host's lock
  host_lock:
    path: /var/lib/open-gpu-cloud/passthrough_host.lock

- name: Release it
  host_lock:
    path: /var/lib/open-gpu-cloud/passthrough_host.lock
    state: released
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lock now (O(state=held)).
  returned: success
  type: bool
held_by:
  description: The record of another run holding the lock (when RV(acquired) is false), else null.
  returned: success
  type: dict
took_over:
  description: The record of the stale lock that was replaced, else null.
  returned: success
  type: dict
released:
  description: Whether the lock file was removed (O(state=released)).
  returned: success
  type: bool
path:
  description: The lock file on this machine.
  returned: always
  type: str
"""

import datetime
import fcntl
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils import boot_files as bf
from ansible.module_utils import host_lock as hl


def _read(real, shown):
    try:
        with open(real, encoding="utf-8") as handle:
            return hl.load(handle.read(), shown)
    except FileNotFoundError:
        return None


def _write(real, owner):
    directory = os.path.dirname(real)
    fd, tmp = tempfile.mkstemp(prefix=".host_lock.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(hl.dump(owner))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, real)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def apply(real, shown, params, check_mode):
    """Take or release the lock at ``real``; the caller holds the directory's flock."""
    owner = dict(params["owner"])
    current = _read(real, shown)
    result = dict(acquired=False, held_by=None, took_over=None, released=False)
    if params["state"] == "released":
        if current is not None and current.get("run") == owner.get("run") and not check_mode:
            os.unlink(real)
            result["released"] = True
        return result
    if current is None or current.get("run") == owner.get("run"):
        result["acquired"] = True
    elif params["takeover"] and current.get("run") == params["takeover"]:
        result.update(acquired=True, took_over=current)
    else:
        result["held_by"] = current
        return result
    if not check_mode and (current is None or current.get("run") != owner.get("run")):
        owner["since"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        _write(real, owner)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            owner=dict(type="dict", required=True),
            path=dict(type="str", default="/var/lib/open-gpu-cloud/passthrough_host.lock"),
            root=dict(type="str", default="/"),
            state=dict(type="str", choices=["held", "released"], default="held"),
            takeover=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not isinstance(params["owner"].get("run"), str) or not params["owner"]["run"]:
        module.fail_json(msg="owner must name its run (run through the host_lock action plugin)")
    try:
        real = bf.host_path(params["root"], params["path"], "path (passthrough_host_lock_file)")
    except bf.BootFilesError as exc:
        module.fail_json(msg=to_native(exc))
    directory = os.path.dirname(real)
    if module.check_mode and not os.path.isdir(directory):
        module.exit_json(changed=False, path=real, acquired=params["state"] == "held", held_by=None, took_over=None,
                         released=False)
    try:
        if not module.check_mode:
            os.makedirs(directory, mode=0o755, exist_ok=True)
        guard = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            result = apply(real, params["path"], params, module.check_mode)
        finally:
            os.close(guard)
    except hl.LockError as exc:
        module.fail_json(msg=to_native(exc), path=real)
    except OSError as exc:
        module.fail_json(msg="cannot %s the lock %s: %s" % ("take" if params["state"] == "held" else "release",
                                                              params["path"], exc.strerror or exc), path=real)
    module.exit_json(changed=False, path=real, **result)


if __name__ == "__main__":
    main()
