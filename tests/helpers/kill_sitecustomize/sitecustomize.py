"""Loaded by every Python process of a run whose PYTHONPATH holds this directory (tests only): the file boundaries
of tests/helpers/kill_points.py - a rename into the sandbox host, or the lock's removal, after which the run may be
killed."""

import os
import sys

if os.environ.get("OGC_KILL_DIR"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import kill_points  # noqa: E402  pylint: disable=wrong-import-position

    _RENAME, _REPLACE, _UNLINK = os.rename, os.replace, os.unlink

    def _moved(real):
        def move(src, dst, *args, **kwargs):
            key = kill_points.before_rename(src, dst) if kill_points.active() else None
            real(src, dst, *args, **kwargs)
            if key:
                kill_points.boundary(key)
        return move

    def _unlink(path, *args, **kwargs):
        key = kill_points.before_unlink(path) if kill_points.active() else None
        _UNLINK(path, *args, **kwargs)
        if key:
            kill_points.boundary(key)

    os.rename, os.replace, os.unlink = _moved(_RENAME), _moved(_REPLACE), _unlink
    sys.path.pop(0)
