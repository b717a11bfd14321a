"""Read rendered Nova configs with Nova's own code (run with the OpenStack venv's python).

Usage: python nova_config_check.py REQUEST.json  ->  JSON observations on stdout.
REQUEST: {"files": {label: path}, "devices": {label: [device dicts from the facts]},
          "flavors": [alias names],
          "numa": {case: {"file": label, "devices": [device dicts], "sockets": [socket of each host NUMA node],
                          "flavors": [{name, vcpus, ram, extra_specs}]}}}
For each file: the parsed aliases (nova.pci.request.get_alias_from_config), the PCI requests of a
flavor asking `pci_passthrough:alias=<name>:1` for each name (get_pci_requests_from_flavor), the
scheduler filters, and for labels with devices the addresses the device_spec lets Nova assign
(nova.pci.whitelist.Whitelist.device_assignable). For each "numa" case, whether Nova would place each flavor
on a host with those devices and NUMA nodes, by Nova's own code: the PCI requests from the flavor
(get_pci_requests_from_flavor with the flavor's get_pci_numa_policy_constraint), the guest's NUMA topology
(numa_get_constraints), then numa_fit_instance_to_host over the host's PciDeviceStats (the NUMATopologyFilter's
call, with no Placement mapping: the pool path), or the PCI stats alone for a guest without a NUMA topology. The host
has as many NUMA nodes as the devices name (at least two), 16 CPUs and 64 GiB each, on the sockets given. The test
asserts on them.
"""

import json
import sys

import nova.conf
from nova import exception, objects
from nova.objects import fields
from nova.pci import request as pci_request
from nova.pci import stats as pci_stats
from nova.pci import whitelist
from nova.virt import hardware

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


def host_topology(sockets, cpus=16, memory_mb=65536):
    """A host of len(sockets) NUMA nodes, node i on socket sockets[i]."""
    cells = []
    for node, socket in enumerate(sockets):
        cpuset = set(range(node * cpus, (node + 1) * cpus))
        cells.append(objects.NUMACell(
            id=node, cpuset=cpuset, pcpuset=cpuset, memory=memory_mb, cpu_usage=0, memory_usage=0,
            pinned_cpus=set(), siblings=[{cpu} for cpu in cpuset],
            mempages=[objects.NUMAPagesTopology(size_kb=4, total=memory_mb * 256, used=0),
                      objects.NUMAPagesTopology(size_kb=2048, total=memory_mb // 2, used=0)],
            network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False), socket=socket))
    return objects.NUMATopology(cells=cells)


def numa_fit(path, devices, sockets, flavors):
    """{flavor name: whether Nova places it on the host} (see the module's docstring)."""
    CONF(args=[], project="nova", default_config_files=[path])
    pci_request.get_alias_from_config.cache_clear()
    topology = host_topology(sockets)
    out = {}
    for flavor in flavors:
        stats = pci_stats.PciDeviceStats(topology, dev_filter=whitelist.Whitelist(CONF.pci.device_spec))
        for index, device in enumerate(devices):
            stats.add_device(objects.PciDevice(
                compute_node_id=1, address=device["address"], vendor_id=device["vendor_id"],
                product_id=device["product_id"], dev_type=fields.PciDeviceType.STANDARD,
                status=fields.PciDeviceStatus.AVAILABLE, numa_node=device.get("numa_node"), parent_addr=None,
                request_id=None, extra_info={}, dev_id=f"pci_{index}", label=f"label_{index}", instance_uuid=None))
        nova_flavor = objects.Flavor(name=flavor["name"], vcpus=flavor["vcpus"], memory_mb=flavor["ram"], root_gb=1,
                                     ephemeral_gb=0, swap=0, extra_specs=flavor["extra_specs"])
        image = objects.ImageMeta.from_dict({"properties": {}})
        policy = hardware.get_pci_numa_policy_constraint(nova_flavor, image)
        requests = pci_request.get_pci_requests_from_flavor(nova_flavor, affinity_policy=policy).requests
        guest = hardware.numa_get_constraints(nova_flavor, image)
        if guest is None:
            out[flavor["name"]] = stats.support_requests(requests, {})
        else:
            out[flavor["name"]] = hardware.numa_fit_instance_to_host(
                topology, guest, {}, pci_requests=requests, pci_stats=stats) is not None
    return out


def main():
    objects.register_all()
    with open(sys.argv[1]) as f:
        req = json.load(f)
    result = {label: observe(path, req.get("devices", {}).get(label), req.get("flavors", []))
              for label, path in req["files"].items()}
    result["numa"] = {case: numa_fit(req["files"][spec["file"]], spec["devices"], spec["sockets"], spec["flavors"])
                      for case, spec in req.get("numa", {}).items()}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
