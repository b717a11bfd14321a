# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Glance images as code: checksums, the difference, and an upload that retires (never deletes) the old image.

Used by os_images, on the resource protocol of openstack_cloud: prepare (validate the declaration, hash
local files) -> read (the visible images) -> make_plan (pure) -> apply (update, or upload then retire)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.flavor_requests import spec_value
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan

try:
    from ansible.module_utils.urls import open_url
except ImportError:  # pragma: no cover
    open_url = None

SHA256_KEY = "owner_specified.openstack.sha256"
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
        raise ValueError(f"'{text}' is not ALGORITHM:HEX (sha256, sha512 or md5)")
    algo = match.group(1) or "sha256"
    digest = match.group(2).lower()
    if len(digest) != HEX_LENGTH[algo]:
        raise ValueError(f"'{text}' has {len(digest)} hex digits; {algo} needs {HEX_LENGTH[algo]}")
    return algo, digest


def validate(images):
    errors = []
    seen = set()
    for index, image in enumerate(images):
        label = f"images[{index}] ({image['name']})"
        if image["name"] in seen:
            errors.append(f"{label}: name declared twice")
        seen.add(image["name"])
        if bool(image.get("file")) == bool(image.get("url")):
            errors.append(f"{label}: give exactly one of file and url")
        if image.get("url") and not image.get("checksum"):
            errors.append(f"{label}: a url image needs a checksum (sha256:HEX), so that re-runs need not download it")
        if image.get("url") and not re.match(r"^https?://", image["url"]):
            errors.append(f"{label}: url '{image['url']}' must be http:// or https://")
        if image.get("checksum"):
            try:
                parse_checksum(image["checksum"])
            except ValueError as exc:
                errors.append(f"{label}: checksum {exc}")
        if image.get("file") and not os.path.isfile(image["file"]):
            errors.append(f"{label}: file {image['file']} does not exist")
        for field in ("min_disk", "min_ram"):
            if image.get(field, 0) < 0:
                errors.append(f"{label}: {field} must be >= 0")
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
        return f"the data has {algo} {hashes[algo]}, the declared checksum is {digest}"
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


def download(cm, image, directory):
    path = os.path.join(directory, "download")
    try:
        response = open_url(image["url"], timeout=cm.params["timeout"])
        with open(path, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except Exception as exc:  # pylint: disable=broad-except
        cm.fail(f"image {image['name']}: cannot download {image['url']}: {exc}", failed_item=image["name"])
    return path


def current_images(cm):
    """{name: image view} of the images that are not hidden (Glance lists hidden, i.e. retired, ones only
    on request). Raw JSON pages, so every custom property is seen as Glance stores it."""
    found = {}
    path = "/images?limit=500"
    while path:
        response = cm.call("listing", "images", cm.conn.image.get, path)
        if response.status_code >= 400:
            cm.fail(f"listing images failed: HTTP {response.status_code}: {response.text[:300]}")
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
            cm.fail(f"image {name}: upload ended in status {img.status}", failed_item=name)
        if time.time() > deadline:
            cm.fail(f"image {name}: not active after {cm.params['timeout']} s (status {img.status})",
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
        cm.fail(f"image {image['name']}: Glance stored {algo} {value} but the data has {hashes[algo]}; the upload is "
                f"corrupt (image {img.id} left for inspection)", failed_item=image["name"])
    return img


# --------------------------------------------------------------------------- the protocol's steps

def prepare(params):
    """(declared, problem): the declaration's checks, then every local file hashed and checked against its
    declared checksum, all before any API call. declared: {'hashes': {name: {sha256, sha512, md5}}}."""
    images = params["images"]
    errors = validate(images)
    if errors:
        return None, dict(msg="invalid image declaration, nothing was written: " + "; ".join(errors), errors=errors)
    file_hashes = {}
    for image in images:
        if image.get("file"):
            hashes = hash_file(image["file"])
            problem = mismatch(image, hashes)
            if problem:
                return None, dict(msg=f"image {image['name']}: checksum mismatch for {image['file']}: {problem}; "
                                      "nothing was uploaded", failed_item=image["name"])
            file_hashes[image["name"]] = hashes
    return dict(hashes=file_hashes), None


def read(cm, _params, _declared):
    """{name: image view} of the current (visible) images."""
    return current_images(cm)


def known_sha256(image, hashes):
    """The data's SHA-256 as far as it is known without downloading: a file's own, or a URL's declared
    sha256 checksum (None when a URL declares sha512 or md5)."""
    if hashes is not None:
        return hashes["sha256"]
    algo, digest = parse_checksum(image["checksum"])
    return digest if algo == "sha256" else None


def make_plan(params, declared, existing):
    """One Action per declared image, in order, and the diff. Pure.

    data: {image, have, hashes (of a local file), sha256, changes}; done: created, replaced, updated or unchanged."""
    actions, before, after = [], {}, {}
    for image in params["images"]:
        name = image["name"]
        have = existing.get(name)
        hashes = declared["hashes"].get(name)
        sha256 = known_sha256(image, hashes)
        kind, changes = plan_image(image, have, sha256)
        data = dict(image=image, have=have, hashes=hashes, sha256=sha256, changes=changes)
        if kind == "update":
            before[name], after[name] = update_diff(have, changes)
        elif kind in ("create", "replace"):
            after[name] = dict(sha256=sha256, visibility=image["visibility"])
            if have is not None:
                before[name] = dict(id=have["id"], sha256=have["sha256"])
        actions.append(Action(DONE[kind], name, data))
    return Plan(actions, before, after)


def update_diff(have, changes):
    """(before, after) of an in-place update."""
    return dict((k, have.get(k, have["properties"].get(k))) for k in changes), changes


DONE = dict(create="created", replace="replaced", update="updated", unchanged="unchanged")


def apply(cm, params, _existing, action, applied):
    """Update in place, or upload (downloading a URL first) and retire the old image once the new one is
    active. Returns the Action actually done when the downloaded data shows the content unchanged (a URL
    declared by sha512 or md5, whose SHA-256 only the download tells)."""
    data = action.data
    image, have, name = data["image"], data["have"], action.item
    if action.done == "updated":
        cm.call("updating image", name, cm.conn.image.update_image, have["id"], **data["changes"])
        applied[name] = dict(id=have["id"], sha256=have["sha256"])
        return None
    hashes, path, workdir = data["hashes"], image.get("file"), None
    try:
        if path is None:  # a URL: downloaded to a temporary directory, removed once uploaded
            workdir = tempfile.mkdtemp(prefix="os_images-")
            path = download(cm, image, workdir)
            hashes = hash_file(path)
            problem = mismatch(image, hashes)
            if problem:
                cm.fail(f"image {name}: checksum mismatch for {image['url']}: {problem}; nothing was uploaded",
                        failed_item=name)
            kind, changes = plan_image(image, have, hashes["sha256"])
            if kind in ("update", "unchanged"):  # same content after all (a URL declared by sha512 or md5)
                done = Action(DONE[kind], name, dict(data, sha256=hashes["sha256"], changes=changes),
                              diff=update_diff(have, changes) if kind == "update" else None)
                if kind == "update":
                    apply(cm, params, None, done, applied)
                applied[name] = dict(id=have["id"], sha256=have["sha256"])
                return done
        new = upload(cm, image, path, hashes)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    applied[name] = dict(id=new.id, sha256=hashes["sha256"])
    if have is not None:
        retired_name = f"{name} (retired {time.strftime('%Y-%m-%d')} {(have['sha256'] or '')[:12]})"
        cm.call("retiring the previous image of", name, cm.conn.image.update_image, have["id"],
                name=retired_name, is_hidden=True)
        cm.record("retired", retired_name)
    return None


def report(_params, _declared, _existing, plan, applied, progress):
    """The module result: progress and, per declared name, the current image's ID and SHA-256 (a null ID
    for an image check mode would upload)."""
    images = {}
    for action in plan.actions:
        have = action.data["have"]
        if action.item in applied:
            images[action.item] = applied[action.item]
        elif action.done in ("created", "replaced"):
            images[action.item] = dict(id=None, sha256=action.data["sha256"])
        else:
            images[action.item] = dict(id=have["id"], sha256=have["sha256"])
    result = dict(created=[], replaced=[], retired=[], updated=[], unchanged=[])
    result.update(progress)
    result["images"] = images
    return result
