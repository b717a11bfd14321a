# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The state_file option of the host-editing modules (grub_cmdline, host_files): plugins/module_utils/host/state.py."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options:
  state_file:
    description:
      - The passthrough_host state file, as on the host (absolute; role variable C(passthrough_host_state_file)).
        When set, the module also reads it and returns it as read as RV(host_state), so the play learns the steps
        an earlier run left pending without a separate module run. Empty - not read.
      - When the module is about to write files whose change needs a follow-up step (C(boot_config),
        C(initramfs)), it marks the step pending there first, durably (write-ahead), so a run killed after any
        write leaves it for the next run; check mode writes nothing.
      - A state file that is not a passthrough_host state is refused before anything is written.
    type: str
    default: ''
"""
