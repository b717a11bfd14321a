"""The Redfish path: BIOS attributes set through the BMC emulator, then the host configured."""

import base64
import json
import ssl
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import sandbox  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = ["seed-v100"]


def redfish(host, path):
    port = (sandbox.state(host) / "bmc-port").read_text().strip()
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    token = base64.b64encode(b"ogc-admin:molecule-not-a-secret").decode()
    request.add_header("Authorization", "Basic " + token)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return json.loads(response.read())


def test_bios_attributes_are_current_after_the_power_cycle(host):
    system = redfish(host, "/redfish/v1/Systems")["Members"][0]["@odata.id"]
    attributes = redfish(host, system + "/BIOS")["Attributes"]
    assert attributes["SVMMode"] == "Enabled"
    assert attributes["IOMMU"] == "Enabled"
    assert attributes["SR_IOVSupport"] == "Enabled"
    assert attributes["BootMode"] == "Uefi"          # untouched
    assert redfish(host, system)["PowerState"] == "On"


def test_emulator_saw_exactly_one_reset(host):
    log = (sandbox.state(host) / "bmc.log").read_text()
    assert log.count("Actions/ComputerSystem.Reset") == 1
    assert log.count("PATCH /redfish/v1/Systems/") == 1


def test_host_configured_with_the_firmware(host):
    assert "iommu=pt vfio-pci.ids=10de:1db4" in sandbox.cmdline_value(host)
    assert sandbox.driver(host, "0000:27:00.0") == "vfio-pci"
    assert len(sandbox.reboots(host)) == 1
