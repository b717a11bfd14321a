"""Helpers for the Nova PCI / kolla-ansible tests: plans, inventories, running our playbooks."""

import json
import pathlib

import ogc_testlib

ROOT = pathlib.Path(ogc_testlib.ROOT)


def plan(host, devices, aliases):
    """A plan following docs/design.md section 2 (only the keys the Nova role reads)."""
    return {"host": host, "selected": devices, "aliases": aliases}


def device(address, product="1db4", alias="tesla-v100", device_type="type-PCI", vendor="10de"):
    return {"address": address, "vendor_id": vendor, "product_id": product,
            "device_type": device_type, "alias": alias}


def alias(name="tesla-v100", product="1db4", device_type="type-PCI", vendor="10de"):
    return {"name": name, "vendor_id": vendor, "product_id": product, "device_type": device_type}


def write_inventory(path, gpu_hosts, control=("ctl1",)):
    """An inventory with a local deploy host, GPU hosts and a controller. Its plan directory is beside it (never
    the site default under /var/lib, group_vars/all/main.yml); a test's extra variables may name another."""
    return ogc_testlib.write_inventory(
        path, {h: {} for h in gpu_hosts}, {"passthrough_plan_dir": str(pathlib.Path(path).resolve().parent / "plans")},
        groups={"control": {h: {} for h in control}}, hosts={"localhost": ogc_testlib.LOCAL_HOST}, local=False)


def run_playbook(playbook, inventory, extra_vars, *args, env=None, check=False):
    """Run ansible-playbook; return (returncode, output with whitespace folded, recap)."""
    vars_file = pathlib.Path(str(inventory) + ".vars.json")
    vars_file.write_text(json.dumps(extra_vars))
    proc = ogc_testlib.run_playbook("-i", inventory, ROOT / "playbooks" / playbook, "-e", "@" + str(vars_file), *args,
                                    *(["--check"] if check else []), env=ogc_testlib.ansible_env(**(env or {})),
                                    timeout=900)
    out = ogc_testlib.output(proc)
    recap = {"changed": None, "failed": None}
    for line in out.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            fields = dict(f.split("=") for f in line.split(":", 1)[1].split())
            recap = {"changed": int(fields["changed"]), "failed": int(fields["failed"])}
    # Messages are compared with runs of whitespace folded: the YAML callback wraps long lines.
    return proc.returncode, ogc_testlib.words(out), recap
