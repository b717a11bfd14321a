"""Loaded by every Python process of a run whose PYTHONPATH holds this directory (tests only): the file boundaries
of tests/helpers/kill_points.py - a rename into the sandbox host, after which the run may be killed."""

import os
import sys

if os.environ.get("OGC_KILL_DIR"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import kill_points  # noqa: E402  pylint: disable=wrong-import-position

    _RENAME, _REPLACE = os.rename, os.replace

    def _moved(real):
        def move(src, dst, *args, **kwargs):
            key = kill_points.before_rename(src, dst) if kill_points.active() else None
            real(src, dst, *args, **kwargs)
            if key:
                kill_points.boundary(key)
        return move

    os.rename, os.replace = _moved(_RENAME), _moved(_REPLACE)
    sys.path.pop(0)
