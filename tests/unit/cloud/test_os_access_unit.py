"""os_access: allow-list parsing, the difference function and the exact SDK calls (SDK mocked)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import access as cloud_access

MARK = "managed by open-gpu-cloud allow-list"
WRITES = ("create_project", "update_project", "create_user", "update_user", "assign_project_role_to_user",
          "delete_user", "delete_project")


def writes(conn):
    return [(name, c) for name in WRITES for c in getattr(conn.identity, name).call_args_list]


def test_allow_list_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match="cannot read the allow-list file .*nope.json"):
        cloud_access.load_allow_list(str(missing))
    bad = tmp_path / "bad.json"
    bad.write_text("[alice")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        cloud_access.load_allow_list(str(bad))
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"alice": 1}')
    with pytest.raises(ValueError, match="must hold a JSON list of logins"):
        cloud_access.load_allow_list(str(wrong))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(["alice", "bob-2"]))
    assert cloud_access.load_allow_list(str(good)) == ["alice", "bob-2"]


def test_validate_logins():
    errors = cloud_access.validate(["alice", "Alice", "-bad", "a--b", "x" * 40, "ok-1"], [], [])
    assert errors == ["allow-list entry 1 'Alice' duplicates entry 0 'alice'",
                      "allow-list entry 2 '-bad' is not a valid login (letters, digits and single hyphens, at most "
                      "39 characters)",
                      "allow-list entry 3 'a--b' is not a valid login (letters, digits and single hyphens, at most "
                      "39 characters)",
                      f"allow-list entry 4 '{'x' * 40}' is not a valid login (letters, digits and single hyphens, at "
                      "most 39 characters)"]


def test_plan_creates_enables_disables_and_never_touches_unmanaged():
    users = {"alice": dict(id="a", description=MARK, enabled=True),
             "bob": dict(id="b", description=MARK, enabled=False),
             "carol": dict(id="c", description=MARK, enabled=True),
             "admin": dict(id="adm", description="", enabled=True),
             "dave": dict(id="d", description="by hand", enabled=True)}
    actions = cloud_access.plan(["alice", "bob", "erin", "dave"], [dict(name="ci", description="CI", enabled=True)],
                             {}, users, {("alice", "ci")}, ["ci"], MARK, True)
    assert [(k, label) for k, label, _ in actions] == [
        ("create_project", "project ci"), ("unchanged", "user alice"), ("enable_user", "user bob"),
        ("assign", None), ("create_user", "user erin"), ("assign", None), ("unmanaged", "user dave"),
        ("assign", None), ("disable_user", "user carol")]
    assert [d for k, _, d in actions if k == "assign"] == [("bob", "ci"), ("erin", "ci"), ("dave", "ci")]
    no_disable = cloud_access.plan(["alice"], [], {}, users, {("alice", "ci")}, ["ci"], MARK, False)
    assert [k for k, _, _ in no_disable] == ["unchanged"]


def project(name, pid=None, description="", enabled=True):
    return SimpleNamespace(id=pid or name + "-id", name=name, description=description, is_enabled=enabled,
                           domain_id="default")


def user(name, description=MARK, enabled=True):
    return SimpleNamespace(id=name + "-id", name=name, description=description, is_enabled=enabled)


@pytest.fixture
def ident(conn):
    identity = conn.identity
    identity.projects.return_value = [project("admin"), project("ci", description="CI")]
    identity.users.return_value = [user("admin", description=""), user("alice"), user("carol")]
    identity.find_role.return_value = SimpleNamespace(id="member-id", name="member")
    identity.role_assignments.return_value = [SimpleNamespace(user={"id": "alice-id"})]
    identity.create_user.side_effect = lambda **kw: user(kw["name"])
    return identity


ARGS = dict(cloud="ogc-test", projects=[dict(name="ci", description="CI")], allow_list=["alice", "erin"],
            user_projects=["ci"])


def test_run_makes_exactly_these_calls(os_access, conn, ident, run_module):
    result = run_module(os_access, ARGS)
    assert result["changed"] is True
    assert result["created"] == ["user erin"] and result["disabled"] == ["user carol"]
    assert result["assigned"] == ["member to erin on ci"] and result["unchanged"] == ["project ci", "user alice"]
    ident.users.assert_called_once_with(domain_id="default")
    ident.role_assignments.assert_called_once_with(scope_project_id="ci-id", role_id="member-id")
    ident.create_user.assert_called_once_with(name="erin", domain_id="default", description=MARK, is_enabled=True)
    ident.assign_project_role_to_user.assert_called_once_with("ci-id", "erin-id", "member-id")
    ident.update_user.assert_called_once_with("carol-id", is_enabled=False)
    assert len(writes(conn)) == 3


def test_check_mode_writes_nothing(os_access, conn, ident, run_module):
    result = run_module(os_access, ARGS, check_mode=True, diff=True)
    assert result["changed"] is True and result["created"] == ["user erin"]
    assert result["diff"]["after"]["user carol"] == {"enabled": False}
    assert writes(conn) == []


def test_converged_run_writes_nothing(os_access, conn, ident, run_module):
    result = run_module(os_access, dict(ARGS, allow_list=["alice", "carol"]))
    ident.role_assignments.return_value = [SimpleNamespace(user={"id": "alice-id"}),
                                           SimpleNamespace(user={"id": "carol-id"})]
    result = run_module(os_access, dict(ARGS, allow_list=["alice", "carol"]))
    assert result["changed"] is False
    assert result["unchanged"] == ["project ci", "user alice", "user carol"]


def test_bad_allow_list_file_fails_before_connecting(os_access, conn, run_module, tmp_path):
    path = tmp_path / "users.json"
    path.write_text('"alice"')
    args = dict(ARGS, allow_list_file=str(path))
    del args["allow_list"]
    result = run_module(os_access, args)
    assert result["failed"] is True
    assert result["msg"] == (f"the allow-list file {path} must hold a JSON list of logins (strings), e.g. [\"alice\", "
                             "\"bob\"]; nothing was written")
    conn.connect_mock.assert_not_called()


def test_unknown_role_fails_before_any_write(os_access, conn, ident, run_module):
    ident.find_role.return_value = None
    result = run_module(os_access, dict(ARGS, user_role="operator"))
    assert result["msg"] == "role 'operator' does not exist (user_role); nothing was written"
    assert writes(conn) == []


def test_without_an_allow_list_nobody_is_disabled(os_access, conn, ident, run_module):
    args = dict(ARGS)
    del args["allow_list"]
    result = run_module(os_access, args)
    assert result["changed"] is False and result["disabled"] == []
    assert writes(conn) == []
    result = run_module(os_access, dict(ARGS, allow_list=[]))
    assert result["disabled"] == ["user alice", "user carol"]


def test_check_mode_reports_what_the_real_run_does(os_access, conn, ident, run_module):
    args = dict(ARGS, projects=[dict(name="ci", description="GPU CI"), dict(name="new")],
                role_assignments=[dict(user="admin", project="ci", role="admin")])
    ident.role_assignments.side_effect = lambda **kw: [SimpleNamespace(user={"id": "alice-id"})] \
        if "user_id" not in kw else []
    check = run_module(os_access, args, check_mode=True, diff=True)
    assert writes(conn) == []
    real = run_module(os_access, args, diff=True)
    assert len(writes(conn)) == 6
    for key in ("changed", "created", "updated", "enabled", "disabled", "assigned", "unchanged", "unmanaged",
                "diff"):
        assert check[key] == real[key], key
    assert real["created"] == ["project new", "user erin"] and real["updated"] == ["project ci"]
    assert real["assigned"] == ["member to erin on ci", "member to admin on ci"]
