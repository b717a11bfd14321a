# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Nova's PCI devices in Placement: which release has what, the names devices get, when the scheduler may switch.

The facts, from Nova's own code and option help (2026.1, nova 33: ``nova/conf/pci.py``,
``nova/conf/scheduler.py``, ``nova/compute/pci_placement_translator.py``, ``nova/pci/stats.py``):

* ``[pci] report_in_placement`` (2022.2 "Zed"): each nova-compute reports every device its ``[pci] device_spec``
  matches as a child resource provider of its compute node, named ``<hypervisor hostname>_<ADDRESS>`` (the address
  upper-cased), with an inventory of one unit of the device_spec's ``resource_class`` (default
  ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``) and the device_spec's ``traits`` plus ``COMPUTE_MANAGED_PCI_DEVICE``. "Once
  it is enabled it cannot be disabled any more."
* ``[filter_scheduler] pci_in_placement`` (2023.1 "Antelope"): nova-api, nova-scheduler and nova-conductor ask
  Placement for the devices and allocate them there (the PciPassthroughFilter still runs). "This can be enabled
  after [pci] report_in_placement is enabled on all compute hosts."
* An alias's ``resource_class`` and ``traits`` are used only by that scheduler path; the pool path ignores them
  (``nova/pci/stats.py``: ``ignored_spec_tags = ['resource_class', 'traits']``), so both modes are written the same
  and the same flavors land on the same devices whichever path schedules.
* ``one_time_use`` in a device_spec (2025.2 "Flamingo", Nova 32.0.0, release note ``one-time-use-devices``; Nova
  31.0.0, 2025.1 "Epoxy", has no such tag, so a GPU would go to the next tenant unreset): once allocated, the
  device's inventory is reserved and stays so after the server is gone, until an operator sets ``reserved`` back to
  0; the provider carries the trait ``HW_PCI_ONE_TIME_USE``. It needs ``report_in_placement`` (nova-compute refuses to start without it).

Names we give (the documented rule, docs/nova.md): a GPU model's resource class is ``CUSTOM_GPU_`` followed by its
alias name upper-cased with every run of other characters than ``A-Z`` and ``0-9`` turned into one ``_``
(``tesla-v100`` -> ``CUSTOM_GPU_TESLA_V100``); its traits are ``CUSTOM_GPU_<VENDOR>_<PRODUCT>`` (the model by PCI id,
stable across alias renames) and ``CUSTOM_NUMA_NODE_<n>`` where the plan knows the device's NUMA node. Each is
already in Placement's normal form, so Nova keeps it as written and Placement shows what the files say.
"""

from __future__ import annotations

import re

# Releases by series; kolla-ansible's openstack_release is "<year>.<n>" since 2023.1, a code name before, "master"
# on its development branch.
CODE_NAMES = {"victoria": (2020, 2), "wallaby": (2021, 1), "xena": (2021, 2), "yoga": (2022, 1), "zed": (2022, 2),
              "antelope": (2023, 1), "bobcat": (2023, 2), "caracal": (2024, 1), "dalmatian": (2024, 2),
              "epoxy": (2025, 1), "flamingo": (2025, 2), "gazpacho": (2026, 1)}
NEWEST = (9999, 9)  # "master"
REPORT_SINCE = (2022, 2)
SCHEDULE_SINCE = (2023, 1)
ONE_TIME_USE_SINCE = (2025, 2)
_SERIES = re.compile(r"^(20[0-9]{2})\.([12])(?:[.-].*)?$")

RESOURCE_CLASS_PREFIX = "CUSTOM_GPU_"
MAX_NAME = 255  # Placement's limit on resource class and trait names
_NOT_NAME = re.compile(r"[^A-Z0-9]+")
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def series(release):
    """The (year, n) series of a kolla ``openstack_release`` value; ValueError naming what is accepted."""
    if not isinstance(release, str):
        raise ValueError(f"openstack_release must be a string such as '2026.1', got {type(release).__name__}")
    value = release.strip().lower()
    if value == "master":
        return NEWEST
    if value in CODE_NAMES:
        return CODE_NAMES[value]
    match = _SERIES.match(value)
    if not match:
        raise ValueError(f"openstack_release {release!r} is not a release this project knows: use kolla-ansible's "
                         "form '<year>.<1|2>' (e.g. '2026.1'), a code name from victoria on, or 'master'")
    return int(match.group(1)), int(match.group(2))


def features(release):
    """What Nova of ``release`` can do with PCI devices in Placement: report, schedule, one_time_use (booleans)."""
    got = series(release)
    return dict(report=got >= REPORT_SINCE, schedule=got >= SCHEDULE_SINCE, one_time_use=got >= ONE_TIME_USE_SINCE)


def custom_name(prefix, text):
    """``prefix`` + ``text`` in Placement's custom-name form (upper case; runs of other characters than A-Z and
    0-9 become one ``_``; no ``_`` at either end of ``text``'s part)."""
    part = _NOT_NAME.sub("_", str(text).upper()).strip("_")
    return prefix + part


def resource_class(alias_name):
    """The resource class of the GPU model whose alias is ``alias_name``; ValueError when none fits Placement."""
    name = custom_name(RESOURCE_CLASS_PREFIX, alias_name)
    if name == RESOURCE_CLASS_PREFIX:
        raise ValueError(f"alias {alias_name!r} has no letter or digit to name a resource class with")
    if len(name) > MAX_NAME:
        raise ValueError(f"alias {alias_name!r} gives a resource class of {len(name)} characters, Placement allows "
                         f"{MAX_NAME}: give the model a shorter name in the passthrough policy's alias_names")
    return name


def device_traits(device):
    """The traits of one planned device: its model by PCI id and, where the plan knows it, its NUMA node."""
    traits = [custom_name("CUSTOM_GPU_", f"{device['vendor_id']}_{device['product_id']}")]
    numa = device.get("numa_node")
    if isinstance(numa, int) and not isinstance(numa, bool) and numa >= 0:
        traits.append(f"CUSTOM_NUMA_NODE_{numa}")
    return traits


def is_custom(name):
    """Whether ``name`` is already a custom resource class or trait name in Placement's normal form."""
    return isinstance(name, str) and len(name) <= MAX_NAME and bool(_CUSTOM.match(name))


def provider_name(hypervisor, address):
    """The name Nova gives a device's resource provider: ``<hypervisor>_<ADDRESS>``."""
    return f"{hypervisor}_{address.upper()}"


def placement_missing(specs, devices, hypervisors):
    """What Placement lacks before the scheduler may allocate there, per host: ``{host: [reason, ...]}``.

    ``specs`` is ``{host: [device_spec, ...]}`` as rendered (``address``, ``resource_class``); ``devices`` the device
    providers Placement has (os_pci_inventory: ``name``, ``host``, ``resource_class``, ``total`` (less reserved),
    ``used``, and ``inventory_total`` where known); ``hypervisors`` ``{host: hypervisor name}`` (default the host's
    own name). A host is complete when every device of its spec has a provider with the spec's resource class.
    Hosts whose spec is empty give Nova nothing and are not waited for. Pure.
    """
    by_name = {}
    for device in devices:
        by_name.setdefault(device.get("name"), []).append(device)
    missing = {}
    for host in sorted(specs):
        hypervisor = (hypervisors or {}).get(host, host)
        problems = []
        for spec in specs[host]:
            name = provider_name(hypervisor, spec["address"])
            found = by_name.get(name, [])
            classes = sorted(d.get("resource_class") for d in found)
            if not found:
                problems.append(f"{spec['address']} (no provider {name})")
            elif spec.get("resource_class") and spec["resource_class"] not in classes:
                problems.append(f"{spec['address']} (provider {name} has {', '.join(classes)}, the rendered "
                                f"device_spec says {spec['resource_class']})")
        if problems:
            missing[host] = problems
    return missing
