#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Documentation of the reboot_slot task; the work is its action plugin's (action_plugins/reboot_slot.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: reboot_slot
short_description: Fleet-wide reboot slots, so parallel runs (AWX job slices) never reboot more than one wave at once
description:
  - A counting semaphore in the directory O(path) on the control host (on shared storage when the runs are on
    several AWX nodes). Each slot is a file C(slot-<i>) (i below O(capacity)) naming the host rebooting, since when
    and the run holding it (control host, user, ansible-playbook pid and start time, boot id, machine id). The rules
    are in module_utils/reboot_slots.py.
  - O(state=acquired) - a host that holds a slot already keeps it (a run again after a crash); else a free slot is
    taken; else the slot of a run that is gone on this control host (its process ended or was replaced, or the
    control host rebooted since) is taken over. Otherwise the task looks again every second, up to O(timeout)
    seconds, then fails naming who holds the slots since when, and the fix.
  - It also fails when the stop record C(stopped.json) in O(path) is newer than O(run_started) - a host's reboot or
    verification failed in a run (another slice) after this one started - naming that host, when and why. A run
    started after the failure is not held back by it, so nothing has to be removed by hand.
  - O(state=released) removes the slot O(host) holds (nothing when it holds none). O(state=stopped) writes the
    stop record for O(host) with O(reason).
  - Reads and writes happen under a flock of C(<path>/.lock); a slot appears whole (a temporary file linked into
    place, which fails as O_EXCL does when the slot exists), the stop record by a temporary file and a rename.
  - The slots are bookkeeping of the run, not configuration, so the task never reports C(changed).
options:
  capacity:
    description: How many slots the fleet has (the fleet-wide wave size). Needed for O(state=acquired).
    type: int
  host:
    description: The host asking for, releasing, or failing in the slot. Default the task's inventory_hostname.
    type: str
  path:
    description: The slot directory on the control host (absolute); made when missing.
    type: path
    required: true
  reason:
    description: Why the rollout stops (O(state=stopped)), shown to the runs that stop because of it.
    type: str
    default: ""
  run_started:
    description:
      - When this run started, in seconds since the epoch. A stop record written after it stops this run; an older
        one does not. Needed for O(state=acquired).
    type: float
  state:
    description: C(acquired) takes a slot (waiting up to O(timeout)), C(released) gives it back, C(stopped) writes
      the fleet-wide stop record.
    type: str
    choices: [acquired, released, stopped]
    default: acquired
  timeout:
    description: Seconds to wait for a free slot before failing (0 - do not wait).
    type: float
    default: 0
  wave:
    description:
      - The hosts rebooting together with O(host) (the play's batch, C(ansible_play_batch)). The first of them to
        ask takes the slots of the whole wave at once, or none; the others find theirs held. Two runs whose waves
        each held part of what they need would otherwise wait on each other, since a wave goes on together.
    type: list
    elements: str
    default: []
extends_documentation_fragment: [ogc_attributes.check_only]
attributes:
  action:
    support: full
  check_mode:
    details: Writes nothing and waits for nothing; reports which slot would be taken, or who holds them all.
notes:
  - Values of a wrong type are refused, not converted (a capacity of V("2") fails).
  - Runs on the control host whatever host the task is for; delegate it to localhost to say so.
author:
  - open-gpu-cloud contributors
"""

EXAMPLES = r"""
- name: Wait for a fleet-wide reboot slot
  reboot_slot:
    path: /srv/awx-shared/open-gpu-cloud/reboot-slots
    capacity: 4
    timeout: 3600
    run_started: "{{ run_started_fact }}"
  delegate_to: localhost

- name: Give it back
  reboot_slot:
    path: /srv/awx-shared/open-gpu-cloud/reboot-slots
    state: released
  delegate_to: localhost

- name: Stop the other slices' rollout
  reboot_slot:
    path: /srv/awx-shared/open-gpu-cloud/reboot-slots
    state: stopped
    reason: the verification failed
  delegate_to: localhost
"""

RETURN = r"""
slot:
  description: The index of the slot this host holds now (O(state=acquired)), else null.
  returned: always
  type: int
outcome:
  description: C(held) (the host held it already), C(free), C(stale) (taken over from a run that is gone), or
    C(full) (check mode, every slot held).
  returned: state is acquired
  type: str
took_over:
  description: The record of the slot taken over (its run was gone), else null.
  returned: always
  type: dict
holders:
  description: The records of the slots' holders when none was free.
  returned: always
  type: list
  elements: dict
stopped:
  description: The stop record written (O(state=stopped)) or the one that refused the slot, else null.
  returned: always
  type: dict
released:
  description: The indexes of the slots removed (O(state=released)).
  returned: always
  type: list
  elements: int
waited:
  description: Seconds spent waiting for a slot.
  returned: always
  type: float
path:
  description: The slot directory.
  returned: always
  type: str
"""
