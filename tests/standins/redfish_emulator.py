#!/usr/bin/env python3
"""Run sushy-tools' Redfish emulator on 127.0.0.1 with BIOS support, TLS and basic auth (tests only).

Usage: redfish_emulator.py --dir DIR --port PORT --user USER --password PASSWORD
                           [--manufacturer NAME] [--bios JSON] [--lifetime SECONDS]

sushy-tools' fake driver answers 501 for BIOS; this wraps it in a driver that keeps BIOS attributes
the way firmware does: a PATCH to Bios/Settings stages them and they become current at the next reset
(power restart or power on), so a caller has to power-cycle and read them back. Power changes apply at
once (the fake driver delays them up to 11 s). The server serves HTTPS with a self-signed certificate
made in DIR (openssl), checks USER/PASSWORD (bcrypt htpasswd in DIR), writes its state under DIR and
exits by itself after --lifetime seconds.
"""

import argparse
import json
import os
import subprocess
import sys
import threading

import bcrypt
from sushy_tools.emulator import main as sushy_main
from sushy_tools.emulator.resources.systems import fakedriver

DEFAULT_BIOS = {
    "BootMode": "Uefi",
    "ProcVirtualization": "Disabled",
    "SVMMode": "Disabled",
    "IOMMU": "Disabled",
    "SR_IOVSupport": "Disabled",
}


class BiosFakeDriver(fakedriver.FakeDriver):
    """The fake driver plus BIOS attributes that apply at the next reset."""

    def get_bios(self, identity):
        system = self._get(identity)
        return dict(system.get("bios") or self._config["OGC_BIOS"])

    def set_bios(self, identity, attributes):
        system = self._get(identity)
        pending = dict(system.get("bios_pending") or {})
        pending.update(attributes)
        self._update(system, bios_pending=pending)

    def reset_bios(self, identity):
        self._update(identity, bios_pending=dict(self._config["OGC_BIOS"]))

    def set_power_state(self, identity, state):
        system = self._get(identity)
        if state in ("ForceOff", "GracefulShutdown"):
            self._update(system, power_state="Off")
            return
        if "On" in state or "Restart" in state:
            bios = dict(system.get("bios") or self._config["OGC_BIOS"])
            bios.update(system.get("bios_pending") or {})
            self._update(system, power_state="On", bios=bios, bios_pending={},
                         resets=system.get("resets", 0) + 1)
            return
        super().set_power_state(identity, state)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--manufacturer", default="")
    parser.add_argument("--bios", default=json.dumps(DEFAULT_BIOS))
    parser.add_argument("--lifetime", type=int, default=600)
    args = parser.parse_args(argv)

    os.makedirs(args.dir, exist_ok=True)
    cert, key = os.path.join(args.dir, "bmc.crt"), os.path.join(args.dir, "bmc.key")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
    htpasswd = os.path.join(args.dir, "htpasswd")
    with open(htpasswd, "w", encoding="utf-8") as handle:
        hashed = bcrypt.hashpw(args.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        handle.write(f"{args.user}:{hashed}\n")

    fakedriver.FakeDriver = BiosFakeDriver       # main.py picks fakedriver.FakeDriver for --fake
    app = sushy_main.app
    app.configure(extra_config={
        "SUSHY_EMULATOR_AUTH_FILE": htpasswd,
        "SUSHY_EMULATOR_STATE_DIR": os.path.join(args.dir, "state"),
        "OGC_BIOS": json.loads(args.bios),
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [{
            "uuid": fakedriver.DEFAULT_UUID, "name": "gpu-host", "power_state": "On",
            "external_notifier": False, "nics": [{"mac": "00:5c:52:31:3a:9c", "ip": "127.0.0.1"}],
        }],
    })
    if args.manufacturer:
        # The system template hard-codes its Manufacturer; serve the one the test asks for.
        original = app.render_template

        def render_template(name, /, **params):
            text = original(name, **params)
            if name == "system.json":
                text = text.replace('"Sushy Emulator"', json.dumps(args.manufacturer), 1)
            return text
        app.render_template = render_template

    timer = threading.Timer(args.lifetime, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    sys.argv = [sys.argv[0], "--fake", "--interface", "127.0.0.1", "--port", str(args.port),
                "--ssl-certificate", cert, "--ssl-key", key]
    return sushy_main.main()


if __name__ == "__main__":
    sys.exit(main())
