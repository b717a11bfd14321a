"""The plan file's contract: the producer's record (format, policy fingerprint, facts, plan) and the one
loader (passthrough_plan_load) refusing a missing, corrupt, foreign or stale file with the host, the file
and the command to run; the passthrough_plans lookup that loads them in the roles (load_plans)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.lookup import passthrough_plans as lookup
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import store
from ogc_testlib import ROOT

FIX = "ansible-playbook playbooks/plan.yml -i inventory/<env> --limit "
POLICY = {"exclude": ["0000:28:00.0"], "alias_names": {"10de:1db4": "v100"}}


def _written(planner, host_facts, host="seed-v100", policy=None):
    """What roles/passthrough/tasks/write.yml writes: to_nice_json(sort_keys=true) of the record."""
    facts = host_facts("seed-v100")
    plan = planner.passthrough_plan(facts, policy or {}, host)
    return json.dumps(planner.plan_record(plan, facts, policy or {}), indent=4, sort_keys=True) + "\n", plan, facts


def test_record_then_load_returns_the_facts_and_the_plan(planner, host_facts):
    text, plan, facts = _written(planner, host_facts, policy=POLICY)
    record = json.loads(text)
    assert record["format"] == planner.PLAN_FORMAT == 1
    assert record["policy_fingerprint"] == planner.policy_fingerprint(POLICY)
    loaded = planner.plan_load(text, "/plans", "seed-v100", POLICY)
    assert loaded == {"facts": json.loads(json.dumps(facts)), "plan": json.loads(json.dumps(plan))}
    # The older loader of the plan alone reads the same file.
    assert planner.plan_file(text, "/plans/seed-v100.json", "seed-v100") == loaded["plan"]
    # A trailing slash on the directory names the same file.
    assert planner.plan_load(text, "/plans/", "seed-v100", POLICY) == loaded


def test_fingerprint_ignores_key_order_and_sees_every_value(planner):
    assert planner.policy_fingerprint({"a": 1, "b": [1, 2]}) == planner.policy_fingerprint({"b": [1, 2], "a": 1})
    assert planner.policy_fingerprint(None) == planner.policy_fingerprint({})
    assert planner.policy_fingerprint({"exclude": []}) != planner.policy_fingerprint({})
    assert planner.policy_fingerprint({"exclude": ["0000:27:00.0"]}) != planner.policy_fingerprint({"exclude": ["0000:28:00.0"]})
    assert planner.policy_fingerprint({}).startswith("sha256:") and len(planner.policy_fingerprint({})) == 23


@pytest.mark.parametrize("bad", [[], "exclude", 3])
def test_fingerprint_refuses_a_policy_that_is_not_a_mapping(planner, bad):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_policy_fingerprint: passthrough_policy must be a mapping"):
        planner.policy_fingerprint(bad)


@pytest.mark.parametrize("plan, facts", [([], {}), ({}, None), ("plan", {})])
def test_record_refuses_what_is_not_a_plan_and_facts(planner, plan, facts):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_record: the plan and the facts must be mappings"):
        planner.plan_record(plan, facts, {})


def test_missing_file_names_host_file_and_command(planner):
    with pytest.raises(planner.AnsibleFilterError) as caught:
        planner.plan_load(None, "/var/lib/ogc/plans", "gpu7", {})
    assert str(caught.value) == ("passthrough_plan_load: host gpu7: no plan file /var/lib/ogc/plans/gpu7.json: the plan "
                                 "phase has not run for it with this passthrough_plan_dir; run: " + FIX + "gpu7")


@pytest.mark.parametrize("plan_dir", ["", None, 5])
def test_plan_dir_not_set_names_the_variable(planner, plan_dir):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_load: host gpu7: passthrough_plan_dir is not set") as caught:
        planner.plan_load('{"plan": {}}', plan_dir, "gpu7", {})
    assert FIX + "gpu7" in str(caught.value)


@pytest.mark.parametrize("host", ["", None, 3])
def test_host_must_be_a_name(planner, host):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_load: the host must be an inventory name"):
        planner.plan_load("{}", "/plans", host, {})


def test_plan_made_with_another_policy_is_stale(planner, host_facts):
    text, _plan, _facts = _written(planner, host_facts, policy=POLICY)
    with pytest.raises(planner.AnsibleFilterError) as caught:
        planner.plan_load(text, "/plans", "seed-v100", {})
    msg = str(caught.value)
    assert msg.startswith("passthrough_plan_load: host seed-v100: plan file /plans/seed-v100.json is stale: it was made "
                          "with another passthrough_policy than the host's current one")
    assert planner.policy_fingerprint(POLICY) in msg and msg.endswith("run: " + FIX + "seed-v100")


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("format"), "is stale: it has plan format None, this version reads format 1"),
    (lambda r: r.update(format=0), "is stale: it has plan format 0"),
    (lambda r: r.pop("policy_fingerprint"), "is stale: it was made with another passthrough_policy"),
    (lambda r: r["plan"].update(host="other"), "is the plan of host other, not of seed-v100"),
    (lambda r: r.pop("facts"), "has no 'facts' object"),
])
def test_old_foreign_or_incomplete_files_are_refused(planner, host_facts, change, message):
    text, _plan, _facts = _written(planner, host_facts)
    record = json.loads(text)
    change(record)
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_(load|file): .*" + message) as caught:
        planner.plan_load(json.dumps(record), "/plans", "seed-v100", {})
    assert FIX + "seed-v100" in str(caught.value)


@pytest.mark.parametrize("text, message", [("", "is empty"), ("{", "is not valid JSON"), ("[1]", "not a plan file")])
def test_corrupt_files_are_refused_by_the_same_rules_as_plan_file(planner, text, message):
    with pytest.raises(planner.AnsibleFilterError, match=r"^passthrough_plan_file: plan file /p/h.json of host h .*" + message):
        planner.plan_load(text, "/p", "h", {})


_policies = st.fixed_dictionaries({}, optional={
    "exclude": st.lists(st.from_regex(r"0000:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]", fullmatch=True), max_size=3),
    "allow_unsafe_interrupts": st.booleans(),
    "alias_names": st.dictionaries(st.sampled_from(["10de:1db4", "10de:2204"]), st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)),
})


@settings(max_examples=60, deadline=None)
@given(made=_policies, now=_policies)
def test_a_plan_loads_exactly_when_the_policy_is_the_one_it_was_made_with(planner, made, now):
    plan = {"host": "h", "selected": [], "aliases": []}
    text = json.dumps(planner.plan_record(plan, {"devices": []}, made), sort_keys=True)
    if json.dumps(made, sort_keys=True) == json.dumps(now, sort_keys=True):
        assert planner.plan_load(text, "/p", "h", now)["plan"] == plan
    else:
        with pytest.raises(planner.AnsibleFilterError, match="is stale"):
            planner.plan_load(text, "/p", "h", now)


@settings(max_examples=60, deadline=None)
@given(policy=_policies)
def test_fingerprint_is_stable_under_a_json_round_trip(planner, policy):
    assert planner.policy_fingerprint(json.loads(json.dumps(policy))) == planner.policy_fingerprint(policy)


def test_retired_policy_variables_are_refused_per_host_with_the_fix(planner):
    hostvars = {"a": {"passthrough_policy": {}}, "b": {"passthrough_host_policy": {}},
                "c": {"passthrough_host_policy": {}, "gpu_health_policy": {}}}
    assert planner.retired_vars_errors(["a"], hostvars) == []
    errors = planner.retired_vars_errors(["a", "b", "c"], hostvars)
    assert errors[0].startswith("Host b: passthrough_host_policy is no longer read")
    assert errors[0].endswith(FIX + "b")
    assert errors[1].startswith("Host c: passthrough_host_policy and gpu_health_policy are no longer read")


@given(st.dictionaries(st.sampled_from(["passthrough_policy", "passthrough_host_policy", "gpu_health_policy", "x"]),
                       st.none()))
@settings(max_examples=50)
def test_a_host_is_refused_exactly_when_it_sets_a_retired_name(planner, host_vars):
    errors = planner.retired_vars_errors(["h"], {"h": host_vars})
    retired = [name for name in planner.RETIRED_POLICY_VARS if name in host_vars]
    assert len(errors) == (1 if retired else 0)
    assert all(name in errors[0] for name in retired)


def test_another_slices_plan_loads_without_its_policy(planner, host_facts):
    # A plan file of a host this inventory does not hold (another AWX job slice's): read with the same checks,
    # except the policy, which only the inventory holding the host knows.
    text, plan, facts = _written(planner, host_facts, policy=POLICY)
    loaded = planner.fleet_plan_load(text, "/plans/seed-v100.json")
    assert loaded == planner.plan_load(text, "/plans", "seed-v100", POLICY)


@pytest.mark.parametrize("path, change, message", [
    ("/plans/seed-v100.json", {"format": 0}, "plan file /plans/seed-v100.json is stale: it has plan format 0"),
    ("/plans/other.json", {}, "plan file /plans/other.json is the plan of host seed-v100, not of other"),
    ("/plans/seed-v100.json", {"facts": None}, "has no 'facts' object"),
    ("/plans/...json", {}, "plan file /plans/...json: the inventory host name '..' is '..'"),
    ("/plans/seed-v100.txt", {}, "'/plans/seed-v100.txt' is not a plan file (<host>.json)"),
])
def test_another_slices_plan_is_refused_when_foreign_or_old(planner, host_facts, path, change, message):
    text, _plan, _facts = _written(planner, host_facts)
    record = dict(json.loads(text), **change)
    with pytest.raises(Exception) as caught:
        planner.fleet_plan_load(json.dumps(record), path)
    assert message in str(caught.value)


def test_plans_only_takes_the_plans_of_the_loaded_plans(planner, host_facts):
    """{host: {facts, plan}} (passthrough_plans, passthrough_other_plans) -> {host: plan}, in their order."""
    text, plan, facts = _written(planner, host_facts, policy=POLICY)
    loaded = {"zed": planner.plan_load(text, "/plans", "seed-v100", POLICY), "aa": {"facts": facts, "plan": plan}}
    assert planner.plans_only(loaded) == {"zed": plan, "aa": plan}
    assert list(planner.plans_only(loaded)) == ["zed", "aa"]
    assert planner.plans_only({}) == {}


@pytest.mark.parametrize("loaded, message", [
    ([], "passthrough_plans_only: the plans must be the loaded plans {host: {facts, plan}}"),
    ({"h": {"facts": {}}}, "passthrough_plans_only: host h: {'facts': {}} is not a loaded plan {facts, plan}"),
    ({"h": "x"}, "passthrough_plans_only: host h: 'x' is not a loaded plan {facts, plan}"),
])
def test_plans_only_refuses_other_shapes(planner, loaded, message):
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError, store  # pylint: disable=import-outside-toplevel
    with pytest.raises(planner.AnsibleFilterError) as caught:
        planner.plans_only(loaded)
    with pytest.raises(PlanError) as pure:
        store.plans_only(loaded)
    assert str(caught.value) == str(pure.value) and str(pure.value).startswith(message)
def test_the_fleet_is_the_plan_files_and_the_others_are_the_hosts_the_inventory_lacks(planner):
    # One <host>.json per GPU host in the plan directories every AWX job slice shares (roles/passthrough,
    # tasks/fleet.yml): this inventory holds gpu1 and gpu3, another slice gpu2 and gpu4.
    found = ["/plans/gpu3.json", "/plans/gpu2.json", "/plans/gpu1.json", "/other/gpu4.json", "/other/gpu2.json"]
    assert planner.fleet(found, ["localhost", "gpu1", "gpu3"]) == {
        "plan_files": ["/other/gpu2.json", "/other/gpu4.json", "/plans/gpu1.json", "/plans/gpu2.json",
                       "/plans/gpu3.json"],
        "hosts": ["gpu1", "gpu2", "gpu3", "gpu4"],
        "others": ["gpu2", "gpu4"],
        "other_plan_files": ["/other/gpu2.json", "/other/gpu4.json", "/plans/gpu2.json"]}
    assert planner.fleet([], ["gpu1"]) == {"plan_files": [], "hosts": [], "others": [], "other_plan_files": []}
    # A name with dots keeps them: only .json is the file's, the rest is the host's.
    assert planner.fleet(["/plans/gpu1.example.org.json"], [])["others"] == ["gpu1.example.org"]


@pytest.mark.parametrize("path, host", [("/plans/gpu1.json", "gpu1"), ("gpu1.json", "gpu1"),
                                        ("/plans/a.b.json", "a.b"), ("/plans/gpu1.txt", None), (None, None)])
def test_a_plan_files_host_is_its_name_less_json(planner, path, host):
    assert planner.plan_file_host(path) == host


@pytest.mark.parametrize("files, hosts, message", [
    (["/plans/gpu1.txt"], [], "passthrough_fleet: '/plans/gpu1.txt' is not a plan file (<host>.json)"),
    ("/plans/gpu1.json", [], "passthrough_fleet: the plan files and the inventory's hosts must be lists"),
    ([], None, "passthrough_fleet: the plan files and the inventory's hosts must be lists"),
])
def test_the_fleet_refuses_what_is_not_plan_files(planner, files, hosts, message):
    with pytest.raises(planner.AnsibleFilterError) as caught:
        planner.fleet(files, hosts)
    assert str(caught.value).startswith(message)


# The one loader's whole work (store.load_plans, which the passthrough_plans lookup calls; roles/passthrough
# tasks/load.yml): this run's record before the file, the file read only inside its absolute plan directory.
def _reader(files, reads):
    def read(path):
        reads.append(path)
        return files.get(path)
    return read


def test_load_plans_takes_this_runs_record_before_the_file(planner, host_facts):
    text, plan, facts = _written(planner, host_facts, policy=POLICY)
    record = planner.plan_record(plan, facts, POLICY)
    reads = []
    host_vars = {"seed-v100": {"passthrough_plan_dir": "/plans", "passthrough_policy": POLICY,
                               "_passthrough_plan_record": record},
                 "other": {"passthrough_plan_dir": "/plans/", "passthrough_policy": POLICY}}
    files = {"/plans/other.json": text.replace('"host": "seed-v100"', '"host": "other"')}
    loaded = store.load_plans(["seed-v100", "other"], host_vars, _reader(files, reads))
    assert loaded["sources"] == {"seed-v100": "run", "other": "file"}
    assert loaded["plans"]["seed-v100"] == planner.plan_load(text, "/plans", "seed-v100", POLICY)
    assert loaded["missing"] == {}
    assert reads == ["/plans/other.json"]


def test_load_plans_notes_a_missing_plan_only_when_asked(planner):
    host_vars = {"seed-v100": {"passthrough_plan_dir": "/plans"}}
    loaded = store.load_plans(["seed-v100"], host_vars, _reader({}, []), missing_ok=True)
    assert loaded == {"plans": {}, "sources": {}, "missing": {"seed-v100": "/plans/seed-v100.json"}}
    with pytest.raises(planner.PlanError, match="no plan file /plans/seed-v100.json"):
        store.load_plans(["seed-v100"], host_vars, _reader({}, []))


@pytest.mark.parametrize("host, plan_dir, message", [
    ("seed-v100", "plans", "is not an absolute path"),
    ("seed-v100", "", "passthrough_plan_dir is not set"),
    ("../etc", "/plans", "passthrough_plan_load: "),
    ("absent", "/plans", "'absent' is not a host of the inventory"),
])
def test_load_plans_reads_nothing_outside_an_absolute_plan_directory(planner, host, plan_dir, message):
    reads = []
    host_vars = {name: {"passthrough_plan_dir": plan_dir} for name in ("seed-v100", "../etc")}
    with pytest.raises(planner.PlanError, match=message):
        store.load_plans([host], host_vars, _reader({}, reads), missing_ok=True)
    assert reads == []


def test_the_lookup_reads_text_bytes_or_nothing(tmp_path):
    (tmp_path / "ok.json").write_text("{}", encoding="utf-8")
    (tmp_path / "latin.json").write_bytes(b"\xe9")
    assert lookup.read_plan_file(str(tmp_path / "ok.json")) == "{}"
    assert lookup.read_plan_file(str(tmp_path / "latin.json")) == b"\xe9"
    assert lookup.read_plan_file(str(tmp_path / "none.json")) is None
    with pytest.raises(Exception, match="is not text"):
        store.plan_load(lookup.read_plan_file(str(tmp_path / "latin.json")), str(tmp_path), "latin", {})


LOADER_RUN = """
import json, sys
from ansible.errors import AnsibleLookupError
from ansible.plugins.loader import init_plugin_loader, lookup_loader
init_plugin_loader([sys.argv[1]])
plugin = lookup_loader.get("open_gpu_cloud.toolkit.passthrough_plans")
hostvars = json.loads(sys.argv[2])
loaded, = plugin.run([["seed-v100"], "gone"], variables={"hostvars": hostvars}, missing_ok=True,
                     other_plan_files=[sys.argv[3]])
try:
    plugin.run(["gone"], variables={"hostvars": hostvars})
except AnsibleLookupError as exc:
    loaded["refused"] = str(exc)
print(json.dumps(loaded))
"""


def test_the_lookup_through_ansible_s_plugin_loader(tmp_path, planner, host_facts):
    """ansible-core's own loader (in a process of its own: its collection finder must come first) finds the lookup
    by its full name; its options come from the call; a plan error is the lookup's error, which the playbook's
    rescue reports."""
    text, _plan, _facts = _written(planner, host_facts, policy=POLICY)
    (tmp_path / "seed-v100.json").write_text(text, encoding="utf-8")
    (tmp_path / "retired.json").write_text(text.replace('"host": "seed-v100"', '"host": "retired"'), encoding="utf-8")
    hostvars = {name: {"passthrough_plan_dir": str(tmp_path), "passthrough_policy": POLICY}
                for name in ("seed-v100", "gone")}
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", LOADER_RUN, os.path.join(ROOT, "collections"), json.dumps(hostvars),
                           str(tmp_path / "retired.json")], capture_output=True, text=True, env=env, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded["sources"] == {"seed-v100": "file"} and loaded["missing"] == {"gone": f"{tmp_path}/gone.json"}
    assert list(loaded["others"]) == ["retired"]
    assert "no plan file" in loaded["refused"] and f"{tmp_path}/gone.json" in loaded["refused"]


# --------------------------------------------------------------------------- aliases a replaced card leaves behind

def _plan_of(*aliases):
    return {"host": "gpu-002", "aliases": [{"name": name, "product_id": "0000"} for name in aliases]}


def _file_of(plan, retired=None):
    record = store.plan_record(plan, {}, {})
    if retired:
        record["retired_aliases"] = retired
    return json.dumps(record, indent=4, sort_keys=True) + "\n"


def test_a_card_replaced_by_another_model_leaves_its_alias_retired_in_the_record():
    before = _file_of(_plan_of("a100-pcie-40gb", "tesla-t4"))
    record = store.plan_record(_plan_of("a100-pcie-40gb", "l4"), {}, {}, previous=before)
    assert record["retired_aliases"] == ["tesla-t4"]
    # The next plan keeps what the file had retired: the record, and so the file, does not change again.
    again = store.plan_record(_plan_of("a100-pcie-40gb", "l4"), {}, {}, previous=_file_of(_plan_of(
        "a100-pcie-40gb", "l4"), ["tesla-t4"]))
    assert again == record
    # The model put back is offered again, not retired.
    back = store.plan_record(_plan_of("a100-pcie-40gb", "tesla-t4"), {}, {},
                             previous=_file_of(_plan_of("a100-pcie-40gb", "l4"), ["tesla-t4"]))
    assert back["retired_aliases"] == ["l4"]
    # No file, an unreadable one, or a plan that keeps every alias: no key at all (the record is as before).
    for previous in (None, "", "{not json", "[]", json.dumps({"plan": "x"}), before):
        plain = store.plan_record(_plan_of("a100-pcie-40gb", "tesla-t4"), {}, {}, previous=previous)
        assert "retired_aliases" not in plain
    # The file's parsed content (a lookup that parsed the JSON) reads the same as its text.
    assert store.retired_aliases(_plan_of("l4"), json.loads(before)) == ["a100-pcie-40gb", "tesla-t4"]


def test_the_loader_hands_on_the_retired_aliases_and_the_fleet_names_their_hosts():
    text = _file_of(_plan_of("l4"), ["tesla-t4"])
    loaded = store.plan_load(text, "/plans", "gpu-002", {})
    assert loaded["retired_aliases"] == ["tesla-t4"]
    assert "retired_aliases" not in store.plan_load(_file_of(_plan_of("l4")), "/plans", "gpu-002", {})
    fleet = {"gpu-002": loaded,
             "gpu-005": {"facts": {}, "plan": _plan_of("l4"), "retired_aliases": ["tesla-t4", "tesla-v100"]},
             "gpu-001": {"facts": {}, "plan": _plan_of("tesla-v100")}}
    # tesla-v100 is still offered by gpu-001: not retired for the fleet.
    assert store.retired_alias_hosts(fleet) == {"tesla-t4": ["gpu-002", "gpu-005"]}
    with pytest.raises(store.PlanError, match="host gpu-005: retired_aliases 'tesla-t4' is not a list"):
        store.retired_alias_hosts({"gpu-005": {"facts": {}, "plan": _plan_of("l4"), "retired_aliases": "tesla-t4"}})


_NAMES = st.lists(st.sampled_from(["a100", "l4", "t4", "v100", "h100"]), unique=True, max_size=4)


@settings(max_examples=200, deadline=None)
@given(history=st.lists(_NAMES, min_size=1, max_size=6))
def test_retired_aliases_are_every_alias_ever_offered_less_those_offered_now(history):
    """Whatever models a host's slots held one plan after another, its record's retired aliases are exactly the
    aliases some earlier plan offered and the current one does not; writing the same plan again changes nothing."""
    previous = None
    for aliases in history:
        record = store.plan_record(_plan_of(*aliases), {}, {}, previous=previous)
        previous = json.dumps(record, indent=4, sort_keys=True) + "\n"
    ever = {name for aliases in history[:-1] for name in aliases}
    assert record.get("retired_aliases", []) == sorted(ever - set(history[-1]))
    assert store.plan_record(_plan_of(*history[-1]), {}, {}, previous=previous) == record


TRUSTED = {0: "root", 1000: "ogc"}


def _found(path, uid=1000, mode="0644", name="ogc"):
    return {"path": path, "uid": uid, "mode": mode, "pw_name": name}


def test_a_plan_file_another_user_could_have_written_is_refused_naming_owner_mode_and_fix():
    # The plan directory is the fleet's record: a file planted by another user would count in a percentage reboot
    # batch (more hosts rebooted at once) and reach Nova's device specs.
    found = [_found("/plans/gpu1.json"), _found("/plans/gpu2.json", uid=0, name="root"),
             _found("/plans/gpu9.json", uid=1001, name="mallory"), _found("/plans/gpu3.json", mode="0664")]
    with pytest.raises(store.PlanError) as caught:
        store.fleet(found, ["gpu1"], trusted=TRUSTED)
    message = str(caught.value)
    assert message.startswith(
        "passthrough_fleet: The plan file /plans/gpu3.json is owned by ogc, mode 0664: another user than this one could "
        "have written it (chmod go-w /plans/gpu3.json). The plan file /plans/gpu9.json is owned by mallory, mode 0644: "
        "another user than this one could have written it (chown ogc /plans/gpu9.json). The plan directory is the "
        "fleet's record"), message
    assert "nothing was read from it" in message and "gpu1.json" not in message and "gpu2.json" not in message
    # This user's and root's files, not writable by others, are the fleet.
    assert store.fleet(found[:2], ["gpu1"], trusted=TRUSTED)["hosts"] == ["gpu1", "gpu2"]
    # Paths alone carry no owner: not checked (the filter always passes find's results).
    assert store.fleet(["/plans/gpu9.json"], [], trusted=TRUSTED)["hosts"] == ["gpu9"]


@given(uid=st.integers(min_value=0, max_value=70000), mode=st.integers(min_value=0, max_value=0o7777))
@settings(max_examples=200, deadline=None)
def test_a_plan_file_is_trusted_exactly_when_a_trusted_user_owns_it_and_no_other_may_write_it(uid, mode):
    problems = store.untrusted_plan_files([_found("/plans/h.json", uid=uid, mode=f"{mode:04o}", name="x")], TRUSTED)
    trusted = uid in TRUSTED and not mode & 0o022
    assert (problems == []) == trusted
    if not trusted:
        (problem,) = problems
        assert "/plans/h.json" in problem and f"mode {mode:04o}" in problem
        assert ("chown ogc" in problem) == (uid not in TRUSTED) and ("chmod go-w" in problem) == bool(mode & 0o022)


@pytest.mark.parametrize("uid, mode", [(None, "0644"), ("1000", "0644"), (1000, "rw-r--r--"), (True, "0644")])
def test_a_plan_file_of_unknown_owner_or_mode_is_refused(uid, mode):
    (problem,) = store.untrusted_plan_files([_found("/plans/h.json", uid=uid, mode=mode)], TRUSTED)
    assert problem.startswith("The plan file /plans/h.json: its owner and mode are unknown")
