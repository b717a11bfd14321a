# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""One GET of Placement's API through a module's CloudModule (cloud/openstack.py), for the modules that read
providers, inventories, allocations and usages (ops/pci_return.py, ops/pci_fence.py, ops/compute_removal.py).

No SDK import here: the module's connection does the call, so a filter that imports those modules' pure parts loads
no client library."""

from __future__ import annotations

__all__ = ["FAIL", "placement_get"]

FAIL = object()  # placement_get(missing=FAIL): a 404 fails the module like any other error answer


def placement_get(cm, path, microversion, key=None, missing=FAIL):
    """The body of GET PATH (its ``key`` when given); ``missing`` on a 404 unless it is FAIL; any other error answer
    fails the module naming the path, the status and the start of the answer."""
    response = cm.call("reading placement", path, cm.conn.placement.get, path, microversion=microversion,
                       raise_exc=False)
    if response.status_code == 404 and missing is not FAIL:
        return missing
    if response.status_code >= 400:
        cm.fail(f"reading placement {path} failed: HTTP {response.status_code}: {response.text[:300]}",
                failed_item=path)
    body = response.json()
    return body[key] if key else body
