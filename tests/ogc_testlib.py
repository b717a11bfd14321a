"""Helpers shared by the tests: the repo's paths and loading its modules and filters by file path."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures", "hosts")


def load_source(name: str, relpath: str):
    """Import a module from a file of the repo (library/, filter_plugins/, scripts/)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_library_module(name: str):
    """Import library/<name>.py (a module of ours) for in-process tests."""
    return load_source(name, os.path.join("library", name + ".py"))
