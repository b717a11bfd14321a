"""Fencing failed GPUs: the pure rules (judge_fence, judge_unfence, the record format, the health play's requests and
alerts), property tests over them, os_pci_fence's exact Placement calls and record files (SDK mocked: check mode,
idempotence, a device a server holds, an operator's reservation, generation conflicts, bad input), and the health
filter and metrics with fences. The same against the real Placement: tests/integration/ops/test_fence_gpus.py.
"""

from __future__ import annotations

import copy
import json
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import collection_module, collection_plugin

import ansible.module_utils  # noqa: F401  (tests/unit/conftest.py adds the repo's module_utils to it)
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.ops import pci_fence  # noqa: E402

RC = "CUSTOM_GPU_TESLA_V100"
ADDRESS = "0000:44:00.0"
NAME = "gpu01_0000:44:00.0"
REASON = "gpu01: GPU 0000:44:00.0 (Tesla V100) is gone from the PCI bus"
health = collection_plugin("filter", "gpu_health")
metrics = collection_plugin("filter", "gpu_metrics")


@pytest.fixture(scope="module")
def fence_module():
    return collection_module("os_pci_fence")


def view(reserved=0, total=1, consumers=(), used=0):
    return dict(inventory=dict(total=total, reserved=reserved), consumers=list(consumers), used=used)


def record(cause="gone_from_bus", reserved_by_fence=True):
    return dict(address=ADDRESS, provider="d1", name=NAME, resource_class=RC, cause=cause, reason=REASON,
                since="2026-11-28T06:40:00Z", reserved_by_fence=reserved_by_fence, reserved_before=0)


# ------------------------------------------------------------------ the rules (pure)

@pytest.mark.parametrize("the_view, the_record, verdict, words", [
    (view(), None, "fence", ""),
    (view(reserved=1), None, "record", ""),  # an operator's or Nova's reservation: the record only
    (view(consumers=["vm-1"]), None, "defer", f"{NAME} is allocated (vm-1): not fenced now, so its server keeps it"),
    (view(used=1), None, "defer", "is allocated (usage 1)"),
    (view(reserved=1), record(), "unchanged", ""),
    (view(reserved=1), record(reserved_by_fence=False), "unchanged", ""),
    (view(reserved=0), record(), "fence", ""),  # reserved set back by hand while it still fails: fenced again
    (None, None, "absent", "Placement has no provider of it"),
])
def test_judge_fence(the_view, the_record, verdict, words):
    got, reason = pci_fence.judge_fence(NAME, the_view, the_record)
    assert got == verdict and words in reason


@pytest.mark.parametrize("the_view, the_record, verdict", [
    (view(reserved=1), None, "unchanged"),  # no record of ours: an operator's reservation is never touched
    (view(reserved=1), record(), "unfence"),
    (view(reserved=1), record(reserved_by_fence=False), "forget"),  # Placement left as the fence found it
    (view(reserved=0), record(), "forget"),
    (None, record(), "forget"),
    (view(reserved=1), record(cause="reset_failed"), "keep"),
])
def test_judge_unfence(the_view, the_record, verdict):
    got, reason = pci_fence.judge_unfence(NAME, the_view, the_record)
    assert got == verdict and (bool(reason) == (verdict == "keep"))


def test_a_kept_fence_says_why_and_how():
    _verdict, reason = pci_fence.judge_unfence(NAME, view(reserved=1), record(cause="reset_failed"))
    assert reason.startswith(f"{NAME} is fenced for reset_failed ({REASON}): this run does not lift that cause")
    assert 'docs/ops.md, "Fencing a failed GPU"' in reason


views = st.builds(view, reserved=st.integers(0, 2), total=st.integers(1, 2),
                  consumers=st.lists(st.sampled_from(["vm-1", "vm-2"]), max_size=2, unique=True),
                  used=st.integers(0, 1))
records = st.one_of(st.none(), st.builds(record, cause=st.sampled_from(pci_fence.CAUSES),
                                         reserved_by_fence=st.booleans()))


@given(the_view=st.one_of(st.none(), views), the_record=records)
@settings(max_examples=200, deadline=None)
def test_a_fence_never_writes_an_allocated_device(the_view, the_record):
    verdict, _reason = pci_fence.judge_fence(NAME, the_view, the_record)
    if verdict == "fence":
        assert not pci_fence.allocated(the_view)
    if the_view is not None and pci_fence.allocated(the_view) and verdict != "unchanged":
        assert verdict == "defer"


@given(the_view=st.one_of(st.none(), views), the_record=records)
@settings(max_examples=200, deadline=None)
def test_unfence_writes_only_what_a_record_of_ours_says_we_wrote(the_view, the_record):
    verdict, _reason = pci_fence.judge_unfence(NAME, the_view, the_record)
    if the_record is None:
        assert verdict == "unchanged"
    if verdict == "unfence":
        assert the_record["reserved_by_fence"] and the_record["cause"] in pci_fence.HEALTH_LIFTS


def _placement_after(verdict, current, total, record_entry=None):
    """What each verdict does to reserved (the module's apply, in one line)."""
    if verdict == "fence":
        return total
    if verdict == "unfence":
        return record_entry["reserved_before"]
    return current


@given(reserved=st.integers(0, 2), total=st.integers(1, 2), cause=st.sampled_from(pci_fence.HEALTH_LIFTS))
@settings(max_examples=100, deadline=None)
def test_fence_then_unfence_restores_what_was_there(reserved, total, cause):
    """A free device: fenced (reserved = total), then lifted (reserved back to what it was: 0 where the fence wrote
    it; an operator's reservation stays)."""
    reserved = min(reserved, total)
    verdict, _ = pci_fence.judge_fence(NAME, view(reserved=reserved, total=total), None)
    assert verdict in ("fence", "record")
    fenced = _placement_after(verdict, reserved, total)
    assert fenced == total  # nothing left to give
    device = dict(address=ADDRESS, uuid="d1", name=NAME, resource_class=RC, cause=cause, reason=REASON)
    entry = pci_fence.entry(device, "2026-11-28T06:40:00Z", verdict == "fence", reserved)
    assert pci_fence.judge_fence(NAME, view(reserved=fenced, total=total), entry)[0] == "unchanged"  # idempotent
    lift, _ = pci_fence.judge_unfence(NAME, view(reserved=fenced, total=total), entry)
    assert _placement_after(lift, fenced, total, entry) == reserved


def test_record_file_round_trip_mode_and_removal(tmp_path):
    device = dict(address=ADDRESS, uuid="d1", name=NAME, resource_class=RC, cause="gone_from_bus", reason=REASON)
    fences = [pci_fence.entry(device, "2026-11-28T06:40:00Z", True)]
    pci_fence.write_record(str(tmp_path / "fences"), "gpu01", fences)
    path = tmp_path / "fences" / "gpu01.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert json.loads(path.read_text()) == {"format": 1, "host": "gpu01", "fences": fences}
    assert pci_fence.read_records(str(tmp_path / "fences")) == {"gpu01": fences}
    assert [p.name for p in (tmp_path / "fences").iterdir()] == ["gpu01.json"]  # no temporary file left
    pci_fence.write_record(str(tmp_path / "fences"), "gpu01", [])
    assert not path.exists() and pci_fence.read_records(str(tmp_path / "fences")) == {}
    assert pci_fence.read_records(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("content, words", [
    ("{not json", "cannot be read"),
    (json.dumps({"format": 2, "fences": []}), "is not a fence record this project wrote"),
    (json.dumps({"format": 1, "host": "gpu01", "fences": [{"address": "27:00.0"}]}), "fences[0] lacks address"),
    (json.dumps({"format": 1, "host": "gpu01", "fences": [dict(record(), cause="tired")]}), "fences[0] lacks"),
    (json.dumps({"format": 1, "host": "gpu01", "fences": [dict(record(), reserved_by_fence="yes")]}),
     "fences[0] lacks"),
])
def test_a_record_not_ours_is_refused_naming_the_file(tmp_path, content, words):
    (tmp_path / "gpu01.json").write_text(content)
    with pytest.raises(pci_fence.RecordError) as err:
        pci_fence.read_records(str(tmp_path))
    assert str(tmp_path / "gpu01.json") in str(err.value) and words in str(err.value)


def test_a_host_name_that_is_no_file_name_is_refused():
    with pytest.raises(ValueError, match="host '../etc' is not an inventory host name"):
        pci_fence.record_path("/x", "../etc")


# ------------------------------------------------------------------ os_pci_fence: the exact calls

class Response:
    """A keystoneauth response."""

    def __init__(self, body, status_code=200):
        self.status_code, self.body = status_code, body
        self.text = json.dumps(body)

    def json(self):
        return self.body


def conflict():
    return Response({"errors": [{"status": 409, "code": "placement.concurrent_update",
                                 "detail": "resource provider generation conflict"}]}, 409)


@pytest.fixture
def placement(conn):
    """Placement with one free device d1 (reserved 0, generation 5)."""
    conn.state = {"generation": 5, "reserved": 0, "allocations": {}, "puts": [], "put_answers": [], "gone": False}

    def get(path, microversion=None, raise_exc=True):
        assert microversion == "1.26" and raise_exc is False
        s = conn.state
        answers = {} if s["gone"] else {
            f"/resource_providers/d1/inventories/{RC}": {
                "resource_provider_generation": s["generation"], "total": 1, "reserved": s["reserved"],
                "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0},
            "/resource_providers/d1/allocations": {"allocations": s["allocations"],
                                                   "resource_provider_generation": s["generation"]},
            "/resource_providers/d1/usages": {
                "usages": {RC: sum(a["resources"][RC] for a in s["allocations"].values())},
                "resource_provider_generation": s["generation"]},
        }
        return Response(answers[path]) if path in answers else Response({"errors": [{"status": 404}]}, 404)

    def put(path, json=None, microversion=None, raise_exc=True):  # pylint: disable=redefined-outer-name
        assert microversion == "1.26" and raise_exc is False
        conn.state["puts"].append((path, copy.deepcopy(json)))
        if conn.state["put_answers"]:
            return conn.state["put_answers"].pop(0)
        conn.state.update(reserved=json["reserved"], generation=conn.state["generation"] + 1)
        return Response(dict(json, resource_provider_generation=conn.state["generation"]))

    conn.placement.get.side_effect = get
    conn.placement.put.side_effect = put
    return conn


def device(state="fenced", **extra):
    item = dict(host="gpu01", address=ADDRESS, uuid="d1", resource_class=RC, name=NAME, state=state)
    if state == "fenced":
        item.update(cause="gone_from_bus", reason=REASON)
    item.update(extra)
    return item


def args(tmp_path, *devices, **extra):
    return dict({"cloud": "ogc-test", "records_dir": str(tmp_path / "fences"), "devices": list(devices)}, **extra)


def body(reserved, generation=5):
    return {"resource_provider_generation": generation, "total": 1, "reserved": reserved, "min_unit": 1,
            "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0}


def test_check_mode_says_what_it_would_fence_and_writes_nothing(fence_module, run_module, placement, tmp_path):
    result = run_module(fence_module, args(tmp_path, device()), check_mode=True, diff=True)
    assert result["changed"] is True and result["fenced"] == [NAME] and result["unfenced"] == []
    assert result["diff"] == {"before": {NAME: {"reserved": 0, "fence": None}},
                              "after": {NAME: {"reserved": 1, "fence": {"cause": "gone_from_bus", "reason": REASON}}}}
    assert result["records"]["gpu01"][0]["reason"] == REASON and result["records"]["gpu01"][0]["reserved_by_fence"]
    assert placement.state["puts"] == [] and not (tmp_path / "fences").exists()


def test_fence_writes_the_record_and_reserved_then_changes_nothing(fence_module, run_module, placement, tmp_path):
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["changed"] is True and result["fenced"] == [NAME]
    assert placement.state["puts"] == [(f"/resource_providers/d1/inventories/{RC}", body(1))]
    saved = json.loads((tmp_path / "fences" / "gpu01.json").read_text())
    assert saved["format"] == 1 and saved["host"] == "gpu01"
    [entry] = saved["fences"]
    assert {k: entry[k] for k in ("address", "provider", "resource_class", "cause", "reason", "reserved_by_fence",
                                  "reserved_before")} \
        == dict(address=ADDRESS, provider="d1", resource_class=RC, cause="gone_from_bus", reason=REASON,
                reserved_by_fence=True, reserved_before=0)
    assert result["devices"] == [dict(name=NAME, host="gpu01", address=ADDRESS, uuid="d1", resource_class=RC,
                                      reserved_before=0, reserved_after=1, action="fence")]
    again = run_module(fence_module, args(tmp_path, device()))
    assert again["changed"] is False and again["unchanged"] == [NAME] and len(placement.state["puts"]) == 1
    assert json.loads((tmp_path / "fences" / "gpu01.json").read_text()) == saved  # since kept

    # Repaired: reserved back to 0, the record gone; again: nothing.
    lifted = run_module(fence_module, args(tmp_path, device("unfenced")), diff=True)
    assert lifted["changed"] is True and lifted["unfenced"] == [NAME]
    assert placement.state["puts"][-1] == (f"/resource_providers/d1/inventories/{RC}", body(0, 6))
    assert not (tmp_path / "fences" / "gpu01.json").exists() and lifted["records"] == {}
    assert lifted["diff"]["after"] == {NAME: {"reserved": 0, "fence": None}}
    again = run_module(fence_module, args(tmp_path, device("unfenced")))
    assert again["changed"] is False and len(placement.state["puts"]) == 2


def test_an_allocated_device_is_deferred_untouched(fence_module, run_module, placement, tmp_path):
    placement.state["allocations"] = {"vm-1": {"resources": {RC: 1}}}
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["changed"] is False and result["fenced"] == []
    assert result["deferred"] == [dict(name=NAME, host="gpu01", address=ADDRESS, reason=(
        f"{NAME} is allocated (vm-1): not fenced now, so its server keeps it untouched; it is fenced once its server "
        "is gone (the next health run)"))]
    assert placement.state["puts"] == [] and not (tmp_path / "fences").exists()


def test_an_operators_reservation_is_recorded_only_and_never_lifted_by_us(fence_module, run_module, placement,
                                                                         tmp_path):
    placement.state["reserved"] = 1
    # Repaired, no record of ours: nothing is read or written.
    untouched = run_module(fence_module, args(tmp_path, device("unfenced")))
    assert untouched["changed"] is False and untouched["unchanged"] == [NAME] and not placement.placement.get.called
    # Failed while reserved by someone else: the record only.
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["fenced"] == [NAME] and placement.state["puts"] == []
    assert json.loads((tmp_path / "fences" / "gpu01.json").read_text())["fences"][0]["reserved_by_fence"] is False
    # Repaired: the record goes, the reservation stays.
    lifted = run_module(fence_module, args(tmp_path, device("unfenced")))
    assert lifted["unfenced"] == [NAME] and placement.state["puts"] == [] and placement.state["reserved"] == 1
    assert not (tmp_path / "fences" / "gpu01.json").exists()


def test_a_failed_reset_is_not_lifted_by_health(fence_module, run_module, placement, tmp_path):
    run_module(fence_module, args(tmp_path, device(cause="reset_failed", reason="gpu01: reset failed")))
    result = run_module(fence_module, args(tmp_path, device("unfenced")))
    assert result["changed"] is False and [k["address"] for k in result["kept"]] == [ADDRESS]
    assert placement.state["reserved"] == 1 and (tmp_path / "fences" / "gpu01.json").exists()
    # The operator's explicit choice lifts it.
    lifted = run_module(fence_module, args(tmp_path, device("unfenced"), lift_causes=["reset_failed"]))
    assert lifted["unfenced"] == [NAME] and placement.state["reserved"] == 0


def test_a_generation_conflict_reads_again_and_writes_again(fence_module, run_module, placement, tmp_path,
                                                           monkeypatch):
    placement.state["put_answers"] = [conflict()]
    monkeypatch.setattr(pci_fence.time, "sleep", lambda _s: placement.state.update(generation=9))
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["fenced"] == [NAME]
    assert [b["resource_provider_generation"] for _p, b in placement.state["puts"]] == [5, 9]


def test_a_device_taken_meanwhile_is_deferred_and_its_record_taken_back(fence_module, run_module, placement,
                                                                        tmp_path, monkeypatch):
    placement.state["put_answers"] = [conflict()]
    monkeypatch.setattr(pci_fence.time, "sleep", lambda _s: placement.state.update(
        generation=6, allocations={"vm-1": {"resources": {RC: 1}}}))
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["changed"] is False and result["fenced"] == [] and [d["name"] for d in result["deferred"]] == [NAME]
    assert len(placement.state["puts"]) == 1 and not (tmp_path / "fences" / "gpu01.json").exists()


def test_another_placement_error_fails_naming_the_device(fence_module, run_module, placement, tmp_path):
    placement.state["put_answers"] = [Response({"errors": [{"status": 400, "detail": "capacity"}]}, 400)]
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["failed"] is True
    assert result["msg"].startswith(f"writing reserved of {NAME} (provider d1) failed: HTTP 400")


def test_a_provider_gone_is_absent(fence_module, run_module, placement, tmp_path):
    placement.state["gone"] = True
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["changed"] is False and result["absent"] == [NAME] and placement.state["puts"] == []


@pytest.mark.parametrize("bad, words", [
    (dict(address="27:00"), "devices[0]: address '27:00' is not a PCI address like 0000:27:00.0"),
    (dict(reason=""), f"devices[0]: {NAME}: a fence needs its cause"),
    (dict(host="a/b"), "devices[0]: host 'a/b' is not an inventory host name"),
])
def test_bad_devices_are_refused_before_any_call(fence_module, run_module, placement, tmp_path, bad, words):
    result = run_module(fence_module, args(tmp_path, device(**bad)))
    assert result["failed"] is True and words in result["msg"]
    assert result["msg"].startswith("invalid parameters, nothing was read or fenced")
    assert not placement.placement.get.called


def test_a_relative_records_dir_and_a_twice_named_device_are_refused(fence_module, run_module, placement, tmp_path):
    result = run_module(fence_module, dict(args(tmp_path, device(), device()), records_dir="fences"))
    assert "devices[1]: gpu01_0000:44:00.0 is named twice" in result["msg"]
    assert "records_dir 'fences' must be an absolute path" in result["msg"]


def test_a_bad_record_stops_the_run_before_any_call(fence_module, run_module, placement, tmp_path):
    (tmp_path / "fences").mkdir()
    (tmp_path / "fences" / "gpu01.json").write_text("[]")
    result = run_module(fence_module, args(tmp_path, device()))
    assert result["failed"] is True and "gpu01.json is not a fence record this project wrote" in result["msg"]
    assert not placement.placement.get.called


def test_a_wrong_type_is_refused(fence_module, run_module, placement, tmp_path):
    result = run_module(fence_module, dict(args(tmp_path), devices="gpu01"))
    assert result["failed"] is True and "dictionary requested" in result["msg"]
    assert not placement.placement.get.called


# ------------------------------------------------------------------ the health play: requests, alerts, metrics

def health_report(missing=False, fenced_state="free"):
    gpus = [dict(address="0000:27:00.0", for_nova=True, present=True, driver="vfio-pci"),
            dict(address=ADDRESS, for_nova=True, present=not missing, driver=None if missing else "vfio-pci")]
    problems = [dict(cause="device_missing", host="gpu01", address=ADDRESS, message=REASON)] if missing else []
    return dict(host="gpu01", found=1 if missing else 2, expected=2, gpus=gpus, problems=problems,
                alerts=[p["message"] for p in problems])


def nova_view(reserved=0):
    devices = [dict(name=f"ogc-gpu-1_{a.upper()}", uuid=u, host="ogc-gpu-1", address=a, resource_class=RC,
                    reserved=r, used=0, consumers=[], state="reserved" if r else "free")
               for a, u, r in (("0000:27:00.0", "d0", 0), (ADDRESS, "d1", reserved))]
    return dict(available=True, hosts={"ogc-gpu-1": {RC: dict(total=2 - reserved, used=0, reserved=reserved,
                                                              free=2 - reserved)}}, devices=devices, note="")


def test_requests_fence_the_failed_planned_device_and_lift_the_healthy_ones():
    summary = health.gpu_health_nova([health_report(missing=True)], nova_view(), {"gpu01": "ogc-gpu-1"})
    got = health.gpu_fence_requests(summary)
    assert got == [
        dict(host="gpu01", address="0000:27:00.0", uuid="d0", resource_class=RC, name="ogc-gpu-1_0000:27:00.0",
             state="unfenced"),
        dict(host="gpu01", address=ADDRESS, uuid="d1", resource_class=RC, name="ogc-gpu-1_0000:44:00.0",
             state="fenced", cause="gone_from_bus", reason=REASON)]


def test_requests_leave_a_device_the_plan_does_not_give_nova():
    report = health_report()
    report["gpus"] = report["gpus"][:1]
    summary = health.gpu_health_nova([report], nova_view(), {"gpu01": "ogc-gpu-1"})
    assert [r["address"] for r in health.gpu_fence_requests(summary)] == ["0000:27:00.0"]


def test_requests_refuse_what_is_not_a_summary():
    with pytest.raises(Exception, match="gpu_fence_requests: expects gpu_health_nova's answer"):
        health.gpu_fence_requests([health_report()])


def fence_result(check_mode_new=True, deferred=False):
    entry = pci_fence.entry(dict(address=ADDRESS, uuid="d1", name="ogc-gpu-1_0000:44:00.0", resource_class=RC,
                                 cause="gone_from_bus", reason=REASON), "2026-11-28T06:40:00Z", True)
    if deferred:
        return dict(fenced=[], unfenced=[], devices=[], records={}, records_dir="/f",
                    deferred=[dict(name="ogc-gpu-1_0000:44:00.0", host="gpu01", address=ADDRESS,
                                   reason="ogc-gpu-1_0000:44:00.0 is allocated (vm-1): not fenced now")])
    return dict(fenced=["ogc-gpu-1_0000:44:00.0"] if check_mode_new else [], unfenced=[], deferred=[], kept=[],
                devices=[dict(name="ogc-gpu-1_0000:44:00.0", host="gpu01", address=ADDRESS)] if check_mode_new else [],
                records={"gpu01": [entry]}, records_dir="/f")


def test_health_alerts_on_a_fenced_device_and_not_as_an_operators_reservation():
    out = health.gpu_health_nova([health_report(missing=True)], nova_view(reserved=1), {"gpu01": "ogc-gpu-1"},
                                 fence_result(check_mode_new=False))
    got = out["reports"][0]
    assert got["nova_fenced"] == [ADDRESS] and got["nova_reserved"] == [] and got["nova"]["reserved"] == 0
    assert got["nova"]["fenced"] == [dict(address=ADDRESS, cause="gone_from_bus")]
    [fenced] = [a for a in out["alerts"] if "fenced in Placement" in a]
    assert fenced.startswith(f"gpu01: GPU {ADDRESS} is fenced in Placement (provider d1 on ogc-gpu-1, {RC} reserved "
                             f"= total) since 2026-11-28T06:40:00Z: {REASON}. Nova places no new server on it")
    assert "(fence record /f/gpu01.json; docs/ops.md, \"Fencing a failed GPU\")" in fenced
    assert not any("an operator's reservation" in a for a in out["alerts"])


def test_health_in_check_mode_says_would_be_fenced():
    out = health.gpu_health_nova([health_report(missing=True)], nova_view(), {"gpu01": "ogc-gpu-1"},
                                 fence_result(), check_mode=True)
    assert any(a.startswith(f"gpu01: GPU {ADDRESS} would be fenced in Placement (provider d1") for a in out["alerts"])


def test_health_alerts_on_a_deferred_fence_and_a_failed_fence_run():
    out = health.gpu_health_nova([health_report(missing=True)], nova_view(), {"gpu01": "ogc-gpu-1"},
                                 fence_result(deferred=True))
    assert f"gpu01: GPU {ADDRESS} failed but is not fenced: ogc-gpu-1_0000:44:00.0 is allocated (vm-1)" in \
        " | ".join(out["alerts"])
    assert out["reports"][0]["nova"]["fence_deferred"] == [ADDRESS]
    failed = health.gpu_health_nova([health_report()], nova_view(), {"gpu01": "ogc-gpu-1"},
                                    {"failed": True, "msg": "HTTP 503"})
    assert failed["alerts"][-1].startswith("fencing failed GPUs in Placement failed: HTTP 503: failed GPUs may still")


def test_metrics_name_each_fenced_and_deferred_device():
    out = health.gpu_health_nova([health_report(missing=True)], nova_view(reserved=1), {"gpu01": "ogc-gpu-1"},
                                 fence_result(check_mode_new=False))
    report = out["reports"][0]
    text = metrics.gpu_health_metrics(report, 1, nova=dict(report["nova"], fence_deferred=["0000:27:00.0"]))
    assert f'ogc_gpu_fenced{{address="{ADDRESS}",cause="gone_from_bus"}} 1' in text.splitlines()
    assert 'ogc_gpu_fence_deferred{address="0000:27:00.0"} 1' in text.splitlines()
    assert "# TYPE ogc_gpu_fenced gauge" in text and "ogc_gpu_nova_reserved 0" in text


@pytest.mark.parametrize("nova, words", [
    (dict(fenced="0000:44:00.0"), "nova.fenced must be [{address, cause}]"),
    (dict(fenced=[{"address": ADDRESS}]), "nova.fenced must be [{address, cause}]"),
    (dict(fence_deferred=[1]), "nova.fence_deferred must be a list of PCI addresses"),
])
def test_metrics_refuse_bad_fence_counts(nova, words):
    with pytest.raises(Exception, match=words.replace("[", r"\[").replace("{", r"\{")):
        metrics.gpu_health_metrics(health_report(), 1, nova=nova)


# ------------------------------------------------------------------ return_gpus.yml: a fenced GPU is never returned

returns = collection_plugin("filter", "return_gpus")


def waiting_device(address, uuid):
    return dict(name=f"hv-1_{address.upper()}", uuid=uuid, host="hv-1", address=address, resource_class=RC,
                state="waiting_return")


def test_a_fenced_device_waiting_to_be_returned_is_left_with_the_reason():
    fence = dict(record(cause="reset_failed", reserved_by_fence=False), provider="u44", reason="gpu-1: reset failed")
    waiting = returns.return_gpus_waiting([waiting_device("0000:27:00.0", "u27"), waiting_device(ADDRESS, "u44")],
                                          {"gpu-1": "hv-1"}, None, {"gpu-1": [fence]})
    assert [d["address"] for d in waiting["by_host"]["gpu-1"]] == ["0000:27:00.0"]
    assert waiting["requests"]["gpu-1"] == [{"address": "0000:27:00.0", "provider": "u27", "resource_class": RC}]
    [left] = waiting["left"]
    assert left["address"] == ADDRESS and left["fenced"] is True and left["host"] == "gpu-1"
    assert left["reason"] == (f"gpu-1: GPU {ADDRESS} (provider u44) is fenced since 2026-11-28T06:40:00Z (reset_failed: "
                              "gpu-1: reset failed): a fenced GPU is never returned; repair it, then lift the fence "
                              "(docs/ops.md, \"Fencing a failed GPU\")")
    chosen = returns.return_gpus_to_return(waiting, {"gpu-1": {"devices": [
        {"address": "0000:27:00.0", "outcome": "reset"}]}})
    assert [d["address"] for d in chosen["devices"]] == ["0000:27:00.0"]
    assert [s["address"] for s in chosen["skipped"]] == [ADDRESS]
    summary = returns.return_gpus_summary(waiting, chosen, {"returned": ["hv-1_0000:27:00.0"]})
    assert f"skipped: {left['reason']}" in summary["lines"]


def test_a_failed_reset_is_fenced_and_said_so():
    waiting = returns.return_gpus_waiting([waiting_device(ADDRESS, "u44")], {"gpu-1": "hv-1"})
    why = f"gpu-1: GPU {ADDRESS}: the reset failed: write error"
    chosen = returns.return_gpus_to_return(waiting, {"gpu-1": {"devices": [
        {"address": ADDRESS, "outcome": "failed", "reason": why}]}})
    assert returns.return_gpus_fences(chosen) == [dict(
        host="gpu-1", address=ADDRESS, uuid="u44", resource_class=RC, name=f"hv-1_{ADDRESS.upper()}",
        state="fenced", cause="reset_failed", reason=why)]
    fenced = {"fenced": [f"hv-1_{ADDRESS.upper()}"], "records": {}, "changed": True}
    summary = returns.return_gpus_summary(waiting, chosen, None, False, fenced)
    assert summary["fenced"] == [f"hv-1_{ADDRESS.upper()}"]
    assert (f"hv-1_{ADDRESS.upper()}: fenced (its reset failed): never returned until an operator lifts the fence "
            "(docs/ops.md, \"Fencing a failed GPU\")") in summary["lines"]
    failed = returns.return_gpus_summary(waiting, chosen, None, False, {"failed": False, "msg": "HTTP 503"})
    assert "fencing the GPUs whose reset failed failed: HTTP 503; they may be returned by a later run" in \
        " | ".join(failed["errors"])


@given(gpus=st.lists(st.tuples(st.sampled_from(["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0"]), st.booleans(),
                               st.booleans(), st.sampled_from(["vfio-pci", "nvidia", None]),
                               st.sampled_from([None, "device_missing", "not_on_vfio", "iommu_off"])),
                     max_size=3, unique_by=lambda g: g[0]),
       offered=st.lists(st.sampled_from(["0000:27:00.0", "0000:44:00.0", "0000:c3:00.0"]), unique=True))
@settings(max_examples=150, deadline=None)
def test_requests_property(gpus, offered):
    """Only devices the plan gives Nova and Placement offers are listed; fenced exactly when health found them gone
    or off vfio-pci, unfenced only when on the bus and on vfio-pci."""
    report = dict(host="gpu01", nova={"hypervisor": "hv"},
                  gpus=[dict(address=a, for_nova=n, present=p, driver=d) for a, n, p, d, _c in gpus],
                  problems=[dict(cause=c, address=a, message=f"{a} {c}") for a, _n, _p, _d, c in gpus if c],
                  nova_devices=[dict(address=a, uuid=f"u-{a}", resource_class=RC, provider=f"hv_{a}") for a in offered])
    got = pci_fence.requests([report])
    planned = dict((a, (p, d, c)) for a, n, p, d, c in gpus if n)
    for item in got:
        assert item["address"] in planned and item["address"] in offered
        present, driver, cause = planned[item["address"]]
        if item["state"] == "fenced":
            assert cause in ("device_missing", "not_on_vfio") and item["reason"] and item["cause"] in pci_fence.CAUSES
        else:
            assert cause not in ("device_missing", "not_on_vfio") and present and driver == "vfio-pci"
    assert len(set(i["address"] for i in got)) == len(got)
