"""The tests mirror the code (tests/README.md): a unit test of a collection concern lives under tests/unit/<concern>/,
and tests/ holds no test file outside the folders the README names."""

from __future__ import annotations

from pathlib import Path

from ogc_testlib import COLLECTION, ROOT

TESTS = Path(ROOT) / "tests"
CONCERNS = sorted(p.name for p in (Path(COLLECTION) / "plugins" / "module_utils").iterdir()
                  if p.is_dir() and p.name != "__pycache__")
UNIT_FOLDERS = {*CONCERNS, "kolla", "scripts", "harness"}
INTEGRATION_FOLDERS = {"passthrough", "host", "rollout", "coordination", "nova", "cloud", "ops", "site", "collection",
                       "testcloud", "realkernel"}


def test_files(top):
    return sorted(p for p in (TESTS / top).rglob("test_*.py") if "__pycache__" not in p.parts)


test_files.__test__ = False


def test_every_unit_test_is_in_its_concern_s_folder_or_a_project_rule():
    folders = {p.parent.name for p in test_files("unit") if p.parent != TESTS / "unit"}
    assert folders <= UNIT_FOLDERS, f"unit test folders the README does not name: {folders - UNIT_FOLDERS}"
    # A test at the top of tests/unit is a rule over the whole project, not a test of one concern's code.
    for path in test_files("unit"):
        if path.parent == TESTS / "unit":
            text = path.read_text(encoding="utf-8")
            named = [c for c in CONCERNS if f"plugins/module_utils/{c}/" in text.split('"""')[1]]
            assert not named, f"{path.name} tests plugins/module_utils/{named[0]}/: move it to tests/unit/{named[0]}/"


def test_every_integration_test_is_in_an_area_folder():
    loose = [p.name for p in test_files("integration") if p.parent == TESTS / "integration"]
    assert not loose, f"integration tests outside an area folder (tests/README.md): {loose}"
    folders = {p.relative_to(TESTS / "integration").parts[0] for p in test_files("integration")}
    assert folders <= INTEGRATION_FOLDERS, f"integration folders the README does not name: {folders - INTEGRATION_FOLDERS}"


def test_the_readme_names_every_folder():
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    for folder in sorted(UNIT_FOLDERS - set(CONCERNS)):
        assert f"unit/{folder}/" in readme, folder
    for folder in sorted(INTEGRATION_FOLDERS - {"realkernel"}):
        assert f"`{folder}/`" in readme or f"integration/{folder}/" in readme, folder
    for concern in CONCERNS:
        assert f"`{concern}`" in readme, concern


def test_a_test_imports_another_test_file_only_from_its_own_folder():
    """pytest puts each test file's folder on the path: an import of a test file in another folder works only by
    the order in which the folders were collected. Shared helpers go to tests/ogc_testlib.py instead."""
    wrong = []
    for top in ("unit", "integration"):
        for path in test_files(top):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith(("from test_", "import test_")):
                    name = line.split()[1].split(".")[0]
                    if not (path.parent / f"{name}.py").is_file():
                        wrong.append(f"{path.relative_to(TESTS)}: {line.strip()}")
    assert not wrong, wrong


def test_no_two_test_files_share_a_name():
    """pytest imports a test file by its name alone (rootdir import mode, no packages under tests/): a second file of
    the same name elsewhere fails to collect in a run of every test, though each passes in its own tier."""
    seen = {}
    for path in test_files("."):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, f"test files sharing a name (rename one): {shared}"
