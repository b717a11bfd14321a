# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The PCI ID database (``pci.ids``, as ``lspci`` reads it): vendor, device and subsystem names.

The file ships with every distribution (Debian's ``pci.ids`` package at /usr/share/misc/pci.ids,
``hwdata`` at /usr/share/hwdata/pci.ids on Fedora/RHEL and as a link on Debian). Its syntax, from
the file's own header::

    vendor  vendor_name
    <TAB>device  device_name
    <TAB><TAB>subvendor subdevice  subsystem_name

followed by the device classes (lines starting ``C``), which end the vendor part. Read-only: the
file is opened once, read whole (about 1.3 MB) and indexed per vendor; a device's lines are found and parsed
only when it is looked up, so a host with a few dozen PCI functions costs a few milliseconds.
"""

from __future__ import annotations

import os
import re

# Where the distributions put the database, in the order lspci's builds look: hwdata's copy first
# (Fedora, RHEL, SUSE; a link to the Debian file on Debian), then pciutils' own.
DEFAULT_PATHS = ("/usr/share/hwdata/pci.ids", "/usr/share/misc/pci.ids", "/usr/share/pci.ids")

# A vendor line starts in the first column: "10de  NVIDIA Corporation".
# Matched from the newline before the line (much faster than re.M on 1.3 MB); the text is read with
# a newline put in front.
_VENDOR_LINE = re.compile(r"\n([0-9a-fA-F]{4}) +([^\r\n]*)")
_CLASSES = re.compile(r"\nC [0-9a-fA-F]{2} ")
# A GPU's database name: its chip, then its marketing name in brackets ("GA104GL [RTX A4000]").
_CHIP_AND_MODEL = re.compile(r"^[^\s\[\]]+ \[([^\]]*[^\]\s][^\]]*)\]$")


class PciIdsError(Exception):
    """The database cannot be read; the message names the path and the fix."""


def find(paths=DEFAULT_PATHS):
    """The first existing regular file among ``paths``, or None (no database on this host)."""
    for path in paths:
        if os.path.isfile(path):
            return path
    return None


class PciIds:
    """Names from the text of a ``pci.ids`` file. Lookups take lowercase 4-hex-digit ids."""

    def __init__(self, text: str, path: str = "pci.ids"):
        if not isinstance(text, str):
            raise PciIdsError(f"{path}: expected the text of a pci.ids file, got {type(text).__name__}")
        self.path = path
        self._text = "\n" + text
        self._vendors: dict[str, tuple[str, int, int]] | None = None   # id -> (name, start, end) of its block
        self._devices: dict[tuple, tuple | None] = {}                    # (vendor, device) -> parsed lines

    def _index(self) -> dict[str, tuple[str, int, int]]:
        if self._vendors is not None:
            return self._vendors
        text = self._text
        classes = _CLASSES.search(text)  # the device classes follow the vendors
        limit = classes.start() if classes else len(text)
        vendors: dict[str, tuple[str, int, int]] = {}
        last = None
        for match in _VENDOR_LINE.finditer(text, 0, limit):
            if last is not None:
                vendors[last[0]] = (last[1], last[2], match.start())
            last = (match.group(1).lower(), match.group(2).strip(), match.end())
        if last is not None:
            vendors[last[0]] = (last[1], last[2], limit)
        if not vendors:
            raise PciIdsError(f"{self.path} holds no vendors: it is not a pci.ids file (lines like '10de  NVIDIA "
                              "Corporation'); point pci_ids_path at the file of the pciutils or hwdata package")
        self._vendors = vendors
        return vendors

    def _device(self, vendor: str, product: str) -> tuple[str, dict] | None:
        """(name, {(subvendor, subdevice): name}) of one device, parsed from its own lines only: the device
        line is found with one search in the vendor's block (NVIDIA's and Intel's blocks run to thousands of
        lines, and a host looks up a handful of devices)."""
        key = (vendor, product)
        if key in self._devices:
            return self._devices[key]
        entry = self._index().get(vendor)
        found = None
        if entry is not None:
            text, end = self._text, entry[2]
            needle = "\n\t" + product
            pos = text.find(needle, entry[1], end)
            while pos != -1 and found is None:
                line_end = text.find("\n", pos + 1, end)
                line_end = end if line_end == -1 else line_end
                ids, _sep, name = text[pos + 2:line_end].partition("  ")
                if ids.strip().lower() == product:
                    found = (name.strip(), self._subsystems(line_end, end))
                pos = text.find(needle, line_end, end)
        self._devices[key] = found
        return found

    def _subsystems(self, pos: int, end: int) -> dict:
        """The subsystem lines (two tabs) after the device line that ends at ``pos``, up to the next device line."""
        text, subs = self._text, {}
        while pos < end:
            line_end = text.find("\n", pos + 1, end)
            line_end = end if line_end == -1 else line_end
            line = text[pos + 1:line_end]
            if line.startswith("\t\t"):
                ids, _sep, name = line[2:].partition("  ")
                sub = ids.lower().split()
                if len(sub) == 2:
                    subs[(sub[0], sub[1])] = name.strip()
            elif line.startswith("\t"):
                break
            pos = line_end
        return subs

    def vendor(self, vendor_id: str) -> str | None:
        entry = self._index().get(vendor_id)
        return entry[0] if entry else None

    def device(self, vendor_id: str, product_id: str) -> str | None:
        entry = self._device(vendor_id, product_id)
        return entry[0] if entry else None

    def subsystem(self, vendor_id: str, product_id: str, sub_vendor: str, sub_device: str) -> str | None:
        entry = self._device(vendor_id, product_id)
        return entry[1].get((sub_vendor, sub_device)) if entry else None

    def names(self, vendor_id, product_id, sub_vendor=None, sub_device=None) -> dict:
        """``{vendor_name, device_name, subsystem_name}`` for one function; None where the database has none."""
        return {
            "vendor_name": self.vendor(vendor_id),
            "device_name": self.device(vendor_id, product_id),
            "subsystem_name": (self.subsystem(vendor_id, product_id, sub_vendor, sub_device)
                               if sub_vendor and sub_device else None),
        }


def load(path: str) -> PciIds:
    """Read the database at ``path`` (read-only). Raises PciIdsError naming the path and the fix."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise PciIdsError(f"{path} does not exist: install the pci.ids (Debian) or hwdata (Fedora/RHEL) package, "
                          "or set pci_ids_path to the file's location") from None
    except IsADirectoryError:
        raise PciIdsError(f"{path} is a directory, not the pci.ids file; set pci_ids_path to the file itself, "
                          "e.g. /usr/share/misc/pci.ids") from None
    except OSError as exc:
        raise PciIdsError(f"cannot read {path}: {exc.strerror}; fix its permissions or set pci_ids_path") from None
    # The file is UTF-8 (older copies were Latin-1: a stray byte must not stop discovery).
    return PciIds(data.decode("utf-8", "replace"), path)


def marketing_name(device_name: str | None) -> str | None:
    """The model name operators know: for a name ``<chip> [<model>]`` (one word before the bracket, as the
    database writes GPUs), the bracketed part; any other name as it is.

    ``GA104GL [RTX A4000]`` -> ``RTX A4000``; ``ASPEED Graphics Family`` and ``FCH SATA Controller [AHCI mode]``
    stay as they are.
    """
    if not device_name or not device_name.strip():
        return None
    match = _CHIP_AND_MODEL.match(device_name.strip())
    return match.group(1).strip() if match else device_name.strip()
