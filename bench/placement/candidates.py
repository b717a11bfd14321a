"""GET /allocation_candidates on the test cloud's Placement, with synthetic many-GPU hosts, before and after the
options the project renders for them (plugins/module_utils/nova/placement_limits.py).

    python bench/placement/candidates.py [--hosts 2] [--gpus 8] [--asks 1,2,4,6,8] [--timeout 300]

1. Starts a test cloud of its own (scripts/testcloud.sh start --with-compute, in a fresh directory under the raw
   log directory) with Placement as the test cloud configures it (Placement's defaults), and creates HOSTS
   compute-node providers (VCPU, MEMORY_MB, DISK_GB) with GPUS children each, one unit of CUSTOM_GPU_BENCH apiece:
   the tree Nova builds for a host with PCI in Placement.
2. Asks for each count K of ASKS what Nova asks for a flavor of K GPUs: the flavor's VCPU and RAM unnumbered, then K
   request groups of one GPU (resources1..K, group_policy none, limit 1000: Nova's max_placement_results),
   microversion 1.36. Records the wall time, the candidates returned and the hosts among them; a request not
   answered within TIMEOUT s is recorded as such.
3. Renders placement.conf with the project's rule for this fleet (release 2026.1, flavors asking up to the largest K)
   and restarts the cloud with it (testcloud --placement-from), then asks the same again.

Raw results: bench/raw_logs.py's directory (placement-candidates); the summary goes into bench/placement/README.md
by hand, with the command and the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "collections"))

import raw_logs  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement_limits  # noqa: E402

TESTCLOUD = os.path.join(ROOT, "scripts", "testcloud.sh")
RC = "CUSTOM_GPU_BENCH"
MICROVERSION = "1.36"


def testcloud(*args):
    proc = subprocess.run([TESTCLOUD, *args], capture_output=True, text=True, check=False, cwd=ROOT, timeout=900)
    if proc.returncode:
        raise SystemExit(f"testcloud.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def session(cloud_dir):
    """(requests session with an admin token, Placement's URL), from the test cloud's clouds.yaml."""
    import openstack  # pylint: disable=import-outside-toplevel

    config = openstack.config.OpenStackConfig(config_files=[os.path.join(cloud_dir, "clouds.yaml")], load_envvars=False)
    conn = openstack.connection.Connection(config=config.get_one(cloud="ogc-test"))
    url = conn.session.get_endpoint(service_type="placement", interface="public")
    http = requests.Session()
    http.headers.update({"X-Auth-Token": conn.session.get_token(), "OpenStack-API-Version": f"placement {MICROVERSION}",
                         "Accept": "application/json", "Content-Type": "application/json"})
    return http, url.rstrip("/")


def ensure(http, url, method, path, body=None, ok=(200, 201, 204)):
    response = http.request(method, url + path, data=None if body is None else json.dumps(body), timeout=120)
    if response.status_code not in ok:
        raise SystemExit(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")
    return response


def create_fleet(http, url, hosts, gpus):
    """HOSTS roots with GPUS one-unit children of RC (skipped when the first root exists: a rerun)."""
    ensure(http, url, "PUT", f"/resource_classes/{RC}", ok=(201, 204))
    if http.get(f"{url}/resource_providers?name=bench-gpu-0", timeout=60).json()["resource_providers"]:
        return
    for h in range(hosts):
        root = ensure(http, url, "POST", "/resource_providers", {"name": f"bench-gpu-{h}"}).json()
        inventory = {"VCPU": {"total": 128}, "MEMORY_MB": {"total": 1048576}, "DISK_GB": {"total": 4000}}
        ensure(http, url, "PUT", f"/resource_providers/{root['uuid']}/inventories",
               {"resource_provider_generation": root["generation"], "inventories": inventory})
        for g in range(gpus):
            child = ensure(http, url, "POST", "/resource_providers",
                           {"name": f"bench-gpu-{h}_0000:{g + 1:02x}:00.0", "parent_provider_uuid": root["uuid"]}).json()
            ensure(http, url, "PUT", f"/resource_providers/{child['uuid']}/inventories",
                   {"resource_provider_generation": child["generation"], "inventories": {RC: {"total": 1}}})


def ask(http, url, count, timeout):
    """One GET /allocation_candidates as Nova builds it for a flavor of COUNT GPUs; its figures."""
    query = ["resources=VCPU:4,MEMORY_MB:4096,DISK_GB:20", "group_policy=none", "limit=1000"]
    query += [f"resources{n}={RC}:1" for n in range(1, count + 1)]
    started = time.monotonic()
    try:
        response = http.get(f"{url}/allocation_candidates?{'&'.join(query)}", timeout=timeout)
    except requests.exceptions.Timeout:
        return {"gpus": count, "seconds": None, "timed_out_after_s": timeout}
    seconds = round(time.monotonic() - started, 2)
    if response.status_code != 200:
        return {"gpus": count, "seconds": seconds, "http": response.status_code, "error": response.text[:300]}
    body = response.json()
    roots = {rp for areq in body["allocation_requests"] for rp in areq["allocations"]
             if rp in body["provider_summaries"] and "VCPU" in body["provider_summaries"][rp]["resources"]}
    return {"gpus": count, "seconds": seconds, "candidates": len(body["allocation_requests"]), "hosts": len(roots)}


def measure(cloud_dir, hosts, gpus, asks, timeout, label):
    http, url = session(cloud_dir)
    create_fleet(http, url, hosts, gpus)
    rows = []
    for count in asks:
        row = dict(ask(http, url, count, timeout), mode=label)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--asks", default="1,2,4,6,8")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    asks = [int(a) for a in args.asks.split(",")]
    raw = raw_logs.run_dir("placement-candidates")
    cloud_dir = os.path.join(raw, "cloud")
    fleet = {f"bench-gpu-{h}": {RC: args.gpus} for h in range(args.hosts)}
    limits = placement_limits.candidate_limits("2026.1", True, fleet, {RC: max(asks)})
    conf = os.path.join(raw, "placement.conf")
    with open(conf, "w", encoding="utf-8") as handle:
        handle.write(placement_limits.render(limits["options"]) + "\n")
    results = {"hosts": args.hosts, "gpus": args.gpus, "rendered": limits, "commit": raw_logs.commit(), "rows": []}
    try:
        testcloud("start", "--dir", cloud_dir, "--lifetime", "3600", "--with-compute")
        results["rows"] += measure(cloud_dir, args.hosts, args.gpus, asks, args.timeout, "defaults")
        testcloud("start", "--dir", cloud_dir, "--lifetime", "3600", "--with-compute", "--placement-from", conf)
        results["rows"] += measure(cloud_dir, args.hosts, args.gpus, asks, args.timeout, "rendered")
    finally:
        subprocess.run([TESTCLOUD, "stop", "--dir", cloud_dir], capture_output=True, text=True, check=False, cwd=ROOT,
                       timeout=300)
        with open(os.path.join(raw, "results.json"), "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
        print(f"raw results: {raw}")


if __name__ == "__main__":
    main()
