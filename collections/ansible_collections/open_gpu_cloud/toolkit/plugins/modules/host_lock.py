#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Documentation of the host_lock task; the work is its action plugin's (plugins/action/host_lock.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: One run of the host phase per host at a time, under a lease
description:
  - Takes (O(state=held)), renews (O(state=renewed)) or releases (O(state=released)) the lock file O(path) under
    O(root), mode 0600, which names the run holding it - digests of the control host and the run (never the raw
    machine id), the control host's name, the user, the ansible-playbook pid and its start time, since when - and
    carries its lease's expiry, O(lease) seconds from now on the host's own clock. The rules are in
    plugins/module_utils/coordination/ (host_lock.py, leases.py).
  - Taking it - a missing lock, or one this run holds already (renewed), is taken. One held by another run is taken
    over when its lease ran out (from any control host), or when its run is gone from this control host (its
    process ended or was replaced, or this control host rebooted since). Otherwise the task fails naming that run,
    when its lease runs out, and the fix.
  - Renewing it extends this run's lease for O(lease) seconds from now, and fails when the lock is no longer this
    run's (its lease ran out and another run took it, or the file was removed), so the run stops on the host rather
    than act beside another. The role renews before each step that may take long, for that step's timeout.
  - Releasing it removes the file only when this run holds it.
  - A lock path or state path (O(state_file)) that is a directory or a symbolic link is refused naming its variable,
    before anything is written.
  - The file is read and written on the host by a POSIX sh script under a flock of the lock's directory, so two
    runs cannot both take it, writing through a temporary file and a rename. It needs C(sh), C(date), C(cksum) and
    C(flock) (util-linux) on the host, and no module process (this action plugin runs it).
  - The lock is bookkeeping of the run, not configuration of the host - it is gone when the run ends - so the task
    never reports C(changed).
options:
  host:
    description: The host's name in messages. Default the task's inventory_hostname (give it when delegating).
    type: str
  lease:
    description: Seconds the lease lasts from now (the next step's timeout and the role's lease).
    type: int
    default: 900
  path:
    description: The lock file as on the host (absolute).
    type: str
    default: /var/lib/open-gpu-cloud/passthrough_host.lock
  root:
    description: Directory the host's files are under; C(/) on a real host.
    type: str
    default: /
  state:
    description: C(held) takes the lock, C(renewed) extends this run's lease, C(released) gives it back.
    type: str
    choices: [held, renewed, released]
    default: held
  state_file:
    description: The role's state file as on the host, checked to be no directory or symbolic link.
    type: str
    default: /var/lib/open-gpu-cloud/passthrough_host.json
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only, open_gpu_cloud.toolkit.attributes.action_plugin]
notes:
  - Check mode takes nothing; it fails, as a real run would, when another live run holds the lock.
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Take the host's lock
  open_gpu_cloud.toolkit.host_lock:
    path: /var/lib/open-gpu-cloud/passthrough_host.lock
    lease: 900

- name: Keep it through a tool that may take half an hour
  open_gpu_cloud.toolkit.host_lock:
    state: renewed
    lease: 2700

- name: Release it
  open_gpu_cloud.toolkit.host_lock:
    path: /var/lib/open-gpu-cloud/passthrough_host.lock
    state: released
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lock now (O(state=held), O(state=renewed)).
  returned: success
  type: bool
expires:
  description: When this run's lease runs out unless renewed (UTC, the host's clock), or null.
  returned: success
  type: str
held_by:
  description: The record of the run holding the lock when it is not this one, else null.
  returned: always
  type: dict
took_over:
  description: The record of the lock that was taken over (its lease ran out, or its run was gone), else null.
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
