"""A Nova virt driver for the test cloud: Nova's FakeDriver plus PCI devices that look like GPUs.

nova-compute loads it with ``compute_driver = ogc_fake_gpu.FakeGpuDriver`` when started through
ogc_nova_compute.py (which adds this directory to the ``nova.virt`` package). Nova's own ``fake.FakeDriverWithPciResources`` reports SR-IOV NICs with the vendor id
``fake-vendor_id``, which no real ``[pci] alias`` (4 hex digits) can match; this one reports the devices
listed in the JSON file named by ``OGC_FAKE_PCI_DEVICES`` (a list of ``{address, vendor_id, product_id,
dev_type, numa_node}``), e.g. two Tesla V100 (10de:1db4, type-PCI) as the seed server passes to Nova.
Everything else (huge fake capacity) is Nova's FakeDriver, except that the compute node's UUID is stable
(derived from the node name) and written to the node identity file (``<state_path>/compute_id``) as a real
driver does, so nova-compute can be restarted on the same databases (Nova refuses to start without that file
once it has run), and that its guests outlive a restart of nova-compute as a hypervisor's do: the running ones are
listed in ``<instances_path>/ogc-fake-guests.json`` and found running again by the next start.
"""

import json
import os
import uuid

from oslo_serialization import jsonutils

import nova.conf
from nova.compute import power_state
from nova.virt import fake
from nova.virt import node as virt_node

CONF = nova.conf.CONF


def node_uuid(nodename):
    """The compute node's UUID: the same on every start."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, "ogc-testcloud." + nodename))


def _devices():
    path = os.environ.get("OGC_FAKE_PCI_DEVICES")
    if not path:
        return []
    with open(path, encoding="utf-8") as handle:
        listed = json.load(handle)
    devices = []
    for item in listed:
        devices.append({
            "address": item["address"],
            "vendor_id": item["vendor_id"],
            "product_id": item["product_id"],
            "dev_type": item.get("dev_type", "type-PCI"),
            "status": "available",
            "parent_addr": None,
            "numa_node": item.get("numa_node", 0),
            "label": f"label_{item['vendor_id']}_{item['product_id']}",
        })
    return devices


class FakeGpuDriver(fake.FakeDriver):
    """FakeDriver reporting the PCI devices of OGC_FAKE_PCI_DEVICES as passthrough candidates."""

    def __init__(self, virtapi, read_only=False):
        super().__init__(virtapi, read_only)
        if virt_node.read_local_node_uuid() is None:
            virt_node.write_local_node_uuid(node_uuid(CONF.host))
        for guest_uuid, name in self._read_guests().items():
            self.instances[guest_uuid] = fake.FakeInstance(name, power_state.RUNNING, guest_uuid)

    @staticmethod
    def _guests_file():
        return os.path.join(CONF.instances_path, "ogc-fake-guests.json")

    def _read_guests(self):
        try:
            with open(self._guests_file(), encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return {}

    def _write_guests(self):
        path = self._guests_file()
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump({guest_uuid: guest.name for guest_uuid, guest in self.instances.items()}, handle)
        os.replace(path + ".tmp", path)

    def spawn(self, *args, **kwargs):  # pylint: disable=arguments-differ
        super().spawn(*args, **kwargs)
        self._write_guests()

    def destroy(self, *args, **kwargs):  # pylint: disable=arguments-differ
        super().destroy(*args, **kwargs)
        self._write_guests()

    def get_available_resource(self, nodename):
        host_status = super().get_available_resource(nodename)
        if host_status:
            host_status["uuid"] = node_uuid(nodename)
            host_status["pci_passthrough_devices"] = jsonutils.dumps(_devices())
        return host_status
