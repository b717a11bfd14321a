#!/usr/bin/env python3
"""Kill a run of the host phase for real at a step boundary (test-only; never on a real host).

A boundary is a moment after which a run may die: a file of the sandbox host renamed into place by a module (each
file the role writes, the state file), and each tool (the boot-config tool, the initramfs tool, the
reboot) having done its work, before the run hears of it (killed as it starts, a tool has done nothing: the same
as the boundary before it). Each has a key (``file:etc/default/grub``, ``state:[]->[boot_config]``,
``tool:update-grub:after``...). At every boundary the run appends the key to
``$OGC_KILL_DIR/events.log``; the first time a key is met at all (it is not yet in ``killed.txt``), it is
written there and the whole run - ansible-playbook and every process under it - is killed with SIGKILL, as a crash
or an operator's kill -9 would. The next run goes on until the next boundary it has not died at, so a chain of runs dies
once at every boundary, and the last one runs to the end.

Two ways in, no hook in the product:
* file boundaries: ``sitecustomize.py`` in ``tests/helpers/kill_sitecustomize`` (on PYTHONPATH for the run) wraps
  ``os.rename``/``os.replace`` in the module processes, for paths under ``$OGC_KILL_ROOT``;
* tool boundaries: this script as the tool command, ``kill_points.py NAME -- COMMAND...``: the tool (with
  ``OGC_KILL_TOOL`` set, so its own writes are not boundaries), then a boundary once it succeeded; its exit status
  otherwise.
"""

import json
import os
import signal
import subprocess
import sys

STATE_NAME = "var/lib/open-gpu-cloud/passthrough_host.json"


def active():
    return bool(os.environ.get("OGC_KILL_DIR") and os.environ.get("OGC_KILL_ROOT")
                and not os.environ.get("OGC_KILL_TOOL"))


def boundary(key):
    """Record the boundary; die (the whole run) the first time it is met."""
    directory = os.environ["OGC_KILL_DIR"]
    with open(os.path.join(directory, "events.log"), "a", encoding="utf-8") as handle:
        handle.write(key + "\n")
    killed_path = os.path.join(directory, "killed.txt")
    killed = set()
    if os.path.exists(killed_path):
        with open(killed_path, encoding="utf-8") as handle:
            killed = set(handle.read().splitlines())
    if key in killed:
        return
    with open(killed_path, "a", encoding="utf-8") as handle:
        handle.write(key + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    kill_run()


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def kill_run():
    """SIGKILL the whole run: the topmost ansible-playbook process above this one and every process under it (its
    workers each start a session of their own, so no one process group holds them all), this one included."""
    chain, pid = [], os.getpid()
    while pid > 1:
        chain.append(pid)
        pid = _ppid(pid)
    main = next((p for p in reversed(chain) if "ansible-playbook" in _cmdline(p)), os.getpid())
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_ppid(int(entry)), []).append(int(entry))
    run, todo = [], [main]
    while todo:
        pid = todo.pop()
        run.append(pid)
        todo += children.get(pid, [])
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # frozen first: nothing starts or reaps in between
        for pid in run:
            if pid != os.getpid():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
    os.kill(os.getpid(), signal.SIGKILL)


def _summary(text):
    try:
        state = json.loads(text) if text else {}
    except ValueError:
        return "?"
    parts = list(state.get("pending") or [])
    if state.get("reboot"):
        parts.append("reboot")
    return "[" + ",".join(parts) + "]"


def _rel(path):
    path = os.fsdecode(path)
    root = os.path.realpath(os.environ["OGC_KILL_ROOT"])
    real = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
    if not real.startswith(root + os.sep):
        return None
    rel = real[len(root) + 1:]
    return None if os.path.basename(rel).startswith(".") else rel


def before_rename(src, dst):
    """The key a rename onto ``dst`` will make (read before it happens), or None when it is not a boundary."""
    rel = _rel(dst)
    if rel is None:
        return None
    if rel == STATE_NAME:
        old = open(dst, encoding="utf-8").read() if os.path.exists(dst) else ""
        new = open(src, encoding="utf-8").read() if os.path.exists(src) else ""
        return f"state:{_summary(old)}->{_summary(new)}"
    return "file:" + rel


def tool(argv):
    """``kill_points.py NAME -- COMMAND...``"""
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    name, command = argv[0], argv[2:]
    rc = subprocess.run(command, env=dict(os.environ, OGC_KILL_TOOL="1"), check=False).returncode
    if rc:
        return rc
    if active():
        boundary(f"tool:{name}:after")
    return 0


if __name__ == "__main__":
    sys.exit(tool(sys.argv[1:]))
