"""Helpers for the testinfra tests of the passthrough_host scenarios: where a sandbox host lives and
what its files and recorded commands say."""

import json
import os
from pathlib import Path


def root(host):
    """The sandbox root of a testinfra host (molecule's ephemeral directory, roots/<name>)."""
    name = host.backend.get_hostname()
    return Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "roots" / name


def state(host):
    name = host.backend.get_hostname()
    return Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "state" / name


def read(host, rel):
    return host.file(str(root(host) / rel.lstrip("/"))).content_string


def exists(host, rel):
    return host.file(str(root(host) / rel.lstrip("/"))).exists


def calls(host):
    """The commands the role ran (recorded by tests/standins/record_command.py), as argv lists."""
    return recorded_calls(state(host) / "calls.jsonl")


def recorded_calls(log):
    """The commands recorded in a log of tests/standins/record_command.py, as argv lists (none without a log)."""
    if not log.exists():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [[entry["name"]] + entry["argv"] for entry in entries]


def reboots(host):
    return simulated_reboots(root(host))


def simulated_reboots(sandbox_root):
    """The kernel lines of the reboots tests/standins/simulate_reboot.py made in a sandbox root."""
    path = sandbox_root / ".simulated-reboots"
    return path.read_text().splitlines() if path.exists() else []


def cmdline_value(host, variable="GRUB_CMDLINE_LINUX_DEFAULT"):
    for line in read(host, "etc/default/grub").splitlines():
        if line.startswith(variable + "="):
            return line
    raise AssertionError(f"{variable} not in the GRUB file")


def driver(host, address):
    return bound_driver(root(host), address)


def bound_driver(sandbox_root, address):
    """The driver a PCI function of a sandbox root's sysfs is bound to (None when unbound)."""
    link = sandbox_root / "sys" / "bus" / "pci" / "devices" / address / "driver"
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def content_lines(text):
    """Non-comment, non-empty lines."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
