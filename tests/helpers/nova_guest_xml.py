"""A guest's libvirt XML as Nova's own libvirt driver builds it (run with the OpenStack venv's python).

Usage: python nova_guest_xml.py REQUEST.json  ->  JSON on stdout: {case: the guest's domain XML}.
REQUEST: {case: {"flavor": {"name", "vcpus", "ram", "extra_specs"}, "image_properties": {...}}}

Nova's code, in-process, no hypervisor: LibvirtDriver._get_guest_config (what _get_guest_xml writes for a new
server) over Nova's own objects, with Nova's fake libvirt connection (nova/tests/fixtures/libvirt.py, shipped in the
nova wheel: a KVM host of Nova's supported libvirt and QEMU versions) and [libvirt] virt_type kvm, cpu_mode as
Nova's default for KVM (host-model). The flavor and the image properties are what the project declares.
"""

import json
import sys
import tempfile

import fixtures
import nova.conf
from nova import objects

objects.register_all()

# pylint: disable=wrong-import-position
from nova.network import model as network_model  # noqa: E402
from nova.tests import fixtures as nova_fixtures  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.virt import fake  # noqa: E402
from nova.virt.libvirt import blockinfo  # noqa: E402
from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

CONF = nova.conf.CONF
UUID = "6e4e6f1c-9a4e-4f9c-9a43-6b8b4c1e0a01"
IMAGE = "0c0f7a0e-5c2d-4b7a-8f0e-3f2b7d9c1a02"


def guest_xml(driver, flavor, properties):
    nova_flavor = objects.Flavor(id=1, flavorid="1", name=flavor["name"], memory_mb=flavor["ram"],
                                 vcpus=flavor["vcpus"], root_gb=1, ephemeral_gb=0, swap=0, rxtx_factor=1.0,
                                 vcpu_weight=None, extra_specs=dict(flavor.get("extra_specs") or {}))
    instance = objects.Instance(
        uuid=UUID, id=1, flavor=nova_flavor, vcpus=nova_flavor.vcpus, memory_mb=nova_flavor.memory_mb, root_gb=1,
        ephemeral_gb=0, project_id="p", user_id="u", image_ref=IMAGE, kernel_id=None, ramdisk_id=None,
        config_drive=None, numa_topology=None, pci_devices=objects.PciDeviceList(), system_metadata={},
        os_type=None, display_name=flavor["name"], old_flavor=None, new_flavor=None, vm_mode=None, vm_state=None,
        trusted_certs=None, resources=None, ephemeral_key_uuid=None, vcpu_model=None, migration_context=None,
        device_metadata=None, pci_requests=objects.InstancePCIRequests(requests=[]), host="h", node="n",
        hidden=False)
    image_meta = objects.ImageMeta.from_dict({"disk_format": "raw", "properties": dict(properties or {})})
    disk_info = blockinfo.get_disk_info(CONF.libvirt.virt_type, instance, image_meta)
    return driver._get_guest_config(  # pylint: disable=protected-access
        instance, network_model.NetworkInfo([]), image_meta, disk_info).to_xml()


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    CONF([], project="nova", default_config_files=[])
    nova.conf.neutron.register_dynamic_opts(CONF)
    CONF.set_override("virt_type", "kvm", group="libvirt")
    with tempfile.TemporaryDirectory() as instances:
        CONF.set_override("instances_path", instances)
        with fixtures.MonkeyPatch("nova.virt.libvirt.driver.LibvirtDriver._get_host_sysinfo_serial_os",
                                  lambda _self: "ogc-test"):
            fakelibvirt.LibvirtFixture().setUp()
            nova_fixtures.CGroupsFixture().setUp()
            driver = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), True)
            out = {case: guest_xml(driver, spec["flavor"], spec.get("image_properties")) for case, spec in
                   request.items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
