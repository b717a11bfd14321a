"""Read rendered Nova configs with Nova's own code (run with the OpenStack venv's python).

Usage: python nova_config_check.py REQUEST.json  ->  JSON observations on stdout.
REQUEST: {"files": {label: path}, "devices": {label: [device dicts from the facts]},
          "flavors": [alias names]}
For each file: the parsed aliases (nova.pci.request.get_alias_from_config), the PCI requests of a
flavor asking `pci_passthrough:alias=<name>:1` for each name (get_pci_requests_from_flavor), the
scheduler filters, and for labels with devices the addresses the device_spec lets Nova assign
(nova.pci.whitelist.Whitelist.device_assignable). The test asserts on them.
"""

import json
import sys

import nova.conf
from nova import exception, objects
from nova.pci import request as pci_request
from nova.pci import whitelist

CONF = nova.conf.CONF


def observe(path, devices, flavors):
    CONF(args=[], project="nova", default_config_files=[path])
    pci_request.get_alias_from_config.cache_clear()
    out = {"filters": {"enabled": list(CONF.filter_scheduler.enabled_filters),
                       "available": list(CONF.filter_scheduler.available_filters)},
           "report_in_placement": CONF.pci.report_in_placement,
           "pci_in_placement": CONF.filter_scheduler.pci_in_placement,
           "cpu_allocation_ratio": CONF.cpu_allocation_ratio}
    try:
        aliases = pci_request.get_alias_from_config()
        out["aliases"] = {name: {"numa_policy": policy, "specs": specs}
                          for name, (policy, specs) in aliases.items()}
    except exception.PciInvalidAlias as err:
        out["alias_error"] = str(err)
        return out
    out["requests"] = {}
    for name in flavors:
        try:
            reqs = pci_request.get_pci_requests_from_flavor(
                {"extra_specs": {"pci_passthrough:alias": f"{name}:1"}})
            out["requests"][name] = [{"count": r.count, "alias_name": r.alias_name, "spec": r.spec}
                                     for r in reqs.requests]
        except exception.NovaException as err:
            out["requests"][name] = {"error": str(err)}
    if devices is not None:
        wl = whitelist.Whitelist(CONF.pci.device_spec)
        out["device_spec"] = list(CONF.pci.device_spec)
        out["assignable"] = sorted(
            d["address"] for d in devices
            if wl.device_assignable({"vendor_id": d["vendor_id"], "product_id": d["product_id"],
                                     "address": d["address"], "parent_addr": None}))
    return out


def main():
    objects.register_all()
    with open(sys.argv[1]) as f:
        req = json.load(f)
    result = {label: observe(path, req.get("devices", {}).get(label), req.get("flavors", []))
              for label, path in req["files"].items()}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
