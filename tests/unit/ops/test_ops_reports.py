"""plugins/filter/ops_reports.py: readable lines from the ops modules' results."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ogc_testlib import load_source, collection_plugin

reports = collection_plugin("filter", "ops_reports")

ENTRY = {"id": "abc", "name": "runner-1", "project": "ci", "status": "ACTIVE", "age_hours": 7.25, "action": "shelve",
         "reason": "older than 6 h (project ci)"}


def result(**kw):
    base = {"checked": 3, "now": "2026-11-21T12:00:00Z", "would_act": [], "exempt": [], "not_acted": [],
            "invalid_metadata": []}
    base.update(kw)
    return base


def test_real_run_lines():
    lines = reports.lifetime_report(result(would_act=[ENTRY, dict(ENTRY, action="delete", name="scratch")],
                                           exempt=[dict(ENTRY, reason="metadata ogc:exempt=true")],
                                           not_acted=[dict(ENTRY, age_hours=None, reason="already shelved")],
                                           invalid_metadata=[dict(ENTRY, reason="bad date")]))
    assert lines == [
        "checked 3 server(s) at 2026-11-21T12:00:00Z",
        "shelved runner-1 (abc, project ci, ACTIVE, age 7.25 h): older than 6 h (project ci)",
        "deleted scratch (abc, project ci, ACTIVE, age 7.25 h): older than 6 h (project ci)",
        "exempt runner-1 (abc, project ci, ACTIVE, age 7.25 h): metadata ogc:exempt=true",
        "not acted on runner-1 (abc, project ci, ACTIVE, age ? h): already shelved",
        "bad metadata runner-1 (abc, project ci, ACTIVE, age 7.25 h): bad date",
    ]


def test_check_mode_words():
    lines = reports.lifetime_report(result(would_act=[ENTRY, dict(ENTRY, action="delete")]), check_mode=True)
    assert lines[1].startswith("would shelve runner-1") and lines[2].startswith("would delete runner-1")


def test_nothing_to_do():
    assert reports.lifetime_report(result()) == ["checked 3 server(s) at 2026-11-21T12:00:00Z",
                                                 "nothing past its maximum age"]


@pytest.mark.parametrize("bad", [None, "text", {"would_act": []}])
def test_not_a_lifetimes_result(bad):
    with pytest.raises(AnsibleFilterError) as info:
        reports.lifetime_report(bad)
    assert "lifetime_report expects the result of os_server_lifetimes" in str(info.value)


def test_filter_names():
    assert set(reports.FilterModule().filters()) == {"lifetime_report", "ogc_image_upload"}


def test_image_upload_item():
    image = {"name": "ubuntu-2204-nvidia", "elements": ["ubuntu"], "disk_format": "qcow2", "visibility": "public",
             "properties": {"img_hide_hypervisor_id": "true", "hw_machine_type": "pc"}}
    stat = {"exists": True, "path": "/srv/img/u.qcow2", "checksum": "ab" * 32}
    assert reports.ogc_image_upload([image, stat], {"hw_machine_type": "q35", "os_distro": "ubuntu"}) == {
        "name": "ubuntu-2204-nvidia", "file": "/srv/img/u.qcow2", "checksum": "sha256:" + "ab" * 32,
        "disk_format": "qcow2", "visibility": "public",
        "properties": {"hw_machine_type": "pc", "os_distro": "ubuntu", "img_hide_hypervisor_id": "true"}}


@pytest.mark.parametrize("pair, message", [
    ("x", "expects [image_builds item, stat result]"),
    ([{}, {"exists": True, "checksum": "x"}], "the image has no name"),
    ([{"name": "a"}, {"exists": False, "path": "/nope"}], "no file (or no sha256 checksum) for image a at /nope"),
])
def test_image_upload_item_errors(pair, message):
    with pytest.raises(AnsibleFilterError) as info:
        reports.ogc_image_upload(pair)
    assert message in str(info.value)
