"""The demo's set-up beyond its virtualenv: the PCI ID database its plan and reports name devices from.

The plan, the host reports and the health check name each device from the PCI ID database (``pci.ids``, what
``lspci`` reads; plugins/module_utils/pci/ids.py looks where the distributions put it). Without it they show a device by
class and IDs ("VGA controller 10de:1e07"). The test command's set-up installs Debian's ``pci.ids`` package
(requirements/debian-packages.txt); this gives the demo's first run the same names, installing that package when no
database is found, and says what is missing where it cannot (not root, not Debian): the demo then runs on, with IDs.

    PYTHONPATH=collections python scripts/testcloud/demo_setup.py LOG_DIR
"""

import os
import sys

import debian  # scripts/testcloud/debian.py: Debian packages installed on first use

# The one list of where the database lives (the collection's plugins/module_utils/pci/ids.py, pure Python).
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import ids as pci_ids
DEBIAN_PACKAGE = "pci.ids"
DEBIAN_PATH = "/usr/share/misc/pci.ids"


def ensure_pci_ids(log, find=pci_ids.find, install=debian.ensure_installed):
    """The PCI ID database's path, installed first where none is found; a note (str) where it cannot be."""
    found = find()
    if found:
        return found, None
    try:
        install([DEBIAN_PATH], [DEBIAN_PACKAGE], log, access=os.R_OK)
    except debian.PackageError as exc:
        return None, (f"demo: no PCI ID database ({', '.join(pci_ids.DEFAULT_PATHS)}), so the plan and reports "
                      f"name devices by class and IDs: {exc}")
    return find(), None


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} LOG_DIR", file=sys.stderr)
        return 2
    os.makedirs(argv[1], exist_ok=True)
    log = os.path.join(argv[1], "setup.log")
    path, note = ensure_pci_ids(log)
    if note:
        print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
