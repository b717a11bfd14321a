# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""GPU health as Prometheus metrics, in the text format node_exporter's textfile collector reads.

``report | open_gpu_cloud.toolkit.gpu_health_metrics(timestamp, nova=None)`` -> the text of ``ogc_gpu.prom``:

* ``ogc_gpu_expected{alias,model,pci_id}``: GPUs of the model the passthrough plan gives Nova here;
* ``ogc_gpu_present{...}``: of those, how many are on the PCI bus now;
* ``ogc_gpu_vfio{...}``: of those, how many are bound to vfio-pci;
* ``ogc_gpu_nova_offered{...}`` / ``ogc_gpu_nova_used{...}``: Nova's view (placement inventory and usage
  of the model's resource class ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``), only when Nova was asked;
* ``ogc_gpu_nova_reserved``, ``ogc_gpu_nova_waiting_return``, ``ogc_gpu_nova_orphan_allocations``: Nova's
  devices of this host reserved by an operator, one-time-use devices waiting to be returned, and allocations
  held by a consumer that is neither a server nor a migration in progress (gpu_health_nova's counts), only when
  Nova was asked;
* ``ogc_gpu_fenced{address,cause}``: 1 for each GPU of this host fenced in Placement (reserved so Nova places no new
  server on it; the reason is in the fence record, docs/ops.md "Fencing a failed GPU"), only when Nova was asked;
* ``ogc_gpu_fence_deferred{address}``: 1 for each failed GPU of this host not fenced because a server holds it (it is
  fenced once the server is gone), only when Nova was asked;
* ``ogc_gpu_health_ok``: 1 when the health check raised no alert, else 0;
* ``ogc_gpu_health_alerts``: how many alerts it raised;
* ``ogc_gpu_health_last_run_timestamp_seconds``: when it ran (Unix time).

All are gauges (none is a running count, so none ends in ``_total``); node_exporter adds the
``instance`` label, so no host label is written. Pure function; bad input raises
AnsibleFilterError naming the host and the fix.
"""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

PER_MODEL = (
    ("ogc_gpu_expected", "GPUs of this model the passthrough plan gives Nova on this host."),
    ("ogc_gpu_present", "GPUs of this model for Nova that are on the PCI bus now."),
    ("ogc_gpu_vfio", "GPUs of this model for Nova that are bound to vfio-pci now."),
)
NOVA = (
    ("ogc_gpu_nova_offered", "GPUs of this model Nova offers on this host (placement inventory total less reserved)."),
    ("ogc_gpu_nova_used", "GPUs of this model Nova has given to servers on this host (placement usage)."),
)
NOVA_DEVICES = (
    ("reserved", "ogc_gpu_nova_reserved",
     "Passthrough devices of this host reserved in placement by an operator (not one-time use): Nova gives them to no "
     "server."),
    ("waiting_return", "ogc_gpu_nova_waiting_return",
     "One-time-use passthrough devices of this host used and waiting for an operator to return them (reserved in "
     "placement, no allocation)."),
    ("orphan_allocations", "ogc_gpu_nova_orphan_allocations",
     "Allocations of this host's passthrough devices held by a consumer that is neither a server nor a migration in "
     "progress."),
)


def _fail(host, message):
    raise AnsibleFilterError(f"gpu_health_metrics ({host or '?'}): {message}")


def _label(value) -> str:
    """A label value escaped as the text format wants (backslash, double quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def resource_class(pci_id: str) -> str:
    """Nova's placement resource class of a PCI model: ``10de:1db4`` -> ``CUSTOM_PCI_10DE_1DB4``."""
    vendor, product = pci_id.split(":")
    return f"CUSTOM_PCI_{vendor.upper()}_{product.upper()}"


def gpu_health_metrics(report, timestamp, nova=None):
    """The textfile-collector text for one host's gpu_health report (see the module docstring).

    :param report: the host's ``gpu_health_report`` (filter gpu_health).
    :param timestamp: when the check ran, Unix seconds (int or float).
    :param nova: Nova's view of the host (``report.nova`` from gpu_health_nova: ``{classes: {rc: {total,
        used}}, reserved, waiting_return, orphan_allocations}``; a count it lacks is 0), or None when Nova was not
        asked.
    """
    host = report.get("host") if isinstance(report, dict) else None
    if not isinstance(report, dict) or not isinstance(report.get("gpus"), list) or \
            not isinstance(report.get("alerts"), list):
        _fail(host, "expected a gpu_health report (a dict with 'gpus' and 'alerts'); run the gpu_health role's "
                    "check first (playbooks/health.yml)")
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or timestamp < 0:
        _fail(host, f"timestamp must be Unix seconds (a number >= 0), got {timestamp!r}")
    if nova is not None and not (isinstance(nova, dict) and isinstance(nova.get("classes", {}), dict)):
        _fail(host, f"nova must be Nova's view of the host ({{classes: {{resource class: {{total, used}}}}}}) or "
                    f"null, got {nova!r}")
    for key, _name, _help in NOVA_DEVICES if nova is not None else ():
        value = nova.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            _fail(host, f"nova.{key} must be a count (a whole number >= 0) from gpu_health_nova, got {value!r}")
    fenced = (nova or {}).get("fenced", [])
    deferred = (nova or {}).get("fence_deferred", [])
    if not isinstance(fenced, list) or not all(isinstance(f, dict) and f.get("address") and f.get("cause")
                                               for f in fenced):
        _fail(host, f"nova.fenced must be [{{address, cause}}] from gpu_health_nova, got {fenced!r}")
    if not isinstance(deferred, list) or not all(isinstance(a, str) and a for a in deferred):
        _fail(host, f"nova.fence_deferred must be a list of PCI addresses from gpu_health_nova, got {deferred!r}")
    models: dict[tuple, dict] = {}
    for gpu in report["gpus"]:
        if not isinstance(gpu, dict) or "address" not in gpu:
            _fail(host, f"malformed GPU entry {gpu!r} in the report")
        if not gpu.get("for_nova"):
            continue
        pci_id = f"{gpu.get('vendor_id')}:{gpu.get('product_id')}"
        key = (gpu.get("alias") or "", gpu.get("model") or pci_id, pci_id)
        counts = models.setdefault(key, {"ogc_gpu_expected": 0, "ogc_gpu_present": 0, "ogc_gpu_vfio": 0})
        counts["ogc_gpu_expected"] += 1
        counts["ogc_gpu_present"] += 1 if gpu.get("present") else 0
        counts["ogc_gpu_vfio"] += 1 if gpu.get("present") and gpu.get("driver") == "vfio-pci" else 0
    if nova is not None:
        classes = nova.get("classes") or {}
        for key, counts in models.items():
            view = classes.get(resource_class(key[2])) or {}
            counts["ogc_gpu_nova_offered"] = view.get("total", 0)
            counts["ogc_gpu_nova_used"] = view.get("used", 0)

    lines = []
    for name, help_text in PER_MODEL + (NOVA if nova is not None else ()):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for (alias, model, pci_id), counts in sorted(models.items()):
            lines.append(f'{name}{{alias="{_label(alias)}",model="{_label(model)}",pci_id="{_label(pci_id)}"}} '
                         f"{counts[name]}")
    for key, name, help_text in NOVA_DEVICES if nova is not None else ():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {nova.get(key, 0)}"]
    if nova is not None:
        lines += ["# HELP ogc_gpu_fenced 1 for each GPU of this host fenced in Placement (Nova places no new server on "
                  "it; the reason is in the fence record).", "# TYPE ogc_gpu_fenced gauge"]
        lines += [f'ogc_gpu_fenced{{address="{_label(f["address"])}",cause="{_label(f["cause"])}"}} 1'
                  for f in sorted(fenced, key=lambda f: f["address"])]
        lines += ["# HELP ogc_gpu_fence_deferred 1 for each failed GPU of this host not fenced because a server holds "
                  "it (fenced once the server is gone).", "# TYPE ogc_gpu_fence_deferred gauge"]
        lines += [f'ogc_gpu_fence_deferred{{address="{_label(a)}"}} 1' for a in sorted(deferred)]
    alerts = len(report["alerts"])
    lines += [
        "# HELP ogc_gpu_health_ok 1 when the last GPU health check raised no alert, else 0.",
        "# TYPE ogc_gpu_health_ok gauge",
        f"ogc_gpu_health_ok {0 if alerts else 1}",
        "# HELP ogc_gpu_health_alerts Alerts the last GPU health check raised on this host.",
        "# TYPE ogc_gpu_health_alerts gauge",
        f"ogc_gpu_health_alerts {alerts}",
        "# HELP ogc_gpu_health_last_run_timestamp_seconds When the last GPU health check ran (Unix time).",
        "# TYPE ogc_gpu_health_last_run_timestamp_seconds gauge",
        f"ogc_gpu_health_last_run_timestamp_seconds {timestamp:.3f}" if isinstance(timestamp, float)
        else f"ogc_gpu_health_last_run_timestamp_seconds {timestamp}",
    ]
    return "\n".join(lines) + "\n"


class FilterModule:
    """GPU health metrics filters."""

    def filters(self):
        return {"gpu_health_metrics": gpu_health_metrics}
