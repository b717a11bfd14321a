#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: os_images
short_description: Converge Glance images from local files or URLs, checksum verified, without breaking servers
description:
  - For each declared image, finds the current image of that name (not hidden) and compares its content
    by SHA-256 (the C(owner_specified.openstack.sha256) property openstacksdk records on upload).
  - Same content, different properties, visibility, min_disk or min_ram; updated in place.
  - New content (another checksum); uploads a new image under the name, waits until it is C(active),
    verifies Glance's own hash, then retires the old image; renamed to C(NAME (retired YYYY-MM-DD SHA12))
    and hidden (C(os_hidden)), never deleted, so servers booted from it keep working and can be rebuilt.
  - The data is checked against the declared I(checksum) before anything is uploaded. A URL is downloaded
    to a temporary file only when its content may have changed (no declared checksum, or one that differs
    from the current image's).
  - Images are processed in order, one upload at a time; a failure names the image and lists what was done.
  - Check mode and diff use the same difference function as a real run (check mode reads local files to
    hash them, downloads nothing).
version_added: "0.1.0"
author: open-gpu-cloud contributors
extends_documentation_fragment: [ogc_openstack, ogc_openstack.check_and_diff]
options:
  images:
    description: Images to converge.
    type: list
    elements: dict
    required: true
    suboptions:
      checksum:
        description:
          - Expected checksum of the data, C(sha256:HEX) (or bare HEX for SHA-256), C(sha512:HEX) or C(md5:HEX).
          - Required for I(url) images (so no-op runs do not download); optional for files.
        type: str
      container_format:
        description: Container format.
        type: str
        default: bare
      disk_format:
        description: Disk format; Glance inspects the data and refuses a mismatch.
        type: str
        default: qcow2
      file:
        description: Local path of the image data (on the host running the module).
        type: path
      min_disk:
        description: Minimum root disk in GiB.
        type: int
        default: 0
      min_ram:
        description: Minimum RAM in MiB.
        type: int
        default: 0
      name:
        description: Image name.
        type: str
        required: true
      properties:
        description: Image properties, e.g. C(hw_machine_type=q35), C(img_hide_hypervisor_id=true). Values become strings.
        type: dict
        default: {}
      url:
        description: HTTP(S) URL of the image data.
        type: str
      visibility:
        description: Who can see the image.
        type: str
        default: public
        choices: [public, private, shared, community]
  timeout:
    description: Seconds to wait for each upload to become C(active).
    type: int
    default: 900
notes:
  - Properties not declared are left as they are (Glance and openstacksdk keep their own there).
"""

EXAMPLES = r"""
- name: The runners' images
  os_images:
    cloud: ogc-test
    images:
      - name: ubuntu-2204-nvidia
        url: https://images.example.org/ubuntu-2204-nvidia-20230914.qcow2
        checksum: sha256:9f2c...e1
        properties: {hw_machine_type: q35, img_hide_hypervisor_id: "true"}
      - name: ubuntu-2204
        file: /srv/images/ubuntu-2204-20231018.qcow2
        visibility: public
"""

RETURN = r"""
created:
  description: Images uploaded for a name that had none.
  returned: always
  type: list
  elements: str
replaced:
  description: Images uploaded with new content; the previous image of the name was retired.
  returned: always
  type: list
  elements: str
retired:
  description: New names of the retired images (hidden, not deleted).
  returned: always
  type: list
  elements: str
updated:
  description: Images whose properties, visibility or minimums changed in place.
  returned: always
  type: list
  elements: str
unchanged:
  description: Images that already matched.
  returned: always
  type: list
  elements: str
images:
  description: Per declared name, the ID and SHA-256 of the current image (null ID for one check mode would upload).
  returned: success
  type: dict
"""

import hashlib
import os
import re
import shutil
import tempfile
import time

from ansible.module_utils.openstack_cloud import CloudModule

try:
    from ansible.module_utils.urls import open_url
except ImportError:  # pragma: no cover
    open_url = None

SHA256_KEY = "owner_specified.openstack.sha256"
MD5_KEY = "owner_specified.openstack.md5"
CHECKSUM_RE = re.compile(r"^(?:(sha256|sha512|md5):)?([0-9a-fA-F]+)$")
HEX_LENGTH = {"sha256": 64, "sha512": 128, "md5": 32}

IMAGE_OPTIONS = dict(
    name=dict(type="str", required=True),
    file=dict(type="path"),
    url=dict(type="str"),
    checksum=dict(type="str"),
    disk_format=dict(type="str", default="qcow2"),
    container_format=dict(type="str", default="bare"),
    visibility=dict(type="str", default="public", choices=["public", "private", "shared", "community"]),
    min_disk=dict(type="int", default=0),
    min_ram=dict(type="int", default=0),
    properties=dict(type="dict", default={}),
)

ARGUMENT_SPEC = dict(
    images=dict(type="list", elements="dict", required=True, options=IMAGE_OPTIONS),
    timeout=dict(type="int", default=900),
)


def parse_checksum(text):
    """'sha256:HEX' / 'HEX' / 'sha512:HEX' / 'md5:HEX' -> (algorithm, lowercase hex); ValueError otherwise."""
    match = CHECKSUM_RE.match(text.strip())
    if not match:
        raise ValueError("'%s' is not ALGORITHM:HEX (sha256, sha512 or md5)" % text)
    algo = match.group(1) or "sha256"
    digest = match.group(2).lower()
    if len(digest) != HEX_LENGTH[algo]:
        raise ValueError("'%s' has %d hex digits; %s needs %d" % (text, len(digest), algo, HEX_LENGTH[algo]))
    return algo, digest


def validate(images):
    errors = []
    seen = set()
    for index, image in enumerate(images):
        label = "images[%d] (%s)" % (index, image["name"])
        if image["name"] in seen:
            errors.append("%s: name declared twice" % label)
        seen.add(image["name"])
        if bool(image.get("file")) == bool(image.get("url")):
            errors.append("%s: give exactly one of file and url" % label)
        if image.get("url") and not image.get("checksum"):
            errors.append("%s: a url image needs a checksum (sha256:HEX), so that re-runs need not download it" % label)
        if image.get("url") and not re.match(r"^https?://", image["url"]):
            errors.append("%s: url '%s' must be http:// or https://" % (label, image["url"]))
        if image.get("checksum"):
            try:
                parse_checksum(image["checksum"])
            except ValueError as exc:
                errors.append("%s: checksum %s" % (label, exc))
        if image.get("file") and not os.path.isfile(image["file"]):
            errors.append("%s: file %s does not exist" % (label, image["file"]))
        for field in ("min_disk", "min_ram"):
            if image.get(field, 0) < 0:
                errors.append("%s: %s must be >= 0" % (label, field))
    return errors


def hash_file(path):
    """{sha256, sha512, md5} hex digests of a file, in one read."""
    hashes = dict(sha256=hashlib.sha256(), sha512=hashlib.sha512(), md5=hashlib.md5())
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            for digest in hashes.values():
                digest.update(block)
    return dict((name, digest.hexdigest()) for name, digest in hashes.items())


def mismatch(image, hashes):
    """The checksum problem in words, or None when the data matches the declared checksum."""
    if not image.get("checksum"):
        return None
    algo, digest = parse_checksum(image["checksum"])
    if hashes[algo] != digest:
        return "the data has %s %s, the declared checksum is %s" % (algo, hashes[algo], digest)
    return None


def image_view(raw):
    """The comparable part of an existing image, from Glance's own JSON (custom properties are top-level keys)."""
    return dict(id=raw.get("id"), name=raw.get("name"), sha256=raw.get(SHA256_KEY), visibility=raw.get("visibility"),
                min_disk=int(raw.get("min_disk") or 0), min_ram=int(raw.get("min_ram") or 0), status=raw.get("status"),
                properties=dict((k, str(v)) for k, v in raw.items() if not isinstance(v, (list, dict))),
                created_at=raw.get("created_at"))


def plan_image(image, have, sha256):
    """What to do for one image. Pure. sha256: the data's SHA-256 if known (None for an unread URL whose
    declared checksum is not sha256). Returns (action, changes) with action in create, replace, update,
    unchanged, and changes a dict of in-place updates for 'update'."""
    if have is None:
        return "create", {}
    if sha256 is None or have["sha256"] != sha256:
        return "replace", {}
    changes = {}
    for field in ("visibility", "min_disk", "min_ram"):
        if image[field] != have[field]:
            changes[field] = image[field]
    for key, value in sorted(image["properties"].items()):
        if have["properties"].get(key) != spec_value(value):
            changes[key] = spec_value(value)
    return ("update", changes) if changes else ("unchanged", {})


def spec_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def download(cm, image, directory):
    path = os.path.join(directory, "download")
    try:
        response = open_url(image["url"], timeout=cm.params["timeout"])
        with open(path, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except Exception as exc:  # pylint: disable=broad-except
        cm.fail("image %s: cannot download %s: %s" % (image["name"], image["url"], exc), failed_item=image["name"])
    return path


def current_images(cm):
    """{name: image view} of the images that are not hidden (Glance lists hidden, i.e. retired, ones only
    on request). Raw JSON pages, so every custom property is seen as Glance stores it."""
    found = {}
    path = "/images?limit=500"
    while path:
        response = cm.call("listing", "images", cm.conn.image.get, path)
        if response.status_code >= 400:
            cm.fail("listing images failed: HTTP %s: %s" % (response.status_code, response.text[:300]))
        body = response.json()
        for raw in body.get("images", []):
            if raw.get("os_hidden"):
                continue
            view = image_view(raw)
            # Two visible images with one name: the newest is current.
            if view["name"] not in found or (view["created_at"] or "") > (found[view["name"]]["created_at"] or ""):
                found[view["name"]] = view
        nxt = body.get("next")
        path = nxt[nxt.index("/images"):] if nxt and "/images" in nxt else None
    return found


def wait_active(cm, image_id, name):
    deadline = time.time() + cm.params["timeout"]
    while True:
        img = cm.call("reading image", name, cm.conn.image.get_image, image_id)
        if img.status == "active":
            return img
        if img.status in ("killed", "deleted", "deactivated"):
            cm.fail("image %s: upload ended in status %s" % (name, img.status), failed_item=name)
        if time.time() > deadline:
            cm.fail("image %s: not active after %d s (status %s)" % (name, cm.params["timeout"], img.status),
                    failed_item=name)
        time.sleep(1)


def upload(cm, image, path, hashes):
    kwargs = dict(visibility=image["visibility"], min_disk=image["min_disk"], min_ram=image["min_ram"])
    meta = dict((k, spec_value(v)) for k, v in image["properties"].items())
    created = cm.call("uploading image", image["name"], cm.conn.image.create_image, image["name"], filename=path,
                      md5=hashes["md5"], sha256=hashes["sha256"], disk_format=image["disk_format"],
                      container_format=image["container_format"], allow_duplicates=True, meta=meta, wait=False,
                      timeout=cm.params["timeout"], **kwargs)
    img = wait_active(cm, created.id, image["name"])
    algo = getattr(img, "hash_algo", None)
    value = getattr(img, "hash_value", None)
    if algo in hashes and value and value != hashes[algo]:
        cm.fail("image %s: Glance stored %s %s but the data has %s; the upload is corrupt (image %s left for "
                "inspection)" % (image["name"], algo, value, hashes[algo], img.id), failed_item=image["name"])
    return img


def main():
    cm = CloudModule(ARGUMENT_SPEC)
    images = cm.params["images"]
    errors = validate(images)
    if errors:
        cm.fail("invalid image declaration, nothing was written: " + "; ".join(errors), errors=errors)

    # Hash local files (and check them against their declared checksum) before any API call.
    file_hashes = {}
    for image in images:
        if image.get("file"):
            hashes = hash_file(image["file"])
            problem = mismatch(image, hashes)
            if problem:
                cm.fail("image %s: checksum mismatch for %s: %s; nothing was uploaded" % (image["name"], image["file"],
                                                                                         problem),
                        failed_item=image["name"])
            file_hashes[image["name"]] = hashes

    existing = current_images(cm)
    result_images = {}
    changed = False
    before, after = {}, {}
    workdir = tempfile.mkdtemp(prefix="os_images-")
    try:
        for image in images:
            name = image["name"]
            have = existing.get(name)
            hashes = file_hashes.get(name)
            if hashes is not None:
                sha256 = hashes["sha256"]
            else:  # url: trust a declared sha256 without downloading; else compare after download
                algo, digest = parse_checksum(image["checksum"])
                sha256 = digest if algo == "sha256" else None
            action, changes = plan_image(image, have, sha256)
            if action in ("create", "replace") and image.get("url") and not cm.check_mode:
                path = download(cm, image, workdir)
                hashes = hash_file(path)
                problem = mismatch(image, hashes)
                if problem:
                    cm.fail("image %s: checksum mismatch for %s: %s; nothing was uploaded"
                            % (name, image["url"], problem), failed_item=name)
                action, changes = plan_image(image, have, hashes["sha256"])
            if action == "unchanged":
                cm.record("unchanged", name)
                result_images[name] = dict(id=have["id"], sha256=have["sha256"])
                continue
            changed = True
            if action == "update":
                before[name] = dict((k, have.get(k, have["properties"].get(k))) for k in changes)
                after[name] = changes
                if not cm.check_mode:
                    cm.call("updating image", name, cm.conn.image.update_image, have["id"], **changes)
                cm.record("updated", name)
                result_images[name] = dict(id=have["id"], sha256=have["sha256"])
                continue
            # create or replace: upload the new data first, retire the old image only once the new one is active.
            after[name] = dict(sha256=sha256, visibility=image["visibility"])
            if have is not None:
                before[name] = dict(id=have["id"], sha256=have["sha256"])
            if cm.check_mode:
                cm.record("created" if have is None else "replaced", name)
                result_images[name] = dict(id=None, sha256=sha256)
                continue
            path = image.get("file") or os.path.join(workdir, "download")
            new = upload(cm, image, path, hashes)
            result_images[name] = dict(id=new.id, sha256=hashes["sha256"])
            if have is None:
                cm.record("created", name)
                continue
            retired_name = "%s (retired %s %s)" % (name, time.strftime("%Y-%m-%d"), (have["sha256"] or "")[:12])
            cm.call("retiring the previous image of", name, cm.conn.image.update_image, have["id"],
                    name=retired_name, is_hidden=True)
            cm.record("replaced", name)
            cm.record("retired", retired_name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    result = dict(created=[], replaced=[], retired=[], updated=[], unchanged=[])
    result.update(cm.progress)
    result["images"] = result_images
    if cm.module._diff:
        result["diff"] = dict(before=before, after=after)
    cm.exit(changed, **result)


if __name__ == "__main__":
    main()
