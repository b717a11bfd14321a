#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

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
author: open-gpu-cloud contributors (@open-gpu-cloud)
extends_documentation_fragment: [open_gpu_cloud.toolkit.openstack, open_gpu_cloud.toolkit.attributes.check_and_diff]
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
  open_gpu_cloud.toolkit.os_images:
    cloud: gpu-cloud
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

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import images as cloud_images
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import run_module


def main():
    run_module(cloud_images)


if __name__ == "__main__":
    main()
