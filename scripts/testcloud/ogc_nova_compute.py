#!/usr/bin/env python3
"""nova-compute for the test cloud: Nova's own entry point with this directory added to ``nova.virt``.

Nova loads ``compute_driver = X.Y`` as ``nova.virt.X.Y`` only, so the test driver (ogc_fake_gpu.py
beside this file) is made visible inside that package before nova-compute starts. Arguments are
nova-compute's (``--config-file ...``).
"""

import os
import sys

import nova.virt

nova.virt.__path__.append(os.path.dirname(os.path.abspath(__file__)))

from nova.cmd.compute import main  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.exit(main())
