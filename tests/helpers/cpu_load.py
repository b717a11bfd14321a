"""A bounded CPU load of a test's own: ``processes`` busy loops, each a process of its own that stops by itself at
its deadline (``seconds``, checked on every turn of the loop: so even a test killed outright leaves nothing spinning
past it), and that the test stops by their PIDs as it leaves the ``with`` block. It loads the control host the way several AWX jobs at once do, so the
coordination tests can prove their bounds hold on a busy machine; it never outlives the test."""

from __future__ import annotations

import os
import subprocess
import sys
import time

BUSY = "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


class CpuLoad:
    """``with CpuLoad(processes, seconds) as load:`` ... ``load.running()`` says how many still spin."""

    def __init__(self, processes=None, seconds=20.0):
        self.processes = processes or 2 * (os.cpu_count() or 1)
        self.seconds = float(seconds)
        self.procs = []

    def __enter__(self):
        for _ in range(self.processes):
            self.procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, "-c", BUSY, str(self.seconds)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self

    def running(self):
        return sum(1 for proc in self.procs if proc.poll() is None)

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # by its PID
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        return False
