"""The resource protocol of openstack_cloud (prepare -> read -> make_plan -> apply -> report), on a small
resource of its own: check mode decided once, progress, failures halfway, the plan's problems."""

from __future__ import annotations

import types
from unittest import mock

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import converge, run_module as protocol_main
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import Action, Plan
from openstack import exceptions as sdk_exceptions


class Widgets:
    """Widgets as code: `widgets` is {name: size}; the cloud's are conn.widgets.list() -> {name: size}."""

    ARGUMENT_SPEC = dict(widgets=dict(type="dict", required=True), fail_on=dict(type="str"),
                         done_as=dict(type="str"))
    finished = []

    @staticmethod
    def prepare(params):
        bad = sorted(name for name, size in params["widgets"].items() if not isinstance(size, int) or size < 1)
        if bad:
            return None, dict(msg=f"widgets {', '.join(bad)} need a positive size; nothing was written",
                              errors=bad)
        return dict(params["widgets"]), None

    @staticmethod
    def read(cm, _params, _declared):
        return cm.call("listing", "widgets", cm.conn.widgets.list)

    @staticmethod
    def make_plan(_params, declared, have):
        actions, before, after = [], {}, {}
        for name, size in sorted(declared.items()):
            if name not in have:
                actions.append(Action("created", name, size))
                after[name] = size
            elif have[name] != size:
                actions.append(Action("updated", name, size))
                before[name], after[name] = have[name], size
            else:
                actions.append(Action("unchanged", name))
        problem = None
        if "forbidden" in declared:
            problem = dict(msg="widget forbidden may not be declared; nothing was written", errors=["forbidden"])
        return Plan(actions, before, after, problem=problem, warnings=[f"{n} is big" for n in sorted(declared)
                                                                        if declared[n] > 100])

    @staticmethod
    def apply(cm, params, _have, action, applied):
        verb = "create" if action.done == "created" else "update"
        cm.call(f"{verb} widget", action.item, getattr(cm.conn.widgets, verb), action.item, action.data)
        applied[action.item] = action.data
        if params["done_as"] == action.item:
            return Action("unchanged", action.item)
        return None

    @staticmethod
    def finish(_cm, _params, _have, applied):
        Widgets.finished.append(dict(applied))

    @staticmethod
    def report(_params, _declared, _have, _plan, applied, progress):
        result = dict(created=[], updated=[], unchanged=[])
        result.update(progress)
        result["applied"] = applied
        return result


MODULE = types.SimpleNamespace(main=lambda: protocol_main(Widgets))


@pytest.fixture
def widgets(conn):
    Widgets.finished.clear()
    conn.widgets.list.return_value = {"a": 1, "b": 2, "c": 3}
    return conn.widgets


ARGS = dict(cloud="ogc-test", widgets={"a": 1, "b": 5, "d": 4, "e": 6})


def test_real_run_applies_the_plan_in_order(widgets, run_module):
    result = run_module(MODULE, ARGS, diff=True)
    assert result["changed"] is True
    assert result["created"] == ["d", "e"] and result["updated"] == ["b"] and result["unchanged"] == ["a"]
    assert [c[0] for c in widgets.method_calls] == ["list", "update", "create", "create"]
    widgets.update.assert_called_once_with("b", 5)
    assert result["diff"] == {"before": {"b": 2}, "after": {"b": 5, "d": 4, "e": 6}}
    assert Widgets.finished == [{"b": 5, "d": 4, "e": 6}]


def test_check_mode_writes_nothing_and_reports_what_the_real_run_does(widgets, run_module):
    check = run_module(MODULE, ARGS, check_mode=True, diff=True)
    assert [c[0] for c in widgets.method_calls] == ["list"]
    assert Widgets.finished == []
    real = run_module(MODULE, ARGS, diff=True)
    for key in ("changed", "created", "updated", "unchanged", "diff"):
        assert check[key] == real[key], key
    assert check["applied"] == {} and real["applied"] == {"b": 5, "d": 4, "e": 6}


def test_nothing_to_do_is_not_changed_and_finish_still_runs(widgets, run_module):
    # finish ends every real run, writes or not: os_compute_drain waits there for a host an earlier run disabled.
    result = run_module(MODULE, dict(ARGS, widgets={"a": 1, "c": 3}), diff=True)
    assert result["changed"] is False and result["unchanged"] == ["a", "c"]
    assert result["diff"] == {"before": {}, "after": {}}
    assert [c[0] for c in widgets.method_calls] == ["list"] and Widgets.finished == [{}]


def test_no_diff_unless_asked(widgets, run_module):
    assert "diff" not in run_module(MODULE, ARGS)


def test_an_error_in_apply_reports_what_was_already_done(widgets, run_module):
    widgets.create.side_effect = [None, sdk_exceptions.HttpException("quota exceeded")]
    result = run_module(MODULE, ARGS)
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"].startswith("create widget e failed: quota exceeded")
    assert result["msg"].endswith("Already done in this run: created d, updated b; a re-run finishes the job")
    assert result["created"] == ["d"] and result["updated"] == ["b"] and result["failed_item"] == "e"
    assert Widgets.finished == []


def test_an_error_on_the_first_write_reports_nothing_done(widgets, run_module):
    widgets.update.side_effect = sdk_exceptions.HttpException("conflict")
    result = run_module(MODULE, ARGS)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == "update widget b failed: conflict"


def test_a_problem_in_the_plan_fails_before_any_write(widgets, run_module):
    for check_mode in (False, True):
        result = run_module(MODULE, dict(ARGS, widgets={"forbidden": 1, "new": 2}), check_mode=check_mode)
        assert result["failed"] is True and result["changed"] is False
        assert result["msg"] == "widget forbidden may not be declared; nothing was written"
        assert result["errors"] == ["forbidden"]
    assert [c[0] for c in widgets.method_calls] == ["list", "list"]


def test_a_problem_in_the_declaration_fails_before_connecting(widgets, conn, run_module):
    result = run_module(MODULE, dict(ARGS, widgets={"a": 0, "b": "big"}))
    assert result["failed"] is True
    assert result["msg"] == "widgets a, b need a positive size; nothing was written"
    conn.connect_mock.assert_not_called()


def test_the_action_apply_reports_is_the_one_recorded(widgets, run_module):
    result = run_module(MODULE, dict(ARGS, done_as="d"))
    assert result["created"] == ["e"] and result["unchanged"] == ["a", "d"]


def test_only_the_action_actually_done_counts_as_changed(widgets, run_module):
    result = run_module(MODULE, dict(ARGS, widgets={"a": 1, "d": 4}, done_as="d"))
    assert result["changed"] is False and result["unchanged"] == ["a", "d"]


def test_warnings_of_the_plan_reach_the_operator(widgets, run_module):
    # AnsibleModule.warn itself: once a test of this session has loaded controller code, ansible-core sends
    # module warnings to the display instead of the result.
    with mock.patch.object(AnsibleModule, "warn") as warn:
        run_module(MODULE, dict(ARGS, widgets={"a": 1, "huge": 500}), check_mode=True)
    warn.assert_called_once_with("huge is big")


def test_a_plan_without_diff_adds_none():
    plan = Plan([Action("deleted", "x")])
    assert plan.diff is None and plan.changed is True and plan.writes == [Action("deleted", "x")]
    assert Plan([Action("unchanged", "x")], {}, {}).changed is False


def test_converge_returns_changed_and_result_for_os_cloud_sections(widgets, conn):
    cm = types.SimpleNamespace(conn=conn, check_mode=True, module=types.SimpleNamespace(_diff=True), progress={},
                               record=lambda key, item: cm.progress.setdefault(key, []).append(item),
                               call=lambda action, resource, func, *a, **kw: func(*a, **kw))
    changed, result = converge(cm, Widgets, dict(done_as=None), {"b": 5, "a": 1})
    assert changed is True
    assert result["updated"] == ["b"] and result["diff"] == {"before": {"b": 2}, "after": {"b": 5}}
