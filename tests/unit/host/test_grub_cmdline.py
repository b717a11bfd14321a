"""Unit tests for plugins/modules/grub_cmdline.py, run end to end on copies of the distributions' own boot files
(fixtures/distros): the edit lands where grub-mkconfig takes it, forbidden arguments leave every file,
what cannot be modelled is refused with the file and line, check mode writes nothing."""

import io
import json
import os
import shutil
import stat
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from ogc_testlib import collection_module

REPO = Path(__file__).resolve().parents[3]
DISTROS = REPO / "fixtures" / "distros"
gc = collection_module("grub_cmdline")

PLAN = ["iommu=pt", "vfio-pci.ids=10de:1db4", "rd.driver.pre=vfio-pci", "modprobe.blacklist=nouveau,nvidiafb"]
ABSENT = ["iommu=off", "amd_iommu=off"]


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
    """A module runs in its own process, never as the controller (see the other module tests)."""
    from ansible.module_utils import _internal

    monkeypatch.setattr(_internal, "is_controller", False)


def layout(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(DISTROS / name, root, symlinks=True)
    return root


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def bash_line(root, family):
    """The default entry's arguments as grub-mkconfig's shell sees them (independent of the model)."""
    script = ('lsb_release() { echo Debian; }; . "$1/etc/default/grub"; if [ "$2" = Debian ]; then '
              'for x in "$1"/etc/default/grub.d/*.cfg; do [ -e "$x" ] && . "$x"; done; fi; '
              'printf "%s %s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"')
    out = subprocess.run(["bash", "-c", script, "x", str(root), family], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, check=True).stdout
    return out.split()


def var_line(path, variable):
    return [line for line in path.read_text().splitlines() if line.startswith(variable + "=")][-1]


# --- every distribution layout, default variables ---------------------------------------------

@pytest.mark.parametrize("name, family, target", [
    ("debian12", "Debian", "etc/default/grub"),
    ("ubuntu2204-server", "Debian", "etc/default/grub"),
    ("ubuntu2404-server", "Debian", "etc/default/grub"),
    ("ubuntu2204-cloud", "Debian", "etc/default/grub.d/50-cloudimg-settings.cfg"),
    ("ubuntu2404-cloud", "Debian", "etc/default/grub.d/50-cloudimg-settings.cfg"),
    ("rocky9", "RedHat", "etc/default/grub"),
])
def test_default_variables_edit_where_it_takes_effect(tmp_path, name, family, target):
    root = layout(tmp_path, name)
    before = tree(root)
    first = run_module(dict(root=str(root), family=family, present=PLAN, absent=ABSENT, backup=False))
    assert first["rc"] == 0 and first["changed"] is True, first
    assert first["files"] == ["/" + target] and first["target"].startswith("/" + target + " line ")
    assert first["variable"] == ("GRUB_CMDLINE_LINUX" if family == "RedHat" else "GRUB_CMDLINE_LINUX_DEFAULT")
    after = tree(root)
    assert [k for k in after if after[k] != before.get(k)] == [target]
    # What grub-mkconfig's shell builds from the files now carries the plan, after the installed arguments.
    line = bash_line(root, family)
    assert line == first["after"] and line[-len(PLAN):] == PLAN
    assert line[:len(first["before"])] == first["before"]
    second = run_module(dict(root=str(root), family=family, present=PLAN, absent=ABSENT, backup=False))
    assert second["changed"] is False and tree(root) == after


def test_cloud_image_drop_in_gets_the_arguments_not_etc_default_grub(tmp_path):
    """Today's main edits /etc/default/grub, which the cloud image's drop-in overrides: no effect."""
    root = layout(tmp_path, "ubuntu2404-cloud")
    result = run_module(dict(root=str(root), present=["iommu=pt"], backup=False))
    assert var_line(root / "etc/default/grub.d/50-cloudimg-settings.cfg", "GRUB_CMDLINE_LINUX_DEFAULT") == (
        'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 iommu=pt"')
    assert (root / "etc/default/grub").read_bytes() == (DISTROS / "ubuntu2404-cloud/etc/default/grub").read_bytes()
    assert result["overridden"] == ["/etc/default/grub line 10"]
    assert "overrides it; the arguments went to the latter" in json.dumps(result["warnings"])
    assert "50-cloudimg-settings.cfg line 11" in json.dumps(result["warnings"])


def test_rocky_default_variable_needs_no_setting(tmp_path):
    """Rocky 9 has no GRUB_CMDLINE_LINUX_DEFAULT: the family's own variable is used."""
    root = layout(tmp_path, "rocky9")
    result = run_module(dict(root=str(root), family="RedHat", present=["intel_iommu=on"], backup=False))
    assert result["changed"] is True and result["variable"] == "GRUB_CMDLINE_LINUX"
    assert var_line(root / "etc/default/grub", "GRUB_CMDLINE_LINUX").endswith('rd.lvm.lv=rl/swap intel_iommu=on"')
    assert "GRUB_CMDLINE_LINUX_DEFAULT" not in (root / "etc/default/grub").read_text()


def test_rocky_ignores_debian_drop_ins(tmp_path):
    root = layout(tmp_path, "rocky9")
    (root / "etc/default/grub.d").mkdir()
    (root / "etc/default/grub.d/50-x.cfg").write_text('GRUB_CMDLINE_LINUX="iommu=off"\n')
    result = run_module(dict(root=str(root), family="RedHat", present=["iommu=pt"], absent=ABSENT, backup=False))
    assert result["sourced"] == ["/etc/default/grub"]
    assert (root / "etc/default/grub.d/50-x.cfg").read_text() == 'GRUB_CMDLINE_LINUX="iommu=off"\n'


def test_operator_arguments_in_the_other_variable_and_a_drop_in(tmp_path):
    """iommu=off in GRUB_CMDLINE_LINUX survived on main (only the other variable was edited)."""
    root = layout(tmp_path, "ubuntu2404-cloud-operator")
    result = run_module(dict(root=str(root), present=PLAN, absent=ABSENT, backup=False))
    assert result["changed"] is True
    assert var_line(root / "etc/default/grub", "GRUB_CMDLINE_LINUX") == 'GRUB_CMDLINE_LINUX="rd.driver.pre=nvme"'
    assert var_line(root / "etc/default/grub.d/60-operator.cfg", "GRUB_CMDLINE_LINUX_DEFAULT") == (
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT console=ttyS0,115200n8 vfio_pci.ids=10de:1db4 '
        'iommu=pt rd.driver.pre=vfio-pci modprobe.blacklist=nouveau,nvidiafb"')
    line = bash_line(root, "Debian")
    assert "iommu=off" not in line and "rd.driver.pre=nvme" in line and "vfio_pci.ids=10de:1b80" not in line
    assert line == result["after"]


def test_planned_key_overridden_later_in_the_line_is_removed_there(tmp_path):
    root = layout(tmp_path, "rocky9")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text() + 'GRUB_CMDLINE_LINUX_DEFAULT="vfio-pci.ids=10de:1b80 quiet"\n')
    result = run_module(dict(root=str(root), family="RedHat", present=["vfio-pci.ids=10de:1db4"], backup=False))
    assert var_line(grub, "GRUB_CMDLINE_LINUX_DEFAULT") == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"'
    assert bash_line(root, "RedHat")[-2:] == ["vfio-pci.ids=10de:1db4", "quiet"] == result["after"][-2:]


# --- symlinks and paths ------------------------------------------------------------------------

@pytest.mark.parametrize("absolute", [True, False])
def test_symlinked_grub_file_is_edited_at_its_target(tmp_path, absolute):
    root = layout(tmp_path, "debian12")
    (root / "etc/grub-site").mkdir()
    shutil.move(root / "etc/default/grub", root / "etc/grub-site/grub")
    os.symlink("/etc/grub-site/grub" if absolute else "../grub-site/grub", root / "etc/default/grub")
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert result["changed"] is True and result["files"] == ["/etc/grub-site/grub"]
    assert (root / "etc/default/grub").is_symlink()
    assert var_line(root / "etc/grub-site/grub", "GRUB_CMDLINE_LINUX_DEFAULT") == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"'
    assert Path(result["backups"][0]["path"]) == root / "etc/grub-site/grub"


@pytest.mark.parametrize("option", ["path", "dropin_dir"])
def test_relative_path_is_refused(tmp_path, option, monkeypatch):
    root = layout(tmp_path, "debian12")
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    result = run_module({"root": str(root), option: "etc/default/grub", "present": ["iommu=pt"]})
    assert result["failed"] is True and "is not an absolute path" in result["msg"]
    assert "passthrough_host_grub_" in result["msg"]
    assert tree(tmp_path) == before


# --- what the editor cannot model is refused with the file and line -------------------------------

@pytest.mark.parametrize("value, why", [
    ('"quiet "\'splash\'', "adjacent quoting"),
    ('"$(cat /etc/cmdline.d/x)"', "$(...) command substitution"),
    ('"`cat /etc/x`"', "backquoted command"),
    ('"quiet \\', "line continuation"),
    ('"quiet', "not closed on this line"),
    ('"quiet ${X:-a}"', "a $ is modelled only as a whole word"),
    ('"a" ; GRUB_TIMEOUT=1', "more than one command"),
])
def test_unmodelled_values_are_refused_with_file_and_line(tmp_path, value, why):
    root = layout(tmp_path, "ubuntu2404-cloud")
    cfg = root / "etc/default/grub.d/50-cloudimg-settings.cfg"
    text = cfg.read_text().replace('GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"',
                                   "GRUB_CMDLINE_LINUX_DEFAULT=" + value)
    cfg.write_text(text)
    before = tree(root)
    result = run_module(dict(root=str(root), present=["iommu=pt"]), check_mode=False)
    assert result["failed"] is True, result
    assert result["msg"].startswith("/etc/default/grub.d/50-cloudimg-settings.cfg line 11 (")
    assert why in result["msg"]
    assert tree(root) == before


def test_conditional_assignment_is_refused(tmp_path):
    root = layout(tmp_path, "debian12")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text() + 'if true; then GRUB_CMDLINE_LINUX="x"; fi\n')
    lineno = len(grub.read_text().splitlines())
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert result["failed"] is True and f"/etc/default/grub line {lineno} (if true" in result["msg"]
    assert "does not model" in result["msg"]


def test_other_variables_with_commands_are_left_to_the_shell(tmp_path):
    """GRUB_DISTRIBUTOR=`lsb_release ...` and "$(sed ...)" as shipped are not command-line variables."""
    for name, family in (("debian12", "Debian"), ("rocky9", "RedHat")):
        result = run_module(dict(root=str(layout(tmp_path, name)), family=family, present=["iommu=pt"]))
        assert result["rc"] == 0, result


# --- check mode, diff, backups, errors ----------------------------------------------------------

def test_check_mode_writes_nothing_and_diff_shows_every_file(tmp_path):
    root = layout(tmp_path, "ubuntu2404-cloud-operator")
    before = tree(root)
    mtimes = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    result = run_module(dict(root=str(root), present=PLAN, absent=ABSENT), check_mode=True, diff=True)
    assert result["changed"] is True
    assert tree(root) == before and {p: p.stat().st_mtime_ns for p in root.rglob("*")} == mtimes
    assert [d["before_header"] for d in result["diff"]] == ["/etc/default/grub", "/etc/default/grub.d/60-operator.cfg"]
    real = run_module(dict(root=str(root), present=PLAN, absent=ABSENT, backup=False))
    assert real["after"] == result["after"]
    for d in result["diff"]:
        assert (root / d["after_header"].lstrip("/")).read_text() == d["after"]


def test_state_file_is_reported_read_only_and_a_corrupt_one_refused(tmp_path):
    root = layout(tmp_path, "debian12")
    state = root / "var/lib/open-gpu-cloud/passthrough_host.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"pending": ["boot_config"], "reboot": None}))
    args = dict(root=str(root), present=["iommu=pt"], state_file="/var/lib/open-gpu-cloud/passthrough_host.json")
    result = run_module(args, check_mode=True)
    assert result["host_state"] == {"version": 2, "machine": "", "pending": ["boot_config"], "reboot": None,
                                    "generated_from": None, "inputs": {}}
    state.write_text(json.dumps({"pending": ["reboot_now"]}))
    before = tree(root)
    result = run_module(args)
    assert result["failed"] is True and result["changed"] is False
    assert "does not hold a passthrough_host state" in result["msg"] and tree(root) == before
    relative = run_module(dict(args, state_file="var/lib/state.json"))
    assert relative["failed"] is True
    assert "path (passthrough_host_state_file) 'var/lib/state.json' is not an absolute path" in relative["msg"]


def test_backup_and_mode_kept(tmp_path):
    root = layout(tmp_path, "debian12")
    grub = root / "etc/default/grub"
    grub.chmod(0o640)
    original = grub.read_text()
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert Path(result["backups"][0]["backup"]).read_text() == original
    assert stat.S_IMODE(grub.stat().st_mode) == 0o640
    assert not [p for p in grub.parent.iterdir() if p.name.startswith(".grub_cmdline.")]


def test_missing_file_names_path_variable_and_fix(tmp_path):
    result = run_module(dict(root=str(tmp_path), present=["iommu=pt"]))
    assert result["failed"] is True
    assert str(tmp_path / "etc/default/grub") + " does not exist" in result["msg"]
    assert "passthrough_host_grub_path" in result["msg"]


def test_missing_variable_names_it_and_writes_nothing(tmp_path):
    root = layout(tmp_path, "rocky9")
    before = tree(root)
    result = run_module(dict(root=str(root), family="RedHat", variable="GRUB_CMDLINE_LINUX_DEFAULT",
                             present=["iommu=pt"]))
    assert result["failed"] is True
    assert "no line assigns GRUB_CMDLINE_LINUX_DEFAULT" in result["msg"]
    assert "passthrough_host_grub_variable" in result["msg"] and tree(root) == before


@pytest.mark.parametrize("bad", ["iommu=pt quiet", "", "=on", "x=$HOME"])
def test_rejects_arguments_that_are_not_one_plain_arg(tmp_path, bad):
    result = run_module(dict(root=str(layout(tmp_path, "debian12")), present=[bad]))
    assert result["failed"] is True and "not one plain kernel argument" in result["msg"]


def test_conflicting_plan_is_refused(tmp_path):
    result = run_module(dict(root=str(layout(tmp_path, "debian12")), present=["iommu=pt"], absent=["iommu"]))
    assert result["failed"] is True and "both present and absent" in result["msg"]


def test_not_a_file(tmp_path):
    root = layout(tmp_path, "debian12")
    os.remove(root / "etc/default/grub")
    (root / "etc/default/grub").mkdir()
    result = run_module(dict(root=str(root), present=["iommu=pt"]))
    assert result["failed"] is True and "is not a regular file" in result["msg"]


# --- the boot-config tool's step: when it must run, written ahead ------------------------------

STATE = "/var/lib/open-gpu-cloud/passthrough_host.json"


def generate(root):
    """What update-grub makes of the files (tests/standins/simulate_boot_config.py, the sandboxes' stand-in)."""
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet\n")
    subprocess.run([sys.executable, str(REPO / "tests" / "standins" / "simulate_boot_config.py"), str(root / "calls.jsonl"), str(root),
                    "update-grub"], check=True)


def test_the_tool_runs_when_its_output_is_older_than_the_files_and_not_again(tmp_path):
    """A GRUB file edited by hand with the plan, grub.cfg never regenerated: the module says the tool must run (not
    stuck), and once it ran on these files (recorded in the state file), not again whatever its output says."""
    root = layout(tmp_path, "debian12")
    generate(root)
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace('GRUB_CMDLINE_LINUX_DEFAULT="quiet"',
                                             'GRUB_CMDLINE_LINUX_DEFAULT="quiet ' + " ".join(PLAN) + '"'))
    args = dict(root=str(root), present=PLAN, absent=ABSENT, state_file=STATE, backup=False)
    first = run_module(args)
    assert first["changed"] is False and first["needs"] == ["boot_config"]
    assert first["why"].startswith("what it generated lacks the arguments the GRUB files give")
    # Written ahead although no file changed: the tool's run is pending until it succeeds.
    assert json.loads((root / STATE.lstrip("/")).read_text())["pending"] == ["boot_config"]
    state = json.loads((root / STATE.lstrip("/")).read_text())
    state.update(pending=[], generated_from=first["files_fingerprint"])   # the tool ran, the role recorded it
    (root / STATE.lstrip("/")).write_text(json.dumps(state))
    again = run_module(args)
    assert again["needs"] == [] and again["why"] == ""
    generate(root)
    assert run_module(dict(args, state_file=""))["needs"] == []           # its output carries them now


def test_the_step_is_written_ahead_of_the_first_file(tmp_path, monkeypatch):
    root = layout(tmp_path, "ubuntu2404-cloud")
    seen = []
    real_move = basic.AnsibleModule.atomic_move

    def move(self, src, dest, *args, **kwargs):
        seen.append((dest, json.loads((root / STATE.lstrip("/")).read_text())["pending"]))
        return real_move(self, src, dest, *args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "atomic_move", move)
    result = run_module(dict(root=str(root), present=PLAN, absent=ABSENT, state_file=STATE, backup=False))
    assert result["changed"] is True and result["needs"] == ["boot_config"] and result["why"] == "the GRUB files change"
    assert seen and all(pending == ["boot_config"] for _dest, pending in seen)
    check = layout(tmp_path / "check", "ubuntu2404-cloud")
    assert run_module(dict(root=str(check), present=PLAN, state_file=STATE), check_mode=True)["needs"] == ["boot_config"]
    assert not (check / STATE.lstrip("/")).exists()                       # check mode writes nothing


def test_credentials_in_the_files_are_masked_in_results_and_diffs(tmp_path):
    root = layout(tmp_path, "debian12")
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace('GRUB_CMDLINE_LINUX=""',
                                             'GRUB_CMDLINE_LINUX="netroot=iscsi:ogc:Zq8-pw@10.0.0.5::3260::iqn.x"'))
    result = run_module(dict(root=str(root), present=PLAN, backup=False), diff=True)
    assert result["changed"] is True and "Zq8-pw" not in json.dumps(result)
    assert "netroot=iscsi:ogc:********@10.0.0.5::3260::iqn.x" in result["before"]
    assert "Zq8-pw" in grub.read_text()                                  # the file itself is the operator's


def test_a_host_booting_otherwise_is_refused_before_anything_is_written(tmp_path):
    for extra, words in ((("etc/kernel/cmdline", "root=/dev/sda1 ro\n"),),
                         "kernel-install / systemd-boot, which takes the kernel command line from /etc/kernel/cmdline"), \
                        ((("efi/EFI/Linux/debian-6.1.efi", "MZ"),), "unified kernel images"), \
                        ((("etc/kernel/install.conf", "layout=uki\n"),), "kernel-install (/etc/kernel/install.conf sets "
                                                                          "layout=uki)"), \
                        ((("sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f",
                           b"\x06\x00\x00\x00" + "systemd-boot 252.30".encode("utf-16-le") + b"\x00\x00"),),
                         "the running system was booted by it: LoaderInfo systemd-boot 252.30"):
        root = layout(tmp_path / str(len(words)), "debian12")
        for rel, content in extra:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(content if isinstance(content, bytes) else content.encode())
        before = tree(root)
        result = run_module(dict(root=str(root), present=PLAN, state_file=STATE))
        assert result["failed"] is True and result["msg"].startswith("this host does not boot through GRUB's defaults")
        assert words in result["msg"] and "iommu=pt" in result["msg"] and tree(root) == before
        assert run_module(dict(root=str(root), present=PLAN, boot_loader="grub", backup=False))["changed"] is True
    # GRUB 2.12 sets LoaderInfo too, naming itself; RHEL's /etc/kernel/cmdline is grub2-mkconfig's own.
    root = layout(tmp_path / "grub-bli", "debian12")
    efivar = root / "sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
    efivar.parent.mkdir(parents=True)
    efivar.write_bytes(b"\x06\x00\x00\x00" + "GRUB 2.12".encode("utf-16-le"))
    assert run_module(dict(root=str(root), present=PLAN, backup=False))["changed"] is True
    assert run_module(dict(root=str(layout(tmp_path, "rocky9")), family="RedHat", present=PLAN, backup=False))["rc"] == 0


def test_rhel_arguments_only_in_the_bls_entries_are_refused_before_the_rewrite_drops_them(tmp_path):
    root = layout(tmp_path, "rocky9")
    entry = next((root / "boot/loader/entries").glob("*el9_3.x86_64.conf"))
    entry.write_text(entry.read_text().replace("rd.lvm.lv=rl/swap $tuned_params",
                                               "rd.lvm.lv=rl/swap console=ttyS1,115200 $tuned_params"))
    before = tree(root)
    result = run_module(dict(root=str(root), family="RedHat", present=PLAN, absent=["iommu=off"]))
    assert result["failed"] is True and tree(root) == before
    assert result["msg"].startswith("grub2-mkconfig --update-bls-cmdline would drop arguments that boot entries have "
                                    "on their own: /boot/loader/entries/" + entry.name + " has console=ttyS1,115200")
    assert "Add them to GRUB_CMDLINE_LINUX in /etc/default/grub" in result["msg"]
    # An argument the plan removes anyway (iommu=off) is no reason to refuse: the rewrite is meant to drop it.
    entry.write_text(entry.read_text().replace(" console=ttyS1,115200", " iommu=off"))
    assert run_module(dict(root=str(root), family="RedHat", present=PLAN, absent=["iommu=off"], backup=False))["rc"] == 0


def test_the_override_warning_comes_with_the_edit_not_on_every_run(tmp_path):
    from ansible.module_utils.common import warnings  # pylint: disable=import-outside-toplevel

    root = layout(tmp_path, "ubuntu2404-cloud")
    first = run_module(dict(root=str(root), present=PLAN, absent=ABSENT, backup=False))
    assert first["changed"] is True and "overrides it; the arguments went to the latter" in json.dumps(first["warnings"])
    warnings._global_warnings.clear()  # pylint: disable=protected-access - each real module run is a new process
    again = run_module(dict(root=str(root), present=PLAN, absent=ABSENT, backup=False))
    assert again["changed"] is False and again["overridden"] == first["overridden"]
    assert "overrides it" not in json.dumps(again.get("warnings", []))
    # A drop-in that appends to the value ($NAME) does not override it: no warning at all.
    operator = layout(tmp_path, "ubuntu2404-cloud-operator")
    result = run_module(dict(root=str(operator), present=PLAN, absent=ABSENT, backup=False))
    assert "/etc/default/grub.d/50-cloudimg-settings.cfg line" not in " ".join(result["overridden"])
