# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Each GPU flavor's address-space budget: the guest physical address bits its RAM and its GPUs' memory windows
need, what Nova must be told for them, and the flavors no setting can serve.

A guest maps its RAM, then every passed-through GPU's 64-bit windows above it, within the address bits its vCPU
reports. QEMU gives an x86 guest 40 unless told otherwise, and the firmware has its own rule for where the windows
go (``pci/bars.py``: SeaBIOS for ``hw_firmware_type`` bios, Nova's default, OVMF for uefi). A guest whose windows
do not fit boots with a GPU unmapped, and its driver fails: the more RAM, the fewer GPUs it sees.

For each GPU flavor (``pci_passthrough:alias`` of N GPUs) and each host whose plan offers them, the budget takes the
flavor's RAM and the windows of the N GPUs of that alias with the largest windows on that host; the neediest host
counts. Nova's remedy is ``hw_maxphysaddr_mode=emulate`` with ``hw_maxphysaddr_bits`` (Nova 29.0.0, 2024.1 and
later, with libvirt 8.7.0 or later; the scheduler then keeps the guest off hosts whose CPUs have fewer bits). The
project sets the image properties, never the flavor extra specs: Nova's API refuses ``hw:maxphysaddr_*`` from
microversion 2.86 on (it has no validator for them) in every release that has them. An image serves every flavor,
so each image gets the most bits any GPU flavor needs under its firmware; more bits than a guest needs cost it
nothing.

Refused, before anything is written, with the arithmetic: a flavor that needs more than the defaults on a release
without the properties (before 2024.1), one that no width up to the firmware's widest (46 bits) can serve, and one
that needs more bits than the CPUs of every host serving it have (when the plans' facts know them).

Pure functions; the filters ``cloud_flavor_address_errors`` and ``cloud_image_address_space``
(plugins/filter/cloud_flavors.py) are their adapters.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import alias as pci_alias
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import bars

__all__ = ["FIRMWARES", "FIRST_RELEASE", "budgets", "image_properties", "flavor_problems", "image_firmware",
           "declared_problems", "images_with_properties"]

FIRMWARES = ("bios", "uefi")
FIRMWARE_WORDS = {"bios": "SeaBIOS (hw_firmware_type bios, Nova's default)", "uefi": "OVMF (hw_firmware_type uefi)"}
# The release whose Nova reads hw_maxphysaddr_mode/_bits (Nova 29.0.0).
FIRST_RELEASE = "2024.1"
MIB = 1 << 20


def image_firmware(properties):
    """The firmware an image's guests boot: ``uefi`` when its ``hw_firmware_type`` says so, else ``bios``."""
    value = (properties or {}).get("hw_firmware_type") if isinstance(properties, Mapping) else None
    return "uefi" if str(value or "").strip().lower() == "uefi" else "bios"


def _host_devices(data):
    """``{alias: [(device window, address)]}`` of a host's planned GPUs, and whether its CPU is AMD's and its CPU's
    physical address bits (None when the facts do not say)."""
    plan = (data or {}).get("plan") or {}
    facts = (data or {}).get("facts") or {}
    devices = {d.get("address"): d for d in facts.get("devices") or [] if isinstance(d, Mapping)}
    out = {}
    for selected in plan.get("selected") or []:
        device = devices.get(selected.get("address")) or {}
        windows = bars.high_windows(device["bars"]) if device.get("bars") else []
        out.setdefault(selected.get("alias"), []).append((bars.device_window(windows), selected.get("address")))
    amd = "amd" in str(facts.get("cpu_vendor") or plan.get("cpu_vendor") or "").lower()
    cpu_bits = facts.get("cpu_phys_bits")
    return out, amd, cpu_bits if isinstance(cpu_bits, int) and not isinstance(cpu_bits, bool) else None


def budgets(flavors, plans):
    """One budget for each declared GPU flavor a host's plan can serve: ``{index, name, ram, request, hosts: [{host,
    aperture, amd, cpu_bits, need: {firmware: (bits, fits)}}], need: {firmware: (bits, fits)}}``, ``need`` being
    the neediest host's (bits None: the defaults do). Flavors without GPUs, of another shape, or asking for an alias
    no host offers enough of are left out (the alias check names the latter)."""
    hosts = {host: _host_devices(data) for host, data in sorted((plans or {}).items()) if isinstance(data, Mapping)}
    out = []
    for index, flavor in enumerate(flavors if isinstance(flavors, (list, tuple)) else []):
        request = pci_alias.flavor_request(flavor)
        ram = flavor.get("ram") if request else None
        if isinstance(ram, bool) or not isinstance(ram, int) or ram <= 0:
            continue  # no GPUs, or a RAM the module's argument spec refuses
        serving = []
        for host, (devices, amd, cpu_bits) in hosts.items():
            if any(len(devices.get(alias, [])) < count for alias, count in request):
                continue
            aperture = sum(sum(sorted((w for w, _a in devices[alias]), reverse=True)[:count]) for alias, count in request)
            need = {fw: bars.phys_bits_for(fw, ram * MIB, aperture, amd) for fw in FIRMWARES}
            serving.append({"host": host, "aperture": aperture, "amd": amd, "cpu_bits": cpu_bits, "need": need})
        if not serving:
            continue
        need = {fw: max((s["need"][fw] for s in serving), key=_need_order) for fw in FIRMWARES}
        out.append({"index": index, "name": flavor.get("name") or "no name", "ram": ram, "request": request,
                    "hosts": serving, "need": need})
    return out


def _need_order(need):
    bits, fits = need
    return (not fits, bits or 0)


def image_properties(flavor_budgets, firmware):
    """Nova's image properties for the guests of an image booting FIRMWARE: ``{"hw_maxphysaddr_mode": "emulate",
    "hw_maxphysaddr_bits": n}`` with the most bits a GPU flavor needs under it, or ``{}`` when the defaults do for
    every one (a flavor no width can serve is refused by ``flavor_problems``, not counted here)."""
    needs = [b["need"][firmware][0] for b in flavor_budgets if b["need"][firmware][1] and b["need"][firmware][0]]
    return {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": max(needs)} if needs else {}


def _release_key(release):
    text = str(release or "").strip().lower()
    year, _dot, half = text.partition(".")
    if year.isdigit() and half.isdigit():
        return int(year), int(half)
    return None  # a named release before 2023.1 (zed, yoga, ...)


def _arithmetic(budget, firmware):
    host = max(budget["hosts"], key=lambda s: _need_order(s["need"][firmware]))
    request = " and ".join(f"{count} x {alias}" for alias, count in budget["request"])
    return (f"{budget['ram']} MiB of RAM and {request}, whose 64-bit windows take {bars.size_text(host['aperture'])} "
            f"on {host['host']} (each GPU behind a root port of its own, its windows aligned to the largest)")


def flavor_problems(flavor_budgets, release, firmwares=FIRMWARES):
    """One message for each flavor that no setting lets its guests map, under the FIRMWARES the project's images
    boot, on RELEASE (``nova_pci_config_openstack_release``); empty when every one fits."""
    problems = []
    key = _release_key(release)
    has_properties = key is not None and key >= _release_key(FIRST_RELEASE)
    for budget in flavor_budgets:
        label = f"flavors[{budget['index']}] ({budget['name']})"
        for firmware in firmwares:
            bits, fits = budget["need"][firmware]
            if fits and not bits:
                continue
            what = f"{label}: {_arithmetic(budget, firmware)}, need"
            under = f"under {FIRMWARE_WORDS[firmware]}"
            if not fits:
                problems.append(
                    f"{what} more than the {bars.FIRMWARE_MAX_PHYS_BITS} guest physical address bits the firmware uses "
                    f"at most {under}: its guests could not map their GPUs. Give the flavor less RAM or fewer GPUs")
            elif not has_properties:
                problems.append(
                    f"{what} {bits} guest physical address bits {under}, more than QEMU's default 40, and Nova "
                    f"{release} cannot be told so: hw_maxphysaddr_mode and hw_maxphysaddr_bits arrive in "
                    f"{FIRST_RELEASE}. Give the flavor less RAM or fewer GPUs, or move to {FIRST_RELEASE} or later "
                    "(nova_pci_config_openstack_release)")
            else:
                short = [s for s in budget["hosts"] if s["cpu_bits"] is not None and s["cpu_bits"] < bits]
                if short and len(short) == len(budget["hosts"]):
                    problems.append(
                        f"{what} {bits} guest physical address bits {under}, more than the CPUs of every host serving "
                        "it have (" + ", ".join(f"{s['host']} {s['cpu_bits']}" for s in short)
                        + "): Nova would never schedule it. Give the flavor less RAM or fewer GPUs")
    return problems


def declared_problems(flavors, plans, release, images=None):
    """``flavor_problems`` of the declared flavors over the plans, under SeaBIOS (Nova's default) and the firmware of
    each declared image (``cloud_images``)."""
    firmwares = {"bios"} | {image_firmware(image.get("properties")) for image in images or []
                            if isinstance(image, Mapping)}
    return flavor_problems(budgets(flavors, plans), release, [fw for fw in FIRMWARES if fw in firmwares])


def images_with_properties(images, flavors, plans):
    """The declared images, each with the address-space properties its firmware's guests need for the declared GPU
    flavors (``image_properties``) beneath its own (an image's own properties win)."""
    flavor_budgets = budgets(flavors, plans)
    out = []
    for image in images or []:
        needed = image_properties(flavor_budgets, image_firmware(image.get("properties"))) \
            if isinstance(image, Mapping) else {}
        if needed:
            own = image.get("properties") if isinstance(image.get("properties"), Mapping) else {}
            image = dict(image, properties={**needed, **own})
        out.append(image)
    return out
