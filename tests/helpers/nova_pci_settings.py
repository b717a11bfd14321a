"""Nova's effective PCI settings, read through Nova's own configuration objects (run with the OpenStack venv's python).

Usage: python nova_pci_settings.py FILE [FILE ...]  ->  JSON on stdout: every option of the groups [pci] and
[filter_scheduler] as nova.conf.CONF holds it after reading the files in order (as a service started with
``--config-file`` for each), multi-valued options (alias, device_spec) as lists.
"""

import json
import sys

import nova.conf

GROUPS = ("pci", "filter_scheduler")


def main():
    conf = nova.conf.CONF
    args = []
    for path in sys.argv[1:]:
        args += ["--config-file", path]
    conf(args=args, project="nova", default_config_files=[])
    out = {}
    for group in GROUPS:
        for opt in sorted(conf[group].keys() if hasattr(conf[group], "keys") else conf[group]):
            value = getattr(conf[group], opt)
            out[f"{group}.{opt}"] = list(value) if isinstance(value, (list, tuple)) else value
    json.dump(out, sys.stdout, sort_keys=True, default=str)


if __name__ == "__main__":
    main()
