#!/usr/bin/env python3
"""Discovery speed on synthetic sysfs trees (kernel layout, symlinks and all).

Builds trees of N PCI functions with scripts/mock_sysfs.py, then times
  - discover(): the module's reading and parsing alone (median of --repeat runs, warm page cache);
  - discover() naming every device from the PCI ID database (loading pci.ids included);
  - the module as Ansible runs it: a fresh Python process reading JSON args, the host's pci.ids found and
    read as by default (median of --repeat);
  - planning the result with the passthrough_plan filter.
Usage: PYTHONPATH=collections .venv/bin/python bench/discovery/run.py [--devices 1000 5000 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The module imports the collection's module_utils (AnsiballZ packs them for Ansible): its process finds them on
# PYTHONPATH, as this one does (run with PYTHONPATH=collections).
COLLECTIONS = os.path.join(ROOT, "collections")


def load(name, rel):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, rel))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import ids as pci_ids  # pylint: disable=import-outside-toplevel

    mock = load("mock_sysfs", "scripts/mock_sysfs.py")
    from ansible_collections.open_gpu_cloud.toolkit.plugins.modules import pci_passthrough_facts as facts_mod  # pylint: disable=import-outside-toplevel
    from ansible_collections.open_gpu_cloud.toolkit.plugins.filter import passthrough_plan as planner  # pylint: disable=import-outside-toplevel
    module_path = facts_mod.__file__
    database_path = pci_ids.find()
    print(f"pci.ids: {database_path}")
    print(f"{'devices':>8} {'groups':>7} {'discover()':>11} {'+ names':>9} {'module process':>15} {'plan':>8}")
    for count in args.devices:
        with tempfile.TemporaryDirectory() as tmp:
            mock.build_tree(mock.synthetic_fixture(count), tmp)
            sysfs, procfs = os.path.join(tmp, "sys"), os.path.join(tmp, "proc")
            facts = facts_mod.discover(sysfs, procfs)
            assert len(facts["devices"]) == count
            t_discover = median_seconds(lambda: facts_mod.discover(sysfs, procfs), args.repeat)
            t_names = median_seconds(lambda: facts_mod.discover(sysfs, procfs, pci_ids.load(database_path)),
                                     args.repeat) if database_path else float("nan")
            payload = json.dumps({"ANSIBLE_MODULE_ARGS": {"sysfs_root": sysfs, "procfs_root": procfs}})

            def run_module():
                subprocess.run([sys.executable, module_path], input=payload, capture_output=True, text=True, check=True,
                               env=dict(os.environ, PYTHONPATH=COLLECTIONS))

            t_module = median_seconds(run_module, args.repeat)
            t_plan = median_seconds(lambda: planner.passthrough_plan(facts, {}, "bench"), args.repeat)
            print(f"{count:>8} {len(facts['iommu_groups']):>7} {t_discover:>10.3f}s {t_names:>8.3f}s {t_module:>14.3f}s "
                  f"{t_plan:>7.3f}s")


if __name__ == "__main__":
    main()
