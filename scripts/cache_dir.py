#!/usr/bin/env python3
"""Where the test harnesses keep what they build outside the checkout, and the key of what they built it from.

Every such cache lives under one root,

    ${OGC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/open-gpu-cloud}/<what>/<key>/

where <what> names the artefact (``debian-server``, a guest image, ...) and <key> hashes every input the
artefact was built from (package versions as the archive resolves them, the contents of the builder's files),
so a change of any input builds a new one and an unchanged input finds the old one. Shell users:

    dir=$(python3 scripts/cache_dir.py debian-server "$key")       # the directory (not created)
    key=$(python3 scripts/cache_dir.py --key builder.sh versions.txt)  # the key of these files' contents
    root=$(python3 scripts/cache_dir.py)                            # the root
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

KEY_LENGTH = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def root() -> Path:
    """The root of the project's caches: $OGC_CACHE_DIR, else $XDG_CACHE_HOME/open-gpu-cloud, else
    ~/.cache/open-gpu-cloud."""
    explicit = os.environ.get("OGC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "open-gpu-cloud"


def directory(what: str, key: str | None = None) -> Path:
    """<root>/<what>[/<key>]; each part a plain name (no path separators, no leading dot)."""
    for label, part in (("what", what), ("key", key)):
        if part is not None and not _NAME.match(part):
            raise ValueError(f"cache {label} {part!r}: use letters, digits, '.', '_' and '-' (not first)")
    path = root() / what
    return path / key if key is not None else path


def input_key(*inputs: bytes | str | os.PathLike) -> str:
    """A key over the inputs, in order: bytes and str as given, a path by its name and contents."""
    digest = hashlib.sha256()
    for item in inputs:
        if isinstance(item, os.PathLike):
            path = Path(item)
            data = path.name.encode() + b"\0" + path.read_bytes()
        elif isinstance(item, str):
            data = item.encode()
        else:
            data = bytes(item)
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:KEY_LENGTH]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--key", nargs="+", metavar="FILE", help="print the key of these files' names and contents")
    parser.add_argument("what", nargs="?", help="the artefact's name")
    parser.add_argument("key_value", nargs="?", metavar="KEY", help="the artefact's key")
    args = parser.parse_args(argv)
    try:
        if args.key:
            print(input_key(*(Path(f) for f in args.key)))
        elif args.what:
            print(directory(args.what, args.key_value))
        else:
            print(root())
    except (OSError, ValueError) as exc:
        print(f"cache_dir.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
