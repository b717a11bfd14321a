#!/usr/bin/env python3
"""Stand-in for a host command (update-grub, dracut, ...) on sandbox hosts (tests, demo): record the call,
optionally fail.

Usage: record_command.py LOG NAME [ARGS...]

Appends one JSON line {"name": NAME, "argv": [ARGS...]} to LOG. When a file named fail-NAME exists next
to LOG, prints its content to stderr and exits 1 instead (a test's way to make the command fail).
"""

import json
import os
import sys


def record(log, name, args):
    """Append the call to LOG; 1 (after printing the failure) when fail-NAME exists next to LOG, else 0.
    tests/standins/simulate_boot_config.py records through this too."""
    fail = os.path.join(os.path.dirname(os.path.abspath(log)), "fail-" + name)
    if os.path.exists(fail):
        with open(fail, encoding="utf-8") as handle:
            sys.stderr.write(handle.read() or f"{name}: failed\n")
        return 1
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"name": name, "argv": args}) + "\n")
    return 0


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    return record(argv[1], argv[2], argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
