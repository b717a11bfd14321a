"""The tests' shared harness, tests/ogc_testlib.py, and the rules that keep it the one way to do its jobs:

- every test runs ansible-playbook through run_playbook or start_playbook (the toolkit venv's program, the
  project's ansible.cfg, no colour); a test that needs another environment or a wrapper passes it to them (env=,
  prefix=), none starts the program itself;
- every test writes its inventory through write_inventory (a simulated fleet of several files: the fleet builder,
  tests/helpers/fleet/fleet_inventory.py)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import yaml

from ogc_testlib import LOCAL_HOST, ROOT, ansible_env, json_report, run_playbook, words, write_inventory

# Ways a Python file starts ansible-playbook on its own: an argv that opens with it, its path built beside an
# interpreter, a call with it as the first argument, the library's constant inside an argv.
STARTS_PLAYBOOK = [
    re.compile(r"""\[\s*(?:ANSIBLE_PLAYBOOK\b|["']ansible-playbook["'])"""),
    re.compile(r"""["']ansible-playbook["']\s*\)"""),
    re.compile(r"""/\s*["']ansible-playbook["']"""),
    re.compile(r"""\(\s*["']ansible-playbook["']\s*,"""),
    re.compile(r"""\bANSIBLE_PLAYBOOK\s*,"""),
]
LIBRARY = Path(ROOT) / "tests" / "ogc_testlib.py"
FLEET_BUILDER = Path(ROOT) / "tests" / "helpers" / "fleet" / "fleet_inventory.py"
# An inventory's top written by hand, as a Python literal.
BUILDS_INVENTORY = re.compile(r"""\{\s*["']all["']\s*:\s*\{""")


def python_files():
    """The Python files of the tests: tests/ and the molecule scenarios' verifiers and helpers."""
    files = sorted(Path(ROOT, "tests").rglob("*.py")) + sorted(Path(ROOT, "molecule").rglob("*.py"))
    return [path for path in files if "__pycache__" not in path.parts]


def starts_playbook(text):
    return [pattern.pattern for pattern in STARTS_PLAYBOOK if pattern.search(text)]


@pytest.mark.parametrize("line", [
    'proc = subprocess.run(["ansible-playbook", "-i", inv, "site.yml"])',
    'cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory)]',
    'PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")',
    'subprocess.run([str(Path(PY).with_name("ansible-playbook")), "-i", inv])',
    'proc = ansible("ansible-playbook", "-i", inv, "site.yml")',
    'subprocess.Popen(["unshare", "sh", "-c", script, control, ANSIBLE_PLAYBOOK, PLAYBOOK])',
])
def test_the_scan_sees_each_way_a_test_started_it_before(line):
    assert starts_playbook(line), line


def test_no_test_starts_ansible_playbook_but_through_the_library():
    files = python_files()
    assert LIBRARY in files and len(files) > 50, "the scan found too few files to mean anything"
    offenders = {str(path.relative_to(ROOT)): starts_playbook(path.read_text(encoding="utf-8"))
                 for path in files if path not in (LIBRARY, Path(__file__))}
    offenders = {path: found for path, found in offenders.items() if found}
    assert not offenders, ("these files start ansible-playbook themselves; run it through "
                           f"ogc_testlib.run_playbook or start_playbook (env=, prefix=, cwd=): {offenders}")


def test_the_environment_names_the_project_config_and_drops_what_is_asked(monkeypatch):
    monkeypatch.setenv("OS_CLOUD", "somewhere")
    env = ansible_env(OS_CLOUD=None, EXTRA="1")
    assert env["ANSIBLE_CONFIG"] == str(Path(ROOT) / "ansible.cfg") and env["ANSIBLE_NOCOLOR"] == "1"
    assert "OS_CLOUD" not in env and env["EXTRA"] == "1"
    # The venv's programs come first on PATH, once: a PATH that already starts with them is left as it is.
    path = ansible_env()["PATH"].split(os.pathsep)
    assert path[0] == os.path.dirname(sys.executable) and ansible_env(base=ansible_env())["PATH"] == os.pathsep.join(path)
    # A base replaces this process's environment; the project's settings still come on top, then the overrides.
    assert ansible_env(base={"PATH": "/bin"}, ANSIBLE_CONFIG="/elsewhere.cfg")["ANSIBLE_CONFIG"] == "/elsewhere.cfg"


def test_a_run_reports_its_result_and_the_json_callback_document(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.debug:\n        msg: hello there\n")
    proc = run_playbook("-i", "localhost,", "-c", "local", play, timeout=120,
                        env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json_report(proc.stdout)
    assert doc["stats"]["localhost"]["failures"] == 0
    assert doc["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"] == "hello there"
    assert json_report("no document here\n") is None
    assert words("a  b\n   c") == "a b c"


def test_a_log_file_takes_both_streams(tmp_path):
    log = tmp_path / "run.log"
    with open(log, "w", encoding="utf-8") as handle:
        proc = run_playbook("-i", "localhost,", tmp_path / "absent.yml", stdout=handle, timeout=120)
    assert proc.returncode != 0 and proc.stdout is None
    assert "absent.yml" in log.read_text(encoding="utf-8")


def test_a_prefix_runs_in_front():
    proc = run_playbook("--version", prefix=["sh", "-c", 'echo PREFIXED; exec "$@"', "sh"], timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("PREFIXED\nansible-playbook"), proc.stdout + proc.stderr


def test_no_test_writes_an_inventory_but_through_the_library():
    offenders = [str(path.relative_to(ROOT)) for path in python_files()
                 if path not in (LIBRARY, FLEET_BUILDER, Path(__file__))
                 and BUILDS_INVENTORY.search(path.read_text(encoding="utf-8"))]
    assert not offenders, f"these files write an inventory by hand; use ogc_testlib.write_inventory: {offenders}"


def test_an_inventory_holds_what_it_is_given(tmp_path):
    path = write_inventory(tmp_path / "inventory.yml", {"gpu1": {"x": 1}}, {"y": 2}, groups={"control": {"ctl": {}}},
                           hosts={"localhost": {}})
    assert yaml.safe_load(path.read_text()) == {"all": {
        "children": {"gpu_hosts": {"hosts": {"gpu1": {"x": 1}}}, "control": {"hosts": {"ctl": {}}}},
        "hosts": {"localhost": {}}, "vars": dict(LOCAL_HOST, y=2)}}
    # JSON by its suffix; without local, no connection for every host; an empty group is left out.
    path = write_inventory(tmp_path / "inventory.json", {}, hosts={"localhost": LOCAL_HOST}, local=False)
    assert yaml.safe_load(path.read_text()) == {"all": {"hosts": {"localhost": LOCAL_HOST}}}
