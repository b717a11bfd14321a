"""Fixtures of the real-kernel scenario: the guest (built once, cached) and the boots (run once).

The Intel scenario runs beside the bad-command-line boot and then the two boots without a vIOMMU (Intel, AMD), one
qemu each (TCG keeps one core busy per guest); the tests assert on what they recorded. The AMD vIOMMU is proven on the real Debian server
(molecule/host_server: GRUB, the initramfs and systemd on the same emulated GPU host), so it has no chain here. Timings of the last run
go to .cache/realkernel/last-run.json (bench/realkernel/README.md).
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import qemu_harness  # noqa: E402
from realkernel import guest as guestlib  # noqa: E402
from realkernel import scenario, vm  # noqa: E402

# Every argument here is wrong in its own way; rd.driver.pre= is right (it is for the initramfs).
BAD_ARGS = ["quiet", "amd_iommu=on", "intel_iommu=1", "iommu_pt", "vfio-pci.idz=1234:1111", "rd.driver.pre=vfio-pci"]


@pytest.fixture(scope="session")
def realkernel_guest():
    started = time.monotonic()
    qemu_harness.binary()
    built = guestlib.build()
    built_s = time.monotonic() - started
    return built, built_s


@pytest.fixture(scope="session")
def realkernel_runs(realkernel_guest, tmp_path_factory):
    """{"intel": Flow, "bad": Boot, "no-viommu-intel"/"no-viommu-amd": LeftAlone}, or the exception a run raised in
    its place."""
    built, built_s = realkernel_guest
    base = tmp_path_factory.mktemp("realkernel")
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {"intel": pool.submit(scenario.run_flow, built, "intel", base / "intel")}
        futures["bad"] = pool.submit(vm.boot, built, "amd", BAD_ARGS, base / "bad")
        for vendor in ("intel", "amd"):  # after the bad boot, on the same worker: the chain takes as long as the three
            futures[f"no-viommu-{vendor}"] = pool.submit(scenario.run_without_viommu, built, vendor,
                                                         base / f"no-viommu-{vendor}")
        runs = {name: future.exception() or future.result() for name, future in futures.items()}
    _record(runs, built, built_s, time.monotonic() - started, base)
    return runs


def _record(runs, built, built_s, boots_s, base):
    boots = []
    for name, run in runs.items():
        if isinstance(run, Exception):
            boots.append({"run": name, "error": str(run)[:500]})
            continue
        if isinstance(run, scenario.Flow):
            named = [(s.name, s.boot) for s in run.steps]
        elif isinstance(run, scenario.LeftAlone):
            named = [(run.step.name, run.step.boot)]
        else:
            named = [(name, run)]
        for step_name, boot in named:
            boots.append({"run": name, "boot": step_name, "machine": boot.machine, "cmdline": boot.cmdline,
                          "wall_s": round(boot.wall_s, 1), "qemu_cpu_s": round(boot.cpu_s, 1),
                          "guest_uptime_s": boot.times})
    record = {"kernel": built.kernel_release, "versions": built.versions, "guest_ready_s": round(built_s, 1),
              "boots_wall_s": round(boots_s, 1), "boots": boots, "workdir": str(base)}
    out = guestlib.DEFAULT_CACHE / "last-run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
