"""Unit tests for library/grub_cmdline.py: the pure editing functions and the module run end to end."""

import importlib.util
import io
import json
import os
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

LIBRARY = Path(__file__).resolve().parents[2] / "library" / "grub_cmdline.py"
_spec = importlib.util.spec_from_file_location("grub_cmdline", LIBRARY)
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)

VAR = "GRUB_CMDLINE_LINUX_DEFAULT"
MERGE = ["modprobe.blacklist", "rd.driver.pre"]
PLAN_ARGS = ["amd_iommu=on", "iommu=pt", "vfio-pci.ids=10de:1db4", "modprobe.blacklist=nouveau,nvidiafb"]


def edit(text, present=(), absent=(), merge=MERGE, variable=VAR):
    return gc.edit_text(text, variable, list(present), list(absent), list(merge))


def line_of(text, variable=VAR):
    return [line for line in text.splitlines() if line.startswith(variable + "=")][-1]


# --- quoting variants -------------------------------------------------------------------------

def test_double_quotes_kept_and_args_appended():
    out = edit('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n', PLAN_ARGS)
    assert out["line_after"] == ('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash amd_iommu=on iommu=pt '
                                 'vfio-pci.ids=10de:1db4 modprobe.blacklist=nouveau,nvidiafb"')
    assert out["text"] == out["line_after"] + "\n"


def test_single_quotes_kept():
    out = edit("GRUB_CMDLINE_LINUX_DEFAULT='quiet'\n", ["iommu=pt"])
    assert out["line_after"] == "GRUB_CMDLINE_LINUX_DEFAULT='quiet iommu=pt'"


def test_unquoted_single_word_gets_double_quotes_when_it_grows():
    out = edit("GRUB_CMDLINE_LINUX_DEFAULT=quiet\n", ["iommu=pt"])
    assert out["line_after"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"'


def test_unquoted_single_word_stays_unquoted_when_it_stays_one_word():
    out = edit("GRUB_CMDLINE_LINUX_DEFAULT=iommu=off\n", ["iommu=pt"], ["iommu=off"])
    assert out["line_after"] == "GRUB_CMDLINE_LINUX_DEFAULT=iommu=pt"


@pytest.mark.parametrize("value, expected", [
    ('""', 'GRUB_CMDLINE_LINUX_DEFAULT="iommu=pt intel_iommu=on"'),
    ("''", "GRUB_CMDLINE_LINUX_DEFAULT='iommu=pt intel_iommu=on'"),
    ("", 'GRUB_CMDLINE_LINUX_DEFAULT="iommu=pt intel_iommu=on"'),
])
def test_empty_values(value, expected):
    out = edit("GRUB_CMDLINE_LINUX_DEFAULT=%s\n" % value, ["iommu=pt", "intel_iommu=on"])
    assert out["before"] == []
    assert out["line_after"] == expected


def test_trailing_comment_leading_space_and_export_kept():
    text = '  export GRUB_CMDLINE_LINUX_DEFAULT="quiet"   # set by ops, ticket 42\n'
    out = edit(text, ["iommu=pt"])
    assert out["line_after"] == '  export GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"   # set by ops, ticket 42'


def test_escaped_kernel_quotes_and_shell_expansion_survive():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT acpi_osi=\\"!Windows 2012\\" quiet"\n'
    out = edit(text, ["iommu=pt"])
    # before/after are what the kernel gets (its quotes unescaped); the file keeps the shell escapes.
    assert out["before"] == ["$GRUB_CMDLINE_LINUX_DEFAULT", 'acpi_osi="!Windows 2012"', "quiet"]
    assert out["line_after"] == (
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT acpi_osi=\\"!Windows 2012\\" quiet iommu=pt"')


# --- the rest of the file ----------------------------------------------------------------------

GRUB_FILE = """# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
#GRUB_CMDLINE_LINUX_DEFAULT="nomodeset"
GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"
GRUB_CMDLINE_LINUX="console=ttyS0,115200n8 console=tty0"

# Uncomment to disable graphical terminal
#GRUB_TERMINAL=console
"""


def test_every_other_line_is_kept_byte_for_byte():
    out = edit(GRUB_FILE, PLAN_ARGS)
    before_lines = GRUB_FILE.splitlines()
    after_lines = out["text"].splitlines()
    assert len(before_lines) == len(after_lines)
    changed = [i for i, (a, b) in enumerate(zip(before_lines, after_lines)) if a != b]
    assert changed == [6]
    assert after_lines[5] == '#GRUB_CMDLINE_LINUX_DEFAULT="nomodeset"'


def test_other_variable_can_be_edited():
    out = edit(GRUB_FILE, ["intel_iommu=on"], variable="GRUB_CMDLINE_LINUX")
    assert out["line_after"] == 'GRUB_CMDLINE_LINUX="console=ttyS0,115200n8 console=tty0 intel_iommu=on"'
    assert line_of(out["text"]) == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"'


def test_only_commented_assignment_is_an_error():
    with pytest.raises(gc.GrubCmdlineError, match="no line assigns"):
        edit('#GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_TIMEOUT=5\n', ["iommu=pt"])


def test_similar_variable_name_is_not_matched():
    with pytest.raises(gc.GrubCmdlineError, match="no line assigns GRUB_CMDLINE_LINUX_DEFAULT"):
        edit('GRUB_CMDLINE_LINUX="quiet"\nGRUB_CMDLINE_LINUX_DEFAULT_X="a"\n', ["iommu=pt"])


def test_last_of_several_assignments_is_edited_with_a_warning():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="splash"\n'
    out = edit(text, ["iommu=pt"])
    assert out["text"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="splash iommu=pt"\n'
    assert out["warnings"] and "lines (1, 3)" in out["warnings"][0]


def test_missing_final_newline_is_not_added():
    out = edit('GRUB_CMDLINE_LINUX_DEFAULT="quiet"', ["iommu=pt"])
    assert out["text"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"'


def test_unclosed_quote_is_reported_with_the_line():
    with pytest.raises(gc.GrubCmdlineError, match=r'line 1 .*never closed'):
        edit('GRUB_CMDLINE_LINUX_DEFAULT="quiet\n', ["iommu=pt"])


# --- replacing, merging, never duplicating ------------------------------------------------------

def test_stale_values_of_the_same_key_are_replaced_in_place():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=off vfio-pci.ids=10de:1b80,10de:10f0 splash"\n'
    out = edit(text, ["intel_iommu=on", "vfio-pci.ids=10de:1db4"], ["intel_iommu=off"])
    assert out["after"] == ["quiet", "intel_iommu=on", "vfio-pci.ids=10de:1db4", "splash"]


def test_dash_and_underscore_spellings_are_one_key():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="vfio_pci.ids=10de:1b80 quiet vfio-pci.ids=10de:10f0"\n'
    out = edit(text, ["vfio-pci.ids=10de:1db4"])
    assert out["after"] == ["vfio_pci.ids=10de:1db4", "quiet"]


def test_duplicates_of_a_managed_key_collapse_into_one():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="iommu=pt quiet iommu=pt iommu=off"\n'
    out = edit(text, ["iommu=pt"], ["iommu=off"])
    assert out["after"] == ["iommu=pt", "quiet"]


def test_list_values_are_merged_not_replaced():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="modprobe.blacklist=radeon,nouveau quiet"\n'
    out = edit(text, ["modprobe.blacklist=nouveau,nvidiafb"])
    assert out["after"] == ["modprobe.blacklist=radeon,nouveau,nvidiafb", "quiet"]


def test_repeated_list_keys_merge_into_the_first():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="modprobe.blacklist=radeon quiet modprobe.blacklist=amdgpu,radeon"\n'
    out = edit(text, ["modprobe.blacklist=nouveau"])
    assert out["after"] == ["modprobe.blacklist=radeon,amdgpu,nouveau", "quiet"]


def test_present_list_items_given_twice_are_merged():
    out = edit('GRUB_CMDLINE_LINUX_DEFAULT=""\n', ["rd.driver.pre=vfio-pci", "rd.driver.pre=vfio_iommu_type1,vfio-pci"])
    assert out["after"] == ["rd.driver.pre=vfio-pci,vfio_iommu_type1"]


def test_flag_added_once_and_kept():
    out = edit('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n', ["quiet", "nomodeset"])
    assert out["after"] == ["quiet", "nomodeset"]


def test_unmanaged_operator_args_are_kept_even_when_repeated():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty0 console=ttyS0 quiet quiet"\n'
    out = edit(text, ["iommu=pt"])
    assert out["after"] == ["console=tty0", "console=ttyS0", "quiet", "quiet", "iommu=pt"]


@pytest.mark.parametrize("start", [
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash vfio-pci.ids=10de:1b80 intel_iommu=off"\n',
    "GRUB_CMDLINE_LINUX_DEFAULT=''\n",
    "GRUB_CMDLINE_LINUX_DEFAULT=quiet\n",
    'GRUB_CMDLINE_LINUX_DEFAULT="modprobe.blacklist=radeon iommu=pt iommu=pt"\n',
])
def test_repeated_runs_change_nothing_after_the_first(start):
    present = PLAN_ARGS + ["rd.driver.pre=vfio-pci"]
    absent = ["amd_iommu=off", "iommu=off", "intel_iommu=off"]
    first = edit(start, present, absent)
    second = edit(first["text"], present, absent)
    third = edit(second["text"], present, absent)
    assert second["text"] == first["text"] == third["text"]
    assert second["after"] == second["before"]
    for arg in present:
        key = arg.split("=")[0]
        assert sum(1 for a in first["after"] if a.split("=")[0].replace("_", "-") == key.replace("_", "-")) == 1


# --- absent -------------------------------------------------------------------------------------

def test_absent_key_value_removes_only_that_value():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="iommu=off quiet amd_iommu=off"\n'
    out = edit(text, [], ["iommu=off", "amd_iommu=on"])
    assert out["after"] == ["quiet", "amd_iommu=off"]


def test_absent_bare_key_removes_any_value_and_the_flag():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="nomodeset quiet pci=noaer nomodeset=1"\n'
    out = edit(text, [], ["nomodeset", "pci"])
    assert out["after"] == ["quiet"]


def test_absent_list_item_leaves_the_other_items():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="modprobe.blacklist=nouveau,radeon rd.driver.pre=nvidia"\n'
    out = edit(text, [], ["modprobe.blacklist=nouveau", "rd.driver.pre=nvidia"])
    assert out["after"] == ["modprobe.blacklist=radeon"]


@pytest.mark.parametrize("present, absent", [
    (["iommu=pt"], ["iommu"]),
    (["iommu=pt"], ["iommu=pt"]),
    (["modprobe.blacklist=nouveau"], ["modprobe.blacklist=nouveau"]),
    (["quiet"], ["quiet"]),
])
def test_present_and_absent_conflict_is_an_error(present, absent):
    with pytest.raises(gc.GrubCmdlineError, match="both present and absent"):
        edit('GRUB_CMDLINE_LINUX_DEFAULT=""\n', present, absent)


@pytest.mark.parametrize("present, message", [
    (["vfio-pci.ids=10de:1db4", "vfio_pci.ids=10de:1b80"], "both 'vfio-pci.ids=10de:1db4' and 'vfio_pci.ids=10de:1b80'"),
    (["intel_iommu=on", "intel_iommu=off"], "both intel_iommu=on and intel_iommu=off"),
])
def test_two_values_for_one_key_is_an_error(present, message):
    with pytest.raises(gc.GrubCmdlineError, match=message):
        edit('GRUB_CMDLINE_LINUX_DEFAULT=""\n', present)


# --- the module run end to end ------------------------------------------------------------------

def run_module(args, check_mode=False, diff=False):
    args = dict(args)
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = diff
    args.setdefault("_ansible_tmpdir", None)
    basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    basic._ANSIBLE_PROFILE = "legacy"
    buf = io.StringIO()
    with redirect_stdout(buf), pytest.raises(SystemExit) as exc:
        gc.main()
    result = json.loads(buf.getvalue())
    result["rc"] = exc.value.code
    return result


@pytest.fixture(autouse=True)
def not_the_controller(monkeypatch):
    """A module runs in its own process, never as the controller. Other test files import controller
    code (plugins), which flips this process-wide flag and would send module warnings to the
    controller's display instead of the module's result."""
    from ansible.module_utils import _internal

    monkeypatch.setattr(_internal, "is_controller", False)


@pytest.fixture
def root(tmp_path):
    (tmp_path / "etc" / "default").mkdir(parents=True)
    grub = tmp_path / "etc" / "default" / "grub"
    grub.write_text(GRUB_FILE.replace('"quiet splash"', '"quiet splash vfio-pci.ids=10de:1b80 intel_iommu=off"'))
    grub.chmod(0o640)
    return tmp_path


def test_module_changes_then_is_idempotent_with_backup_and_mode_kept(root):
    grub = root / "etc" / "default" / "grub"
    original = grub.read_text()
    args = dict(root=str(root), present=["intel_iommu=on", "iommu=pt", "vfio-pci.ids=10de:1db4"], absent=["iommu=off"])
    first = run_module(args)
    assert first["rc"] == 0 and first["changed"] is True
    assert first["line_after"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash vfio-pci.ids=10de:1db4 intel_iommu=on iommu=pt"'
    assert line_of(grub.read_text()) == first["line_after"]
    assert first["added"] == ["vfio-pci.ids=10de:1db4", "intel_iommu=on", "iommu=pt"]
    assert first["removed"] == ["vfio-pci.ids=10de:1b80", "intel_iommu=off"]
    assert Path(first["backup_file"]).read_text() == original
    assert stat.S_IMODE(grub.stat().st_mode) == 0o640
    assert not [p for p in grub.parent.iterdir() if p.name.startswith(".grub_cmdline.")]

    second = run_module(args)
    assert second["changed"] is False and "backup_file" not in second
    assert len(list(grub.parent.glob("grub.*~"))) == 1


def test_module_check_mode_writes_nothing_and_diff_shows_the_line(root):
    grub = root / "etc" / "default" / "grub"
    original = grub.read_bytes()
    mtime = grub.stat().st_mtime_ns
    result = run_module(dict(root=str(root), present=["iommu=pt"]), check_mode=True, diff=True)
    assert result["changed"] is True
    assert grub.read_bytes() == original and grub.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in grub.parent.iterdir()) == ["grub"]
    assert result["line_after"].endswith('intel_iommu=off iommu=pt"')
    assert result["diff"]["before"] == original.decode()
    assert line_of(result["diff"]["after"]) == result["line_after"]
    # The same computation as a real run:
    real = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert real["line_after"] == result["line_after"]


def test_module_backup_false_makes_no_copy(root):
    result = run_module(dict(root=str(root), present=["iommu=pt"], backup=False))
    assert result["changed"] is True and "backup_file" not in result
    assert sorted(p.name for p in (root / "etc" / "default").iterdir()) == ["grub"]


def test_module_missing_file_names_path_variable_and_fix(tmp_path):
    result = run_module(dict(root=str(tmp_path), present=["iommu=pt"]))
    assert result["failed"] is True
    assert str(tmp_path / "etc/default/grub") + " does not exist" in result["msg"]
    assert "GRUB_CMDLINE_LINUX_DEFAULT" in result["msg"] and "passthrough_host_grub_path" in result["msg"]


def test_module_missing_variable_names_it_and_writes_nothing(root):
    grub = root / "etc" / "default" / "grub"
    original = grub.read_bytes()
    result = run_module(dict(root=str(root), present=["iommu=pt"], variable="GRUB_CMDLINE_XEN"))
    assert result["failed"] is True
    assert "has no line assigning GRUB_CMDLINE_XEN" in result["msg"]
    assert 'GRUB_CMDLINE_XEN=""' in result["msg"] and "passthrough_host_grub_variable" in result["msg"]
    assert grub.read_bytes() == original


@pytest.mark.parametrize("bad", ["iommu=pt quiet", "", "=on", 'a="b c"', "x=$HOME"])
def test_module_rejects_arguments_that_are_not_one_plain_arg(root, bad):
    result = run_module(dict(root=str(root), present=[bad]))
    assert result["failed"] is True and "not one plain kernel argument" in result["msg"]


def test_module_reports_conflicts_with_path_and_variable(root):
    result = run_module(dict(root=str(root), present=["iommu=pt"], absent=["iommu"]))
    assert result["failed"] is True
    assert result["msg"].endswith("variable GRUB_CMDLINE_LINUX_DEFAULT: 'iommu' is both present and absent")


def test_module_warns_on_repeated_assignment(root):
    grub = root / "etc" / "default" / "grub"
    grub.write_text(grub.read_text() + 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet"\n')
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert result["changed"] is True
    assert "only the last one counts" in json.dumps(result["warnings"]), result["warnings"]
    assert grub.read_text().splitlines()[-1] == 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet iommu=pt"'


def test_module_plain_path_without_root(root):
    path = str(root / "etc" / "default" / "grub")
    result = run_module(dict(path=path, present=["iommu=pt"]))
    assert result["changed"] is True and result["path"] == path


def test_module_not_a_file(root):
    os.remove(root / "etc" / "default" / "grub")
    (root / "etc" / "default" / "grub").mkdir()
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert result["failed"] is True and "is not a regular file" in result["msg"]


# --- the editor and the planner read a line the same way (issue 12) --------------------------------

@pytest.mark.parametrize("value, line_after", [
    ("rd.driver.pre=nvme quiet", "rd.driver.pre=nvme,vfio-pci quiet iommu=pt vfio-pci.ids=10de:1db4"),
    ("vfio_pci.ids= quiet", "vfio_pci.ids=10de:1db4 quiet iommu=pt rd.driver.pre=vfio-pci"),
    ("intel_iommu=on,sm_on iommu=off", "intel_iommu=on,sm_on iommu=pt vfio-pci.ids=10de:1db4 rd.driver.pre=vfio-pci"),
])
def test_edited_line_is_what_the_planner_calls_done(value, line_after):
    from ansible.module_utils import kernel_cmdline as kc

    present = ["iommu=pt", "vfio-pci.ids=10de:1db4", "rd.driver.pre=vfio-pci"]
    absent = ["iommu=off", "intel_iommu=off", "amd_iommu=off"]
    out = edit(f'GRUB_CMDLINE_LINUX_DEFAULT="{value}"\n', present, absent)
    assert out["line_after"] == f'GRUB_CMDLINE_LINUX_DEFAULT="{line_after}"'
    assert kc.check(out["after"], present, absent) == []
