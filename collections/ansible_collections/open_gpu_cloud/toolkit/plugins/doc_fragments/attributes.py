# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The check mode and diff mode support the modules of open-gpu-cloud declare (their attributes).

A module names one variant, e.g. extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_and_diff]. What is
particular to a module stays in its own attributes: (a description of how its check mode works, the action
attribute of a module with an action plugin); Ansible merges that into the variant's entries."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    # A module whose check mode and diff mode compute the same difference as a real run.
    CHECK_AND_DIFF = r"""
attributes:
  check_mode:
    description: Runs in check mode, writing nothing, and reports what it would change.
    support: full
  diff_mode:
    description: Returns the difference it makes (in check mode, the one it would make).
    support: full
"""

    # A module that supports check mode but has no diff to show (it reads, or its result is not a file).
    CHECK_ONLY = r"""
attributes:
  check_mode:
    description: Runs in check mode, writing nothing.
    support: full
  diff_mode:
    description: Returns no difference.
    support: none
"""

    # A module whose work is done by an action plugin of the same name on the control host (host_lock, reboot_slot).
    ACTION_PLUGIN = r"""
attributes:
  action:
    description: Runs as an action plugin on the control host, where the run's identity and the liveness of other
      runs are known.
    support: full
"""
