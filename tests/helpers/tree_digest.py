#!/usr/bin/env python3
"""Print one digest of everything under ROOT: paths, types, modes, file contents, link targets.

Usage: tree_digest.py ROOT. Never follows symlinks (sysfs trees loop). Tests compare the digest
before and after a check-mode run to prove the run wrote nothing.
"""

import hashlib
import os
import stat
import sys


def digest(root):
    total = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            total.update(f"{os.path.relpath(path, root)} {info.st_mode:o}\n".encode())
            if stat.S_ISLNK(info.st_mode):
                total.update(os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    total.update(handle.read())
    return total.hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(digest(sys.argv[1]))
