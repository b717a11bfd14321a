#!/usr/bin/env python3
"""The GPU guest image: its first build, a run of the role over the cached image, a boot, an upload.

    .venv/bin/python bench/gpu_image/run.py [--boot] [--smp 1 2] [--upload] [--out DIR]

Builds (or finds) the image exactly as the tests do (tests/helpers/gpu_image.py: playbooks/images.yml on this
machine, cached by its inputs), and prints one JSON document: the first build as recorded when it happened (wall
time, load average, image size), this run of the role, and, when asked, boots under qemu (TCG, the test's config
drive, per --smp) and an upload with playbooks/images.yml (os_images, checksum from the file) to a test cloud
started for it (scripts/testcloud.sh, Keystone and Glance on 127.0.0.1), each with its wall and CPU time and the
load average around it. Raw logs (the guest's console, the playbook's output) go to --out, outside the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
import gpu_image  # noqa: E402  pylint: disable=wrong-import-position


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def guest_times(facts: dict) -> dict:
    """When, in the guest's uptime, cloud-init was done and the report ended, and what each fact took."""
    status = facts.get("cloud-init-status", {})
    return {"cloud_init_done_s": round(status.get("uptime_s", 0) + status.get("took_s", 0), 1),
            "report_end_s": max((f["uptime_s"] + f["took_s"] for f in facts.values()), default=None),
            "took_s": {name: fact["took_s"] for name, fact in facts.items() if fact["took_s"] >= 1}}


def upload(build, out: str) -> dict:
    cloud = os.path.join(out, "cloud")
    testcloud = os.path.join(ROOT, "scripts", "testcloud.sh")
    subprocess.run([testcloud, "start", "--dir", cloud, "--lifetime", "1800"], check=True, capture_output=True,
                   cwd=ROOT)
    try:
        image = build.variables["image_builds"][0]
        extra = os.path.join(out, "upload-vars.json")
        with open(extra, "w", encoding="utf-8") as handle:
            json.dump({"image_builds": [image], "image_files": {image["name"]: build.image},
                       "cloud_clouds_yaml": os.path.join(cloud, "clouds.yaml"), "cloud_name": "ogc-test"}, handle)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                os.path.join(ROOT, "playbooks", "images.yml"), "-e", f"@{extra}"]
        load, cpu0, started = os.getloadavg(), children_cpu(), time.monotonic()
        with open(os.path.join(out, "upload.log"), "w", encoding="utf-8") as log:
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, check=False)
        return {"rc": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
                "cpu_s_client": round(children_cpu() - cpu0, 1), "image_bytes": os.path.getsize(build.image),
                "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
                "log": os.path.join(out, "upload.log")}
    finally:
        subprocess.run([testcloud, "stop", "--dir", cloud], capture_output=True, cwd=ROOT, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--boot", action="store_true", help="boot the image under qemu (TCG)")
    parser.add_argument("--smp", type=int, nargs="+", default=[1], help="vCPUs of the boots (one boot each)")
    parser.add_argument("--upload", action="store_true", help="upload it to a test cloud started for it")
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="ogc-bench-gpu-image."),
                        help="raw logs (outside the checkout)")
    args = parser.parse_args()
    result = {"out": args.out, "cores": os.cpu_count()}
    build = gpu_image.ensure(f"bench-{time.time():.0f}")
    state = build.state()
    result.update(key=build.key, image=build.image, first_build=state.get("first_build"), role_run=state["runs"][-1])
    if args.boot:
        result["boots"] = []
        for smp in args.smp:
            load = os.getloadavg()
            boot = gpu_image.boot(build.image, os.path.join(args.out, f"boot-smp{smp}"), smp=smp)
            result["boots"].append({"smp": smp, "wall_s": boot["wall_s"], "qemu_cpu_s": boot["cpu_s"],
                                    "ssh_banner_s": boot["ssh_banner_s"],
                                    "guest": guest_times(boot["facts"]),
                                    "load_before": [round(x, 2) for x in load],
                                    "load_after": [round(x, 2) for x in os.getloadavg()],
                                    "console": boot["console"]})
    if args.upload:
        result["upload"] = upload(build, args.out)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
