#!/usr/bin/env python3
"""Print the timings of the last real-kernel scenario run (.cache/realkernel/last-run.json) as a table."""

import json
import sys
from pathlib import Path

path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / ".cache/realkernel/last-run.json"
record = json.loads(path.read_text())
print(f"kernel {record['kernel']}; guest ready in {record['guest_ready_s']} s; all boots {record['boots_wall_s']} s wall")
print(f"{'run':6} {'boot':6} {'wall s':>7} {'qemu cpu s':>10} {'/init at':>9} {'powered off':>11}  command line")
for boot in record["boots"]:
    if "error" in boot:
        print(f"{boot['run']:6} error: {boot['error']}")
        continue
    times = boot["guest_uptime_s"]
    print(f"{boot['run']:6} {boot['boot']:6} {boot['wall_s']:7.1f} {boot['qemu_cpu_s']:10.1f} "
          f"{times.get('init', 0):9.1f} {times.get('sent', 0):11.1f}  {boot['cmdline']}")
