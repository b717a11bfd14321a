#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Write a node_exporter textfile-collector file atomically."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prom_textfile
short_description: Write a node_exporter textfile-collector file atomically
description:
  - Writes C(content) (Prometheus text format) to C(path), a C(*.prom) file in the directory node_exporter's
    textfile collector reads (C(--collector.textfile.directory)).
  - The content goes to a temporary file in the same directory whose name does not end in C(.prom) (so
    the collector never reads it half written), is flushed to disk, then renamed over C(path); a scrape sees
    the old file or the new one, never a part.
  - Reports C(changed) only when a metric other than those in C(volatile_metrics) changes; the file is still
    rewritten when only those changed (a last-run timestamp must stay fresh).
  - The directory must exist (in check mode a missing one means the file would be created); nothing is
    written in check mode.
version_added: "0.1.0"
author:
  - open-gpu-cloud contributors (@open-gpu-cloud)
options:
  content:
    description:
      - The file's text, Prometheus text exposition format, ending with a newline.
    type: str
    required: true
  mode:
    description:
      - Permissions of the file (node_exporter must be able to read it).
    type: str
    default: "0644"
  path:
    description:
      - The file to write; its name must end in C(.prom).
    type: path
    required: true
  volatile_metrics:
    description:
      - Metric names whose sample lines do not count as a change (e.g. a last-run timestamp).
    type: list
    elements: str
    default: []
extends_documentation_fragment: [open_gpu_cloud.toolkit.attributes.check_and_diff]
attributes:
  check_mode:
    description: Computes the change with the same comparison and writes nothing.
  diff_mode:
    description: Shows the file before and after.
"""

EXAMPLES = r"""
- name: Write the GPU health metrics
  open_gpu_cloud.toolkit.prom_textfile:
    path: /var/lib/node_exporter/textfile_collector/ogc_gpu.prom
    content: "{{ gpu_health_report | open_gpu_cloud.toolkit.gpu_health_metrics(now().timestamp()) }}"
    volatile_metrics: [ogc_gpu_health_last_run_timestamp_seconds]
"""

RETURN = r"""
path:
  description: The file written (or that would be written in check mode).
  returned: always
  type: str
  sample: /var/lib/node_exporter/textfile_collector/ogc_gpu.prom
written:
  description: Whether the file was (re)written in this run.
  returned: always
  type: bool
  sample: true
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def _stable(text: str, volatile) -> list:
    """The sample lines that count for `changed`: all but those of the volatile metrics."""
    out = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if not line.startswith("#") and name in volatile:
            continue
        out.append(line)
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "path": {"type": "path", "required": True},
            "volatile_metrics": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    path, content = module.params["path"], module.params["content"]
    directory = os.path.dirname(path) or "."
    if not path.endswith(".prom"):
        module.fail_json(msg=f"prom_textfile: {path}: node_exporter's textfile collector reads only files named "
                             "*.prom; give the file that ending")
    if not content.endswith("\n"):
        module.fail_json(msg=f"prom_textfile: {path}: the content must end with a newline (Prometheus text format)")
    try:
        mode = int(module.params["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"prom_textfile: mode {module.params['mode']!r} is not an octal mode like '0644'")
    if not os.path.isdir(directory):
        if module.check_mode:  # a task before this one would create it in a real run
            module.exit_json(changed=True, path=path, written=False)
        module.fail_json(msg=f"prom_textfile: the directory {directory} does not exist: create it (the textfile "
                             "collector directory of node_exporter) or correct the path")
    try:
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    except FileNotFoundError:
        before = None
    except OSError as exc:
        module.fail_json(msg=f"prom_textfile: cannot read {path}: {exc.strerror}")
    volatile = set(module.params["volatile_metrics"])
    changed = before is None or _stable(before, volatile) != _stable(content, volatile)
    write = before != content
    result = {"changed": changed, "path": path, "written": bool(write and not module.check_mode)}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = {"before": before or "", "after": content, "before_header": path, "after_header": path}
    if write and not module.check_mode:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.rename(tmp, path)
        except OSError as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            module.fail_json(msg=f"prom_textfile: cannot write {path}: {exc.strerror}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
