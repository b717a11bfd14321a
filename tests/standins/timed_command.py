#!/usr/bin/env python3
"""Run a command and record when it ran (tests and benchmarks of sandbox hosts: the reboot waves).

Usage: timed_command.py LOG NAME [--hold SECONDS] -- COMMAND [ARGS...]

Appends one JSON line {"name": NAME, "start": T0, "end": T1, "rc": RC} to LOG (times in seconds since the
epoch, taken by this process), after holding SECONDS (default 0) before running COMMAND: a simulated reboot
then takes time, so reboots that overlap show it. Exits with COMMAND's status.
"""

import fcntl
import json
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 4 or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    split = argv.index("--")
    log, name, options, command = argv[1], argv[2], argv[3:split], argv[split + 1:]
    hold = float(options[options.index("--hold") + 1]) if "--hold" in options else 0.0
    start = time.time()
    time.sleep(hold)
    rc = subprocess.run(command, check=False).returncode if command else 0
    end = time.time()
    with open(log, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(json.dumps({"name": name, "start": start, "end": end, "rc": rc}) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
