#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Documentation of the host_lock task; the work is its action plugin's (action_plugins/host_lock.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: One run of the host phase per host at a time
description:
  - Takes (O(state=held)) or releases (O(state=released)) the lock file O(path) under O(root), which names the run
    holding it - the control host, the user, the ansible-playbook pid and its start time, the control host's boot id
    and machine id, since when. The rules are in module_utils/host_lock.py.
  - Taking it - a missing lock, or one this run holds already, is taken. One held by another run is taken over when
    that run is gone (its process on this control host ended or was replaced, or this control host rebooted since);
    otherwise the task fails naming that run (who, where, which pid, since when) and the fix. A run on another control
    host cannot be seen from here, so its lock is never taken over silently.
  - Releasing it removes the file only when this run holds it.
  - The file is read and written on the host by a POSIX sh script (module_utils/host_lock.py HOST_SCRIPT) under a
    flock of the lock's directory, so two runs cannot both take it, writing through a temporary file and a rename.
    It needs C(sh) and C(flock) (util-linux) on the host, and no module process (this action plugin runs it).
  - The lock is bookkeeping of the run, not configuration of the host - it is gone when the run ends - so the task
    never reports C(changed).
options:
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
extends_documentation_fragment: [ogc_attributes.check_only]
attributes:
  action:
    support: full
notes:
  - Check mode takes nothing; it fails, as a real run would, when another live run holds the lock.
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
  description: The record of the run holding the lock when it is not this one, else null.
  returned: always
  type: dict
took_over:
  description: The record of the lock that was taken over (its run was gone), else null.
  returned: success
  type: dict
released:
  description: Whether the lock file was removed (O(state=released)).
  returned: success
  type: bool
path:
  description: The lock file on the host.
  returned: success
  type: str
"""
