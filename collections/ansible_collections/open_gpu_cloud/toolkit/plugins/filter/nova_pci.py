"""Filters that turn passthrough plans into Nova's PCI configuration (kolla-ansible overrides).

Every filter is a pure function of its arguments: the role ``nova_pci_config`` reads the plans and
the operator's override files, these functions decide what to write and what is wrong.

Input contract (docs/design.md section 2): ``plans`` is ``{host: plan}`` where each plan has
``selected`` (devices Nova gets: ``address``, ``vendor_id``, ``product_id``, ``device_type``,
``alias``) and ``aliases`` (``name``, ``vendor_id``, ``product_id``, ``device_type``).

Output shapes:

- ``nova_pci_aliases``: ``[{"name", "vendor_id", "product_id", "device_type"}]``, one per model
  across the inventory, sorted by name: each is written as one ``[pci] alias = <json>`` line.
- ``nova_pci_device_spec``: ``[{"address", "vendor_id", "product_id"}]`` for one host: each is one
  ``[pci] device_spec = <json>`` line in ``nova/<host>/nova.conf``.
- ``nova_pci_enabled_filters``: Nova's default ``enabled_filters`` plus ``PciPassthroughFilter``.
- ``nova_pci_override_check``: conflicts between the operator's own override files and ours.
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova import placement as pci_placement
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.alias import alias_name_error
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.nova.override_ini import parse_override

# Nova 2026.1 (nova 33.x) default of [filter_scheduler] enabled_filters, read from
# nova.conf.scheduler.filter_scheduler_opts; tests/unit/nova/test_nova_pci.py compares it with Nova's
# own value whenever the OpenStack venv is available.
NOVA_DEFAULT_ENABLED_FILTERS = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
)
NOVA_AVAILABLE_FILTERS = ("nova.scheduler.filters.all_filters",)
PCI_FILTER = "PciPassthroughFilter"

# Device types an alias may ask for (nova.pci.request._ALIAS_SCHEMA).
DEVICE_TYPES = ("type-PCI", "type-PF", "type-VF")
# An alias's numa_policy (nova.objects.fields.PCINUMAAffinityPolicy.ALL).
NUMA_POLICIES = ("legacy", "preferred", "required", "socket")


# Files under node_custom_config that kolla-ansible merges into each Nova service's nova.conf,
# in kolla's order (roles/nova/tasks/config.yml, roles/nova-cell/tasks/config.yml). {host} is
# the kolla inventory host, {service} the container (nova-api, nova-scheduler, nova-compute).
_CHAIN = ("global.conf", "nova.conf", "nova/{service}.conf", "nova/{host}/nova.conf",
          "nova/{host}/{service}.conf")

GLOBAL_FILE = "nova.conf"


def _fail(msg):
    raise AnsibleFilterError(msg)


def _check_plans(plans):
    if not isinstance(plans, dict):
        _fail(f"nova_pci: plans must be a mapping {{host: plan}}, got {type(plans).__name__}: {plans!r}")
    for host, plan in plans.items():
        if not isinstance(plan, dict):
            _fail(f"nova_pci: the plan of host {host} must be a mapping, got {type(plan).__name__}: {plan!r}")
        if plan.get("host", host) != host:
            _fail(f"nova_pci: the plan given for host {host} says it belongs to host {plan['host']}: "
                  f"re-run playbooks/plan.yml for {host}")


def _check_ids(host, what, item):
    for key in ("vendor_id", "product_id"):
        value = item.get(key)
        if not pci_address.is_id(value):
            _fail(f"nova_pci: host {host}: {what} has {key} {value!r}, expected 4 lowercase hex digits such as '10de'")


def _check_alias(host, alias):
    if not isinstance(alias, dict):
        _fail(f"nova_pci: host {host}: an alias must be a mapping, got {alias!r}")
    name = alias.get("name")
    problem = alias_name_error(name)
    if problem:
        _fail(f"nova_pci: host {host}: alias name {name!r} is not usable in a flavor extra spec: {problem}; "
              "set it with the policy's alias_names")
    _check_ids(host, f"alias {name}", alias)
    if alias.get("device_type") not in DEVICE_TYPES:
        _fail(f"nova_pci: host {host}: alias {name} has device_type {alias.get('device_type')!r}, expected one of "
              f"{', '.join(DEVICE_TYPES)}")


def nova_pci_aliases(plans, numa_policy=None, placement=False):
    """Return the inventory-wide ``[pci] alias`` list: one alias per GPU model.

    ``numa_policy`` (one of Nova's, or None for none written) goes into every alias; with ``placement`` (the
    release can schedule PCI devices in Placement) each alias also names its model's resource class
    (plugins/module_utils/nova/placement.py), which Nova's pool path ignores.

    ``plans`` is ``{host: plan}``. Aliases come from each plan's ``aliases``. Hosts are visited in
    sorted order so the result and the error messages do not depend on dict order.

    Raises AnsibleFilterError when two hosts give one alias name to different models, when two
    hosts plan one model with different device types, or when two hosts give one model different
    alias names (Nova would then offer the same GPU under two names): each message names both
    hosts, the values and the fix.
    """
    _check_plans(plans)
    by_name = {}   # name -> (host, alias)
    by_model = {}  # (vendor, product) -> (host, alias)
    for host in sorted(plans):
        aliases = plans[host].get("aliases") or []
        if not isinstance(aliases, list):
            _fail(f"nova_pci: host {host}: plan.aliases must be a list, got {aliases!r}")
        for alias in aliases:
            _check_alias(host, alias)
            name = alias["name"]
            model = (alias["vendor_id"], alias["product_id"])
            if name in by_name:
                other_host, other = by_name[name]
                if (other["vendor_id"], other["product_id"]) != model:
                    _fail(f"nova_pci: alias name {name} means {other['vendor_id']}:{other['product_id']} on host "
                          f"{other_host} but {model[0]}:{model[1]} on host {host}: one alias must name one GPU model; "
                          "give one of them another name in the passthrough policy's alias_names")
            if model in by_model:
                other_host, other = by_model[model]
                if other["device_type"] != alias["device_type"]:
                    _fail(f"nova_pci: model {model[0]}:{model[1]} is {other['device_type']} on host {other_host} but "
                          f"{alias['device_type']} on host {host}: Nova's alias {name} can ask for one device type "
                          "only; make the hosts agree (SR-IOV on or off for this model everywhere, then re-run "
                          "playbooks/plan.yml), or leave one of them out of the GPU hosts group")
                if other["name"] != name:
                    _fail(f"nova_pci: model {model[0]}:{model[1]} is called {other['name']} on host {other_host} but "
                          f"{name} on host {host}: one model gets one alias across the cloud; set the same name for "
                          f"{model[0]}:{model[1]} in the passthrough policy's alias_names for every host")
                continue
            by_name[name] = (host, alias)
            by_model[model] = (host, alias)
    result = []
    classes = {}  # resource class -> alias name
    for name, (host, a) in sorted(by_name.items()):
        alias = {"name": a["name"], "vendor_id": a["vendor_id"], "product_id": a["product_id"],
                 "device_type": a["device_type"]}
        if numa_policy is not None:
            if numa_policy not in NUMA_POLICIES:
                _fail(f"nova_pci: numa_policy {numa_policy!r} is not one of Nova's: {', '.join(NUMA_POLICIES)}; "
                      "fix nova_pci_config_numa_policy")
            alias["numa_policy"] = numa_policy
        if placement:
            alias["resource_class"] = _resource_class(host, name)
            if alias["resource_class"] in classes:
                _fail(f"nova_pci: aliases {classes[alias['resource_class']]} and {name} both give the resource class "
                      f"{alias['resource_class']} (pci_placement.resource_class: the name upper-cased, other "
                      "characters than letters and digits as '_'): rename one in the passthrough policy's alias_names")
            classes[alias["resource_class"]] = name
        result.append(alias)
    return result


def _resource_class(host, alias_name):
    try:
        return pci_placement.resource_class(alias_name)
    except ValueError as exc:
        return _fail(f"nova_pci: host {host}: {exc}")


def nova_pci_device_spec(plan, host, placement=False, one_time_use=False):
    """Return ``[pci] device_spec`` entries for exactly the devices the plan of ``host`` selected.

    One entry per selected device, matched by its full PCI address and its vendor/product ids:
    ``{"address": "0000:27:00.0", "vendor_id": "10de", "product_id": "1db4"}``, sorted by address.
    A plan that selected nothing gives ``[]``. With ``placement`` (the release reports PCI devices to Placement)
    each entry also carries its model's ``resource_class`` and its ``traits`` (plugins/module_utils/nova/placement.py), and
    with ``one_time_use`` ``"one_time_use": "true"`` (a device a server freed stays reserved until returned).
    """
    _check_plans({host: plan})
    selected = plan.get("selected") or []
    if not isinstance(selected, list):
        _fail(f"nova_pci: host {host}: plan.selected must be a list, got {selected!r}")
    specs = []
    seen = set()
    for dev in selected:
        if not isinstance(dev, dict):
            _fail(f"nova_pci: host {host}: a selected device must be a mapping, got {dev!r}")
        address = dev.get("address")
        if not pci_address.is_address(address):
            _fail(f"nova_pci: host {host}: selected device address {address!r} is not a full PCI address "
                  "such as '0000:27:00.0' (domain:bus:slot.function, lowercase hex)")
        if address in seen:
            _fail(f"nova_pci: host {host}: device {address} is selected twice in the plan")
        seen.add(address)
        _check_ids(host, f"device {address}", dev)
        spec = {"address": address, "vendor_id": dev["vendor_id"], "product_id": dev["product_id"]}
        if placement:
            # Nova reads a device_spec's tags as strings: traits comma-separated, one_time_use "true".
            spec["resource_class"] = _resource_class(host, dev.get("alias"))
            spec["traits"] = ",".join(pci_placement.device_traits(dev))
            if one_time_use:
                spec["one_time_use"] = "true"
        specs.append(spec)
    return sorted(specs, key=lambda s: s["address"])


def nova_pci_enabled_filters(extra=None):
    """Return Nova 2026.1's default ``enabled_filters`` plus ``PciPassthroughFilter``.

    ``extra`` is an optional list of further filter class names appended in order (duplicates
    dropped), e.g. ``["NUMATopologyFilter"]``.
    """
    if extra is None:
        extra = []
    if not isinstance(extra, list) or not all(isinstance(f, str) and f for f in extra):
        _fail(f"nova_pci: extra scheduler filters must be a list of filter class names, got {extra!r}")
    result = []
    for name in NOVA_DEFAULT_ENABLED_FILTERS + (PCI_FILTER,) + tuple(extra):
        if name not in result:
            result.append(name)
    return result


def nova_pci_available_filters(_unused=None):
    """Return the ``[filter_scheduler] available_filters`` value: all of Nova's filters."""
    return list(NOVA_AVAILABLE_FILTERS)


def _files_for(host, service):
    return [f.format(host=host, service=service) for f in _CHAIN]


def nova_pci_override_check(files, hosts, aliases, begin, end, controllers=None):
    """Find conflicts between the operator's override files and the settings we manage.

    ``files`` is ``{relative path under node_custom_config: text}`` for the Nova files that exist
    (``global.conf``, ``nova.conf``, ``nova/*.conf``, ``nova/*/*.conf``); ``hosts`` the GPU hosts
    whose ``device_spec`` we manage; ``aliases`` the alias list we write; ``begin``/``end`` the
    marker lines around our block (everything outside them is the operator's); ``controllers``
    the hosts running nova-api/nova-scheduler (their host files count for the scheduler).

    Returns ``{"conflicts": [messages], "operator_filters": {path: [filters]},
    "report_in_placement": bool, "pci_in_placement": bool}``: ``operator_filters`` lists operator-set
    ``enabled_filters`` that already contain PciPassthroughFilter (we then leave ``enabled_filters`` to them);
    ``report_in_placement`` and ``pci_in_placement`` are what our block in the global ``nova.conf`` currently says.
    Each conflict names the file, the key and the fix.
    """
    if not isinstance(files, dict):
        _fail(f"nova_pci: files must be a mapping {{path: text}}, got {files!r}")
    if not isinstance(hosts, list):
        _fail(f"nova_pci: hosts must be a list of host names, got {hosts!r}")
    controllers = controllers or []
    our_names = {a["name"] for a in aliases}
    parsed = {}
    for path, text in files.items():
        if not isinstance(text, str):
            _fail(f"nova_pci: content of {path} must be text, got {text!r}")
        parsed[path] = parse_override(text, begin, end)

    conflicts = []
    operator_filters = {}

    def settings(path, section, key):
        return [s for s in parsed.get(path, ([], []))[0] if s[0] == section and s[1] == key]

    # 1. device_spec (or its deprecated name) in any file nova-compute of a managed host reads.
    for host in sorted(hosts):
        for path in _files_for(host, "nova-compute"):
            for key in ("device_spec", "passthrough_whitelist"):
                for _section, _key, _value, line in settings(path, "pci", key):
                    conflicts.append(
                        f"{path} line {line} sets [pci] {key}, which nova-compute on {host} reads: open-gpu-cloud "
                        "manages that host's device_spec from its passthrough plan. Remove the key "
                        "and steer devices with the passthrough policy (exclude / keep_on_host), "
                        f"or take {host} out of the GPU hosts group.")

    # 2. enabled_filters anywhere the scheduler reads it: it must keep PciPassthroughFilter.
    scheduler_files = ["global.conf", "nova.conf", "nova/nova-scheduler.conf"]
    for host in sorted(controllers):
        scheduler_files += [f"nova/{host}/nova.conf", f"nova/{host}/nova-scheduler.conf"]
    for path in scheduler_files:
        for _section, _key, value, line in settings(path, "filter_scheduler", "enabled_filters"):
            names = [v.strip() for v in value.split(",") if v.strip()]
            if PCI_FILTER in names:
                operator_filters[path] = names
            else:
                conflicts.append(
                    f"{path} line {line} sets [filter_scheduler] enabled_filters = {value} without {PCI_FILTER}: Nova "
                    f"would never place GPU flavors. Add {PCI_FILTER} to that list, or remove the key so "
                    f"open-gpu-cloud writes Nova's defaults plus {PCI_FILTER}.")

    # 3. alias: operator aliases add to ours only inside the same file (nova.conf); anywhere else
    #    a later file would replace ours (or ours theirs).
    for path in sorted(parsed):
        for _section, _key, value, line in settings(path, "pci", "alias"):
            if path != GLOBAL_FILE:
                conflicts.append(
                    f"{path} line {line} sets [pci] alias: kolla-ansible lets a later override file replace "
                    "the whole alias list, so this one and the GPU aliases open-gpu-cloud writes "
                    f"into {GLOBAL_FILE} would hide each other. Move it into {GLOBAL_FILE}, outside the managed block.")
                continue
            name = None
            try:
                name = json.loads(value).get("name")
            except (ValueError, AttributeError):
                name = None
            if name in our_names:
                conflicts.append(
                    f"{path} line {line} defines [pci] alias {name}, which open-gpu-cloud also defines from "
                    "the passthrough plans. Remove your line, or rename the GPU alias with the "
                    "passthrough policy's alias_names.")

    # 4. The Placement switches are ours (nova_pci_config_placement), in the order Nova needs: set elsewhere, they
    #    would turn the scheduler side on before the computes report, or hide what our block says.
    for path in sorted(parsed):
        for section, key in (("pci", "report_in_placement"), ("filter_scheduler", "pci_in_placement")):
            for _section, _key, value, line in settings(path, section, key):
                conflicts.append(
                    f"{path} line {line} sets [{section}] {key} = {value}: open-gpu-cloud switches Nova's PCI "
                    "tracking in Placement itself (nova_pci_config_placement), the computes first and the scheduler "
                    "once Placement has every GPU host's devices. Remove the line and set nova_pci_config_placement "
                    "(true to use Placement).")

    ours = {}
    for section, key, value, _line in parsed.get(GLOBAL_FILE, ([], []))[1]:
        if (section, key) in (("pci", "report_in_placement"), ("filter_scheduler", "pci_in_placement")):
            ours[key] = value.lower() in ("true", "1", "yes", "on")
    return {"conflicts": conflicts, "operator_filters": operator_filters,
            "report_in_placement": ours.get("report_in_placement", False),
            "pci_in_placement": ours.get("pci_in_placement", False)}


def nova_pci_release_features(release):
    """What the deployed release's Nova can do with PCI devices in Placement: ``{report, schedule, one_time_use,
    error}`` (plugins/module_utils/nova/placement.py); an unknown release gives all false and ``error`` saying why."""
    try:
        return dict(pci_placement.features(release), error="")
    except ValueError as exc:
        return dict(report=False, schedule=False, one_time_use=False, error=str(exc))


def nova_pci_fleet_specs(plans, placement=False, one_time_use=False):
    """``{host: device_spec list}`` for every plan of ``plans`` (``{host: plan}``), as nova_pci_device_spec."""
    _check_plans(plans)
    return {host: nova_pci_device_spec(plans[host], host, placement, one_time_use) for host in sorted(plans)}


def nova_pci_placement_missing(specs, devices, hypervisors=None):
    """``{host: [device, ...]}``: the rendered devices Placement does not have yet with their resource class
    (plugins/module_utils/nova/placement.py placement_missing); empty when the scheduler may allocate in Placement."""
    if not isinstance(specs, dict) or not isinstance(devices, list):
        _fail("nova_pci: nova_pci_placement_missing needs {host: device specs} and os_pci_inventory's devices list")
    return pci_placement.placement_missing(specs, devices, hypervisors or {})


def nova_pci_hypervisor_names(hosts, hostvars, overrides=None):
    """``{host: hypervisor name in Nova}``: ``overrides[host]``, else the host's ``nova_hypervisor_hostname``, else
    its ``health_nova_host``, else the host's own name (a host this inventory does not hold too)."""
    overrides = overrides or {}
    names = {}
    for host in hosts:
        name = overrides.get(host)
        if not name and host in hostvars:
            own = hostvars[host]
            name = own.get("nova_hypervisor_hostname") or own.get("health_nova_host")
        if name is not None and not isinstance(name, str):
            _fail(f"nova_pci: host {host}: its hypervisor name must be a string, got {type(name).__name__}; fix "
                  "nova_hypervisor_hostname (or nova_pci_config_hypervisor_names)")
        names[host] = name or host
    return names


class FilterModule:
    """Nova PCI configuration filters."""

    def filters(self):
        return {
            "nova_pci_aliases": nova_pci_aliases,
            "nova_pci_device_spec": nova_pci_device_spec,
            "nova_pci_enabled_filters": nova_pci_enabled_filters,
            "nova_pci_available_filters": nova_pci_available_filters,
            "nova_pci_override_check": nova_pci_override_check,
            "nova_pci_release_features": nova_pci_release_features,
            "nova_pci_fleet_specs": nova_pci_fleet_specs,
            "nova_pci_placement_missing": nova_pci_placement_missing,
            "nova_pci_hypervisor_names": nova_pci_hypervisor_names,
        }
