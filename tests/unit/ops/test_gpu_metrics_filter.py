"""plugins/filter/gpu_metrics.py: a host's gpu_health report as node_exporter textfile metrics, read back with
prometheus_client's own parser."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ogc_testlib import load_source, collection_plugin

health = collection_plugin("filter", "gpu_health")
metrics = collection_plugin("filter", "gpu_metrics")
V100 = {"alias": "tesla-v100", "model": "Tesla V100 PCIe 16GB", "pci_id": "10de:1db4"}


def samples(text):
    """{(name, frozenset(labels)): value} of every sample prometheus_client parses from the text."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def families(text):
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_healthy_host(seed):
    _facts, bound, plan = seed
    text = metrics.gpu_health_metrics(health.gpu_health(bound, plan, host="seed-v100"), 1700000000)
    got = samples(text)
    key = frozenset(V100.items())
    assert (got[("ogc_gpu_expected", key)], got[("ogc_gpu_present", key)], got[("ogc_gpu_vfio", key)]) == (4, 4, 4)
    assert got[("ogc_gpu_health_ok", frozenset())] == 1 and got[("ogc_gpu_health_alerts", frozenset())] == 0
    assert got[("ogc_gpu_health_last_run_timestamp_seconds", frozenset())] == 1700000000
    assert set(families(text).values()) == {"gauge"}
    assert not any(name.startswith("ogc_gpu_nova") for name, _ in got)  # Nova not asked: no Nova numbers


def test_gpu_gone_and_one_not_on_vfio(seed):
    facts, bound, plan = seed
    now = copy.deepcopy(bound)
    now["devices"] = [d for d in now["devices"] if d["address"] != "0000:c3:00.0"]
    next(d for d in now["devices"] if d["address"] == "0000:27:00.0")["driver"] = "nouveau"
    report = health.gpu_health(now, plan, host="seed-v100")
    got = samples(metrics.gpu_health_metrics(report, 1700000000.5))
    key = frozenset(V100.items())
    assert (got[("ogc_gpu_expected", key)], got[("ogc_gpu_present", key)], got[("ogc_gpu_vfio", key)]) == (4, 3, 2)
    assert got[("ogc_gpu_health_ok", frozenset())] == 0
    assert got[("ogc_gpu_health_alerts", frozenset())] == len(report["alerts"]) >= 2
    assert got[("ogc_gpu_health_last_run_timestamp_seconds", frozenset())] == 1700000000.5


def test_novas_view_per_model(seed):
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    nova = {"hypervisor": "seed-v100", "classes": {"CUSTOM_PCI_10DE_1DB4": {"total": 3, "used": 1},
                                                   "CUSTOM_PCI_10DE_1EB8": {"total": 2, "used": 0}}}
    got = samples(metrics.gpu_health_metrics(report, 1, nova=nova))
    key = frozenset(V100.items())
    assert got[("ogc_gpu_nova_offered", key)] == 3 and got[("ogc_gpu_nova_used", key)] == 1
    # Nova asked but it knows nothing of the model: 0 offered.
    got = samples(metrics.gpu_health_metrics(report, 1, nova={"classes": {}}))
    assert got[("ogc_gpu_nova_offered", key)] == 0
    # A view without the device counts (an older health summary): 0 of each.
    assert got[("ogc_gpu_nova_reserved", frozenset())] == got[("ogc_gpu_nova_waiting_return", frozenset())] == \
        got[("ogc_gpu_nova_orphan_allocations", frozenset())] == 0


def test_novas_devices_reserved_waiting_and_orphaned(seed):
    """The counts of gpu_health_nova (its report.nova, as the metrics task passes it), per host: no host label."""
    _facts, bound, plan = seed
    report = health.gpu_health(bound, plan, host="seed-v100")
    nova = {"hypervisor": "gpu01", "classes": {"CUSTOM_PCI_10DE_1DB4": {"total": 1, "used": 2}}, "reserved": 1,
            "waiting_return": 2, "orphan_allocations": 3}
    text = metrics.gpu_health_metrics(report, 1, nova=nova)
    got = samples(text)
    assert (got[("ogc_gpu_nova_reserved", frozenset())], got[("ogc_gpu_nova_waiting_return", frozenset())],
            got[("ogc_gpu_nova_orphan_allocations", frozenset())]) == (1, 2, 3)
    assert families(text)["ogc_gpu_nova_orphan_allocations"] == "gauge"
    with pytest.raises(AnsibleFilterError, match=r"nova.reserved must be a count \(a whole number >= 0\) from "
                                                 r"gpu_health_nova, got -1"):
        metrics.gpu_health_metrics(report, 1, nova=dict(nova, reserved=-1))
    with pytest.raises(AnsibleFilterError, match="nova.orphan_allocations must be a count"):
        metrics.gpu_health_metrics(report, 1, nova=dict(nova, orphan_allocations=True))


def test_label_values_are_escaped():
    report = {"host": "h", "alerts": [], "gpus": [
        {"address": "0000:01:00.0", "for_nova": True, "present": True, "driver": "vfio-pci", "alias": "odd",
         "model": 'A "quoted" \\ model\nname', "vendor_id": "10de", "product_id": "24b0"}]}
    got = samples(metrics.gpu_health_metrics(report, 1))
    assert got[("ogc_gpu_expected", frozenset({"alias": "odd", "model": 'A "quoted" \\ model\nname',
                                                "pci_id": "10de:24b0"}.items()))] == 1


def test_resource_class():
    assert metrics.resource_class("10de:1db4") == "CUSTOM_PCI_10DE_1DB4"


@pytest.mark.parametrize("report, timestamp, nova, needle", [
    ("nope", 1, None, "expected a gpu_health report (a dict with 'gpus' and 'alerts')"),
    ({"host": "h", "gpus": {}, "alerts": []}, 1, None, "gpu_health_metrics (h): expected a gpu_health report"),
    ({"host": "h", "gpus": [], "alerts": []}, "now", None, "timestamp must be Unix seconds (a number >= 0), got 'now'"),
    ({"host": "h", "gpus": [], "alerts": []}, True, None, "timestamp must be Unix seconds"),
    ({"host": "h", "gpus": [], "alerts": []}, -5, None, "timestamp must be Unix seconds"),
    ({"host": "h", "gpus": [], "alerts": []}, 1, ["x"], "nova must be Nova's view of the host"),
    ({"host": "h", "gpus": ["0000:01:00.0"], "alerts": []}, 1, None, "malformed GPU entry '0000:01:00.0'"),
])
def test_bad_input_named(report, timestamp, nova, needle):
    with pytest.raises(AnsibleFilterError, match=r"^gpu_health_metrics \((h|\?)\): ") as err:
        metrics.gpu_health_metrics(report, timestamp, nova=nova)
    assert needle in str(err.value)


GPU = st.fixed_dictionaries({
    "for_nova": st.booleans(), "present": st.booleans(), "driver": st.sampled_from(["vfio-pci", "nouveau", None]),
    "alias": st.sampled_from(["t4", "a100"]), "vendor_id": st.just("10de"), "product_id": st.sampled_from(["1eb8", "20f1"]),
    "model": st.sampled_from(["Tesla T4", "A100 PCIe 40GB"])})


@settings(max_examples=100, deadline=None)
@given(st.lists(GPU, max_size=12), st.lists(st.text(max_size=5), max_size=3), st.integers(0, 2**33))
def test_property_counts_add_up_and_always_parse(gpus, alerts, timestamp):
    gpus = [dict(g, address=f"0000:{i:02x}:00.0") for i, g in enumerate(gpus)]
    got = samples(metrics.gpu_health_metrics({"host": "h", "gpus": gpus, "alerts": alerts}, timestamp))
    for name in ("ogc_gpu_expected", "ogc_gpu_present", "ogc_gpu_vfio"):
        assert sum(v for (n, _), v in got.items() if n == name) == sum(
            1 for g in gpus if g["for_nova"] and (name == "ogc_gpu_expected" or g["present"])
            and (name != "ogc_gpu_vfio" or g["driver"] == "vfio-pci"))
    for (name, labels), value in got.items():
        if name == "ogc_gpu_present":
            assert value <= got[("ogc_gpu_expected", labels)] and got[("ogc_gpu_vfio", labels)] <= value
    assert got[("ogc_gpu_health_ok", frozenset())] == (0 if alerts else 1)
