"""Helpers for the Nova PCI / kolla-ansible tests: plans, inventories, running our playbooks."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent


def plan(host, devices, aliases):
    """A plan following docs/design.md section 2 (only the keys the Nova role reads)."""
    return {"host": host, "selected": devices, "aliases": aliases}


def device(address, product="1db4", alias="tesla-v100", device_type="type-PCI", vendor="10de"):
    return {"address": address, "vendor_id": vendor, "product_id": product,
            "device_type": device_type, "alias": alias}


def alias(name="tesla-v100", product="1db4", device_type="type-PCI", vendor="10de"):
    return {"name": name, "vendor_id": vendor, "product_id": product, "device_type": device_type}


def write_inventory(path, gpu_hosts, control=("ctl1",), extra_groups=None):
    """An inventory with a local deploy host, GPU hosts and a controller. Its plan directory is beside it (never
    the site default under /var/lib, group_vars/all/main.yml); a test's extra variables may name another."""
    groups = {"gpu_hosts": {"hosts": {h: {} for h in gpu_hosts}},
              "control": {"hosts": {h: {} for h in control}}}
    groups.update(extra_groups or {})
    inv = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                           "ansible_python_interpreter": sys.executable}},
                   "vars": {"passthrough_plan_dir": str(pathlib.Path(path).resolve().parent / "plans")},
                   "children": groups}}
    path.write_text(json.dumps(inv))
    return path


def run_playbook(playbook, inventory, extra_vars, *args, env=None, check=False):
    """Run ansible-playbook; return (returncode, output with whitespace folded, recap)."""
    vars_file = pathlib.Path(str(inventory) + ".vars.json")
    vars_file.write_text(json.dumps(extra_vars))
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / "playbooks" / playbook),
           "-e", "@" + str(vars_file), *args]
    if check:
        cmd.append("--check")
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_FORCE_COLOR="0", PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    recap = {"changed": None, "failed": None}
    for line in out.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            fields = dict(f.split("=") for f in line.split(":", 1)[1].split())
            recap = {"changed": int(fields["changed"]), "failed": int(fields["failed"])}
    # Messages are compared with runs of whitespace folded: the YAML callback wraps long lines.
    return proc.returncode, " ".join(out.split()), recap
