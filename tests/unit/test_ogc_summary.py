"""The end-of-run summary filter and the ogc_changes callback."""

from __future__ import annotations

import types

import pytest

from ogc_testlib import load_source, collection_plugin

summary = collection_plugin("filter", "ogc_summary")
changes = load_source("ogc_changes", "callback_plugins/ogc_changes.py")


def plan(host, selected=(), reboot=False, pending=(), notes=()):
    return {"host": host, "selected": [{"address": a, "alias": alias, "device_type": t} for a, alias, t in selected],
            "reboot_required": reboot, "pending": list(pending), "notes": list(notes)}


def test_gpu_offer_counts_per_alias_and_host():
    plans = {"b": plan("b", [("0000:01:00.0", "t4", "type-PCI"), ("0000:02:00.0", "a100", "type-PF")]),
             "a": plan("a", [("0000:03:00.0", "t4", "type-PCI")]), "c": None}
    assert summary.gpu_offer(plans) == [
        {"alias": "a100", "device_type": "type-PF", "count": 1, "hosts": {"b": 1}},
        {"alias": "t4", "device_type": "type-PCI", "count": 2, "hosts": {"a": 1, "b": 1}},
    ]


def test_gpu_offer_rejects_a_list():
    with pytest.raises(summary.AnsibleFilterError, match="expected a mapping of host to plan, got list"):
        summary.gpu_offer([])


def test_summary_text():
    plans = {"seed": plan("seed", [("0000:27:00.0", "tesla-v100", "type-PCI")] * 4),
             "intel": plan("intel", reboot=True, pending=["IOMMU not active", "a", "b", "c"],
                           notes=["The IOMMU is not active (no groups). More words."]),
             "later": None}
    text = summary.ogc_summary(plans, {"plans": "/x/plans", "empty": ""}, ["deploy skipped: no container engine"])
    assert text.splitlines() == [
        "GPU hosts: 3 (intel, later, seed)",
        "GPUs offered to Nova:",
        "  tesla-v100 (type-PCI): 4 (4 on seed)",
        "  intel: nothing offered: The IOMMU is not active (no groups)",
        "  intel: reboot pending (4 item(s): IOMMU not active; a; b ...)",
        "Not planned in this run: later",
        "Files:",
        "  plans  /x/plans",
        "deploy skipped: no container engine",
    ]
    assert summary.ogc_summary({}).splitlines()[:2] == ["GPU hosts: 0 (none)", "GPUs offered to Nova: none yet"]


class FakeDisplay:
    def __init__(self):
        self.lines = []

    def display(self, text, **_):
        self.lines.append(text)


def fake_result(host, name, changed, delegated=None):
    res = {"changed": changed}
    if delegated:
        res["_ansible_delegated_vars"] = {"ansible_host": delegated}
    return types.SimpleNamespace(_result=res, _host=types.SimpleNamespace(get_name=lambda: host),
                                 _task=types.SimpleNamespace(get_name=lambda: name, action="copy"))


def test_callback_lists_changed_tasks_per_host(monkeypatch):
    monkeypatch.setattr(changes.context, "CLIARGS", {"check": False})
    cb = changes.CallbackModule()
    cb._display = FakeDisplay()
    cb.v2_playbook_on_start(None)
    cb.v2_runner_on_ok(fake_result("h2", "Write grub", True))
    cb.v2_runner_on_ok(fake_result("h1", "Write plan", True, delegated="localhost"))
    cb.v2_runner_on_ok(fake_result("h1", "Read facts", False))
    cb.v2_runner_on_ok(fake_result("h2", "Write grub", True))
    cb.v2_playbook_on_stats(None)
    assert cb._display.lines[-1].splitlines() == [
        "", "WHAT CHANGED (changed, per host):", "  h1:", "    - Write plan (on localhost)", "  h2:", "    - Write grub"]


def test_callback_says_nothing_changed_and_would_in_check_mode(monkeypatch):
    monkeypatch.setattr(changes.context, "CLIARGS", {"check": True})
    cb = changes.CallbackModule()
    cb._display = FakeDisplay()
    cb.v2_playbook_on_start(None)
    cb.v2_playbook_on_stats(None)
    assert cb._display.lines[-1] == "\nWHAT CHANGED: nothing would change on any host."


def test_callback_adds_nothing_after_json_output(monkeypatch):
    monkeypatch.setattr(changes.context, "CLIARGS", {"check": False})
    monkeypatch.setattr(changes.C, "DEFAULT_STDOUT_CALLBACK", "ansible.posix.json")
    cb = changes.CallbackModule()
    cb._display = FakeDisplay()
    cb.v2_runner_on_ok(fake_result("h1", "Write plan", True))
    cb.v2_playbook_on_stats(None)
    assert cb._display.lines == []
