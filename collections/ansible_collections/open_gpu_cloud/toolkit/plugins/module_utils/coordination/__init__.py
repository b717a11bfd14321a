# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Coordination of the runs of the host phase: who runs, what each run holds, and for how long.

* ``identity``: a run of ansible-playbook named by digests (never the control host's raw machine id), and whether a
  run is gone, seen from the control host.
* ``leases``: the pure rules - a record held under a lease is free, ours, expired, its holder gone, or held; the
  fleet-wide reboot slots a wave takes all at once or not at all; the stop record.
* ``backend``: where the fleet-wide records live, named by one URL - a directory on one control host
  (``file://``) or etcd v3 (``etcd3+http://``, ``etcd3+https://``) for several - with leases of their own.
* ``slots``: taking, confirming and giving back reboot slots, and the stop record, on a backend, by those rules.
* ``keeper``: the process a run starts on the control host that renews the run's lease while the run lives.
* ``host_lock``: the lock on the GPU host itself (the last guard), under a lease on the host's own clock.
"""
