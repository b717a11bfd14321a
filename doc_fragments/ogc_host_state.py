# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)
"""The state_file option of the host-editing modules (grub_cmdline, host_files): module_utils/host_state.py."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options:
  state_file:
    description:
      - The passthrough_host state file, as on the host (absolute; role variable C(passthrough_host_state_file)).
        When set, the module also reads it, read-only, and returns it as RV(host_state), so the play learns the
        steps an earlier run left pending without a separate module run. Empty - not read.
      - A state file that is not a passthrough_host state is refused before anything is written.
    type: str
    default: ''
"""
