"""The demo's set-up gives its first run the PCI ID database (scripts/testcloud/demo_setup.py): found, installed, or
a note saying what is missing while the demo runs on."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from ogc_testlib import COLLECTIONS, ROOT

SCRIPT = os.path.join(ROOT, "scripts", "testcloud", "demo_setup.py")


@pytest.fixture
def demo_setup(monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(SCRIPT))
    return importlib.import_module("demo_setup")


def test_a_database_found_installs_nothing(demo_setup, tmp_path):
    def install(*args, **kwargs):
        raise AssertionError("installed with a database present")

    assert demo_setup.ensure_pci_ids(str(tmp_path / "log"), find=lambda: "/usr/share/misc/pci.ids",
                                     install=install) == ("/usr/share/misc/pci.ids", None)


def test_no_database_installs_debian_s_package_for_reading(demo_setup, tmp_path):
    calls, found = [], []

    def install(paths, packages, log, access):
        calls.append((paths, packages, access))
        found.append("/usr/share/misc/pci.ids")

    path, note = demo_setup.ensure_pci_ids(str(tmp_path / "log"), find=lambda: found[0] if found else None,
                                           install=install)
    assert (path, note) == ("/usr/share/misc/pci.ids", None)
    assert calls == [(["/usr/share/misc/pci.ids"], ["pci.ids"], os.R_OK)]


def test_a_database_that_cannot_be_installed_is_a_note_naming_where_it_was_looked_for_and_the_fix(demo_setup,
                                                                                                  tmp_path):
    debian = sys.modules["debian"]

    def install(*args, **kwargs):
        raise debian.PackageError("/usr/share/misc/pci.ids missing and cannot be installed here (needs root and "
                                  "apt-get): install the Debian packages pci.ids")

    path, note = demo_setup.ensure_pci_ids(str(tmp_path / "log"), find=lambda: None, install=install)
    assert path is None
    assert "/usr/share/hwdata/pci.ids, /usr/share/misc/pci.ids, /usr/share/pci.ids" in note
    assert "by class and IDs" in note and "install the Debian packages pci.ids" in note


def test_the_real_installer_takes_a_readable_data_file_as_installed(demo_setup, tmp_path):
    data = tmp_path / "pci.ids"
    data.write_text("10de  NVIDIA Corporation\n")
    # Not executable, readable: present for a data file; nothing is installed (no apt-get run, no log written).
    sys.modules["debian"].ensure_installed([str(data)], ["pci.ids"], str(tmp_path / "log"), access=os.R_OK)
    assert not (tmp_path / "log").exists()


def test_the_script_runs_and_exits_0_where_the_database_is(tmp_path):
    # As scripts/demo.sh runs it: the collection it reads the database's paths from on PYTHONPATH.
    proc = subprocess.run([sys.executable, SCRIPT, str(tmp_path)], capture_output=True, text=True, check=False,
                          timeout=60, env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert proc.returncode == 0, proc.stderr
