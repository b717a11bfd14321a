#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Documentation of the reboot_slot task; the work is its action plugin's (plugins/action/reboot_slot.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: reboot_slot
short_description: Fleet-wide reboot slots under a lease, so runs at once (AWX job slices) never reboot more than one wave
description:
  - A counting semaphore on the coordination backend O(url) names - a directory on the control host
    (C(file:///...), one control host) or etcd v3 (C(etcd3+http://host:2379), several control hosts, e.g. AWX
    execution nodes). Each slot (index below O(capacity)) is a record naming the host rebooting, since when and the
    run holding it (digests of the control host and the run, never the raw machine id; the control host's name, the
    user, the ansible-playbook pid), carried by the run's lease. The rules are in plugins/module_utils/coordination/.
  - The run's lease is granted by the first O(state=acquired) of the run, with an id derived from the run, and a
    keeper process started on the control host renews it every third of O(lease_ttl) while the run lives. Once the
    run ends (done, failed, interrupted or killed) the keeper revokes it; if the control host dies the lease runs
    out after O(lease_ttl) seconds. Either way, what the run held is free for every other run.
  - O(state=acquired) - a slot this run holds for the host already is kept; else free slots are taken, and slots
    whose lease ran out or whose run is gone from this control host. The hosts of O(wave) take theirs together,
    all or none. Otherwise the task looks again every second, up to O(timeout) seconds, then fails naming who holds
    the slots, since when, and when their leases run out.
  - It also fails when the stop record is newer than O(run_started) - a host's reboot or verification failed in a
    run (another slice) after this one started - naming that host, when and why. A run started after the failure is
    not held back by it, so nothing has to be removed by hand.
  - O(state=confirmed) renews the run's lease and fails unless the run still holds the host's slot (asked right
    before the reboot). O(state=released) gives back the host's slot of this run. O(state=stopped) writes the stop
    record for O(host) with O(reason). O(state=finished) ends the run's lease - its keeper is stopped by its pid
    and the lease revoked (the keeper also does so by itself once the run's process is gone). A service that cannot
    be reached while releasing, writing the stop record or finishing is a warning, not a failure (the lease frees
    what the run held); while acquiring or confirming, a failure naming it.
  - Every request has a connect and a read timeout. The slots are bookkeeping of the run, not configuration, so the
    task never reports C(changed).
options:
  capacity:
    description: How many slots the fleet has (the fleet-wide wave size). Needed for O(state=acquired).
    type: int
  connect_timeout:
    description: Seconds to wait for a connection to the coordination service.
    type: float
    default: 5
  host:
    description: The host asking for, releasing, or failing in the slot. Default the task's inventory_hostname.
    type: str
  keeper_start_timeout:
    description:
      - Seconds the run's keeper may take to start (a Python process, slow on a loaded control host). Meanwhile the
        task renews the lease itself every third of O(lease_ttl), so a slow start never lets it run out; a keeper not
        ready in time is stopped, the lease revoked, and the task fails naming this bound, the time measured and the
        control host's load.
    type: float
    default: 60
  lease_ttl:
    description:
      - Seconds the run's lease lasts without renewal (at least 5; at most the backend's limit - etcd's
        9,000,000,000, a directory's 86,400); its keeper renews it every third of that, the first time a third of it
        after the grant.
    type: int
    default: 60
  read_timeout:
    description: Seconds to wait for the coordination service's answer.
    type: float
    default: 10
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
    description: C(acquired) takes a slot (waiting up to O(timeout)), C(confirmed) proves the run still holds it,
      C(released) gives it back, C(stopped) writes the fleet-wide stop record, C(finished) ends the run's lease.
    type: str
    choices: [acquired, confirmed, released, stopped, finished]
    default: acquired
  timeout:
    description: Seconds to wait for a free slot before failing (0 - do not wait).
    type: float
    default: 0
  url:
    description:
      - The coordination backend, C(file:///<directory>) or C(etcd3+http(s)://<host>:<port>[/<prefix>]) with, for
        https, C(?ca_cert=&cert_cert=&cert_key=) paths. A URL carrying credentials is refused without being shown.
    type: str
    required: true
  wave:
    description:
      - The hosts rebooting together with O(host) (the play's batch, C(ansible_play_batch)). The first of them to
        ask takes the slots of the whole wave at once, or none; the others find theirs held. Two runs whose waves
        each held part of what they need would otherwise wait on each other, since a wave goes on together.
    type: list
    elements: str
    default: []
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_only, open_gpu_cloud.toolkit.attributes.action_plugin]
attributes:
  check_mode:
    details: Writes nothing, grants no lease and waits for nothing; reports which slot would be taken, or who holds
      them all.
notes:
  - Values of a wrong type are refused, not converted (a capacity of V("2") fails).
  - Runs on the control host whatever host the task is for; delegate it to localhost to say so.
  - etcd needs the Python package etcd3gw on the control host (the execution environment has it).
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
"""

EXAMPLES = r"""
- name: Wait for a fleet-wide reboot slot
  open_gpu_cloud.toolkit.reboot_slot:
    url: etcd3+http://192.0.2.10:2379
    capacity: 4
    timeout: 3600
    run_started: "{{ run_started_fact }}"
    wave: "{{ ansible_play_batch }}"
  delegate_to: localhost

- name: Prove the slot is still this run's, right before the reboot
  open_gpu_cloud.toolkit.reboot_slot:
    url: etcd3+http://192.0.2.10:2379
    state: confirmed
  delegate_to: localhost

- name: Give it back
  open_gpu_cloud.toolkit.reboot_slot:
    url: etcd3+http://192.0.2.10:2379
    state: released
  delegate_to: localhost

- name: Stop the other slices' rollout
  open_gpu_cloud.toolkit.reboot_slot:
    url: etcd3+http://192.0.2.10:2379
    state: stopped
    reason: the verification failed
  delegate_to: localhost
"""

RETURN = r"""
slot:
  description: The index of the slot this host holds now (O(state=acquired), O(state=confirmed)), else null.
  returned: always
  type: int
outcome:
  description: C(ours) (this run held it already), C(free), C(expired) (taken over, its lease ran out), C(gone)
    (taken over, its run is gone from this control host), or C(full) (check mode, every slot held).
  returned: state is acquired
  type: str
took_over:
  description: The record of the slot taken over, else null.
  returned: always
  type: dict
holders:
  description: The records of the slots' holders when none was free (with C(expires), seconds since the epoch).
  returned: always
  type: list
  elements: dict
stopped:
  description: The stop record written (O(state=stopped)) or the one that refused the slot, else null.
  returned: always
  type: dict
released:
  description: The indexes of the slots given back (O(state=released)).
  returned: always
  type: list
  elements: int
waited:
  description: Seconds spent waiting for a slot.
  returned: always
  type: float
url:
  description: The coordination backend, as shown (never with credentials).
  returned: always
  type: str
"""
