# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Reboot waves of a GPU fleet (playbooks/host.yml): how many hosts one wave may reboot, and the waves.

* ``passthrough_reboot_wave_size(batch, fleet_size)``: the wave size from ``passthrough_rollout_reboot_batch``
  (a positive int, or a percentage "N%" of the fleet, rounded down, at least 1).
* ``passthrough_reboot_batch_errors(batch, fleet_size, host)``: the same refusal as a list of messages, for the
  role's variable check (empty when the value is good).
* ``passthrough_reboot_fleet_size(play_hosts, plan_files)``: the fleet a percentage is of: the larger of the play's
  host count and the number of plan files (one per GPU host of the fleet, shared by every slice of a sliced job).
* ``passthrough_reboot_waves(hosts, batch, fleet_size)``: {size, serial, waves}: the canary wave of one host,
  then waves of ``size``; ``serial`` is the play keyword that makes Ansible run exactly these waves.

Pure functions; a bad value raises AnsibleFilterError naming the variable and the fix.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

_PERCENT = re.compile(r"^\s*([0-9]+)\s*%\s*$")


def wave_size(batch, fleet_size):
    """Hosts per wave for passthrough_rollout_reboot_batch=batch on a fleet of fleet_size GPU hosts."""
    if isinstance(fleet_size, bool) or not isinstance(fleet_size, int) or fleet_size < 1:
        raise AnsibleFilterError("passthrough_reboot_wave_size: the fleet size must be a positive int, got "
                                 f"{fleet_size!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, str)):
        raise AnsibleFilterError(
            f"passthrough_rollout_reboot_batch={batch!r} ({type(batch).__name__}) must be a positive number of hosts "
            "(e.g. 2) or a percentage of the GPU hosts (e.g. \"10%\")")
    if isinstance(batch, int):
        if batch < 1:
            raise AnsibleFilterError(f"passthrough_rollout_reboot_batch={batch} must be at least 1 (hosts rebooted at "
                                     "once after the canary)")
        return min(batch, fleet_size)
    match = _PERCENT.match(batch)
    if not match or not 0 < int(match.group(1)) <= 100:
        raise AnsibleFilterError(
            f"passthrough_rollout_reboot_batch={batch!r} must be a percentage from 1% to 100% (e.g. \"10%\") or a "
            "positive int (e.g. 2; on the command line give it as JSON: -e '{\"passthrough_rollout_reboot_batch\": 2}')")
    return max(1, fleet_size * int(match.group(1)) // 100)


def fleet_size(play_hosts, plan_files):
    """The GPU hosts of the fleet: the larger of len(play_hosts) and len(plan_files). A slice of an AWX sliced job
    sees only its own hosts, but every slice shares the plan directory, which holds one plan per GPU host."""
    for name, value in (("play_hosts", play_hosts), ("plan_files", plan_files)):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError(f"passthrough_reboot_fleet_size: {name} must be a list, got {value!r}")
    return max(len(play_hosts), len(plan_files))


def batch_errors(batch, fleet_size, host):
    """The refusal of a bad passthrough_rollout_reboot_batch as a list of one message naming the host (empty when the
    value is good): the role's variable check asserts it with its other variables."""
    try:
        wave_size(batch, fleet_size)
    except AnsibleFilterError as exc:
        return [f"{host}: {exc.message}"]
    return []


def reboot_waves(hosts, batch, fleet_size):
    """The waves for these hosts (in order): one canary host, then waves of wave_size(batch, fleet_size)."""
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise AnsibleFilterError(f"passthrough_reboot_waves: hosts must be a list of host names, got {hosts!r}")
    size = wave_size(batch, fleet_size)
    hosts = list(hosts)
    waves = [hosts[:1]] if hosts else []
    for start in range(1, len(hosts), size):
        waves.append(hosts[start:start + size])
    return dict(size=size, serial=[1, size], waves=waves)


class FilterModule:  # pylint: disable=too-few-public-methods
    def filters(self):
        return {"passthrough_reboot_wave_size": wave_size, "passthrough_reboot_waves": reboot_waves,
                "passthrough_reboot_fleet_size": fleet_size,
                "passthrough_reboot_batch_errors": batch_errors}
