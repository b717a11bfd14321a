# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Readable reports of the day-2 operations (pure functions).

* ``result | open_gpu_cloud.toolkit.lifetime_report(check_mode=False)``: one line per server from an os_server_lifetimes result.
* ``[image_build, stat] | open_gpu_cloud.toolkit.ogc_image_upload(default_properties)``: the os_images item uploading a built image
  (its file and SHA-256 from ``ansible.builtin.stat``, its properties over the defaults).
"""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

LIFETIME_KEYS = ("would_act", "exempt", "not_acted", "invalid_metadata")


def _server(entry):
    age = entry.get("age_hours")
    age = "?" if age is None else f"{age:g}"
    return (f"{entry.get('name')} ({entry.get('id')}, project {entry.get('project')}, {entry.get('status')}, "
            f"age {age} h)")


def lifetime_report(result, check_mode=False):
    """Lines describing an os_server_lifetimes result: what was (or would be) done, exempt, not acted on."""
    if not isinstance(result, dict) or any(k not in result for k in LIFETIME_KEYS):
        got = result if not isinstance(result, dict) else sorted(result)
        raise AnsibleFilterError(f"lifetime_report expects the result of os_server_lifetimes (keys "
                                 f"{', '.join(LIFETIME_KEYS)}), got {got!r}")
    lines = [f"checked {result.get('checked', 0)} server(s) at {result.get('now', '?')}"]
    verb = {"shelve": ("would shelve" if check_mode else "shelved"),
            "delete": ("would delete" if check_mode else "deleted")}
    for entry in result["would_act"]:
        lines.append(f"{verb.get(entry.get('action'), entry.get('action'))} {_server(entry)}: {entry.get('reason')}")
    for key, word in (("exempt", "exempt"), ("not_acted", "not acted on"), ("invalid_metadata", "bad metadata")):
        for entry in result[key]:
            lines.append(f"{word} {_server(entry)}: {entry.get('reason')}")
    if len(lines) == 1:
        lines.append("nothing past its maximum age")
    return lines


UPLOAD_KEYS = ("disk_format", "container_format", "visibility", "min_disk", "min_ram")


def ogc_image_upload(pair, default_properties=None):
    """os_images item for a built image: name, file, checksum sha256:HEX, formats, properties."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], dict) \
            or not isinstance(pair[1], dict):
        raise AnsibleFilterError(f"ogc_image_upload expects [image_builds item, stat result], got {pair!r}")
    image, stat = pair
    if not image.get("name"):
        raise AnsibleFilterError(f"ogc_image_upload: the image has no name: {image!r}")
    if not stat.get("exists") or not stat.get("checksum"):
        raise AnsibleFilterError(f"ogc_image_upload: no file (or no sha256 checksum) for image {image['name']} at "
                                 f"{stat.get('path')}")
    properties = dict(default_properties or {})
    properties.update(image.get("properties") or {})
    out = dict(name=image["name"], file=stat["path"], checksum=f"sha256:{stat['checksum']}",
               properties=properties)
    for key in UPLOAD_KEYS:
        if image.get(key) is not None:
            out[key] = image[key]
    return out


class FilterModule:
    """Reports of the day-2 operations."""

    def filters(self):
        return {"lifetime_report": lifetime_report, "ogc_image_upload": ogc_image_upload}
