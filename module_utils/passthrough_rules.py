# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""What a PCI function is, for passthrough: the rules the planner and the verifier share.

``filter_plugins/passthrough_plan.py`` decides with these functions what goes to vfio-pci and
``module_utils/passthrough_verify.py`` checks the host with the same ones, so the two cannot disagree
about, say, which devices of an IOMMU group need nothing (the PCI bridges).

* A PCI bridge (class 0604, PCI-to-PCI; 0609, semi-transparent PCI-to-PCI) is not an endpoint a VM
  uses: vfio-pci binds only endpoints, and a bridge in an IOMMU group needs nothing for the group to
  be usable.
* A display device is class 03xx (VGA, 3D, other display controller).
* The functions of one card share a slot: ``0000:27:00.0`` and ``0000:27:00.1`` are one card.
"""

from __future__ import annotations

__all__ = ["BRIDGE_CLASSES", "is_bridge", "is_display", "slot"]

BRIDGE_CLASSES = ("0604", "0609")


def is_bridge(dev) -> bool:
    """Whether a device of the facts is a PCI bridge, which a group needs nothing from."""
    return str(dev.get("class_id") or "")[:4] in BRIDGE_CLASSES


def is_display(dev) -> bool:
    """Whether a device of the facts is a display device (class 03xx)."""
    return str(dev.get("class_id") or "").startswith("03")


def slot(address: str) -> str:
    """The slot of a PCI address, without its function (``0000:27:00.1`` -> ``0000:27:00``)."""
    return address.rsplit(".", 1)[0]
