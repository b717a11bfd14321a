#!/usr/bin/env python3
"""Split a py-spy profile of ansible-playbook (raw, with --subprocesses) into the controller's main process, its
forked task workers and the modules' processes, and list the costliest functions of each.

    py-spy record -s -r 40 -f raw -o prof.txt -- ansible-playbook site.yml -i INVENTORY --tags plan,host
    bench/fleet/profile_summary.py prof.txt [--top 15]

py-spy names every sample after the first process, so the kind is told from the stack: a module process runs an
AnsiballZ wrapper, a worker runs ansible/executor/process/worker.py, the rest is the main process (the strategy,
forking the workers, reading their results, the callbacks). Figures are samples (at -r 40, 40 per CPU-second);
the frames listed are those under 90 % of their kind's samples (the outer frames every sample has are left out).
"""

import argparse
import collections
import sys


def kind(frames):
    if any("AnsiballZ" in f or "_ansiballz" in f or "host_python" in f for f in frames):
        return "module processes"
    if any("multiprocessing/process.py:314" in f for f in frames):  # _bootstrap: the forked child's side
        return "task workers (forked)"
    return "main process"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv[1:])
    totals = collections.Counter()
    inclusive = collections.defaultdict(collections.Counter)
    with open(args.profile, encoding="utf-8") as handle:
        for line in handle:
            stack, count = line.rsplit(" ", 1)
            frames = stack.split(";")[1:]
            which = kind(frames)
            totals[which] += int(count)
            for frame in set(frames):
                inclusive[which][frame] += int(count)
    everything = sum(totals.values())
    for which, samples in totals.most_common():
        print(f"{which}: {samples} samples, {100 * samples / everything:.0f} %")
        # The outermost frames are in every sample of their kind; list what lies below them.
        for frame, count in [(f, c) for f, c in inclusive[which].most_common() if c < 0.9 * samples][:args.top]:
            print(f"  {count:6d}  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
