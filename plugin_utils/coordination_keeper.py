#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The lease keeper of a run (module_utils/coordination/keeper.py), as the process the reboot_slot task starts on
the control host. Not a plugin: ansible-core loads nothing from plugin_utils/."""

import os
import runpy
import signal
import sys

# A stop asked while the imports below load is kept, not lost: the keeper revokes its lease and exits.
STOPPING = []
signal.signal(signal.SIGTERM, lambda *_: STOPPING.append("SIGTERM"))

# The project's module_utils/, imported as modules import it: the one route (plugin_utils/module_utils_route.py).
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_utils_route.py"))

from ansible.module_utils.coordination import keeper  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.exit(keeper.main(sys.argv[1:], STOPPING))
