"""Unit and property tests for plugins/module_utils/host/boot_config.py (how the distributions build the default
entry's line and where an edit takes effect) and plugins/module_utils/host/state.py (pending steps, reboot
decisions). The shell's own reading of the files (bash sourcing them as grub-mkconfig does) is the
reference the model is checked against."""

import json
import os
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_config as bc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import state as hs
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline as kc

GRUB = "/etc/default/grub"


def bash_values(files):
    """GRUB_CMDLINE_LINUX and _DEFAULT after bash sources the texts in order, as grub-mkconfig does."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for index, (_, text) in enumerate(files):
            path = os.path.join(directory, f"f{index}")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            paths.append(path)
        script = "".join(f'. "${i + 1}"\n' for i in range(len(paths)))
        script += 'printf "%s\\n%s\\n" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"\n'
        out = subprocess.run(["bash", "-c", script, "x"] + paths, capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}).stdout
    linux, default = out.split("\n")[:2]
    return linux.split(), default.split()


# --- examples ---------------------------------------------------------------------------------

def test_source_order_debian_includes_drop_ins_in_glob_order_redhat_does_not():
    dropins = ["/etc/default/grub.d/50-cloudimg-settings.cfg", "/etc/default/grub.d/40-force-partuuid.cfg",
               "/etc/default/grub.d/README"]
    assert bc.source_order("Debian", GRUB, dropins) == [
        GRUB, "/etc/default/grub.d/40-force-partuuid.cfg", "/etc/default/grub.d/50-cloudimg-settings.cfg"]
    assert bc.source_order("RedHat", GRUB, dropins) == [GRUB]
    with pytest.raises(bc.BootConfigError, match="OS family 'Suse' is not supported"):
        bc.source_order("Suse", GRUB, [])


def test_default_variable_follows_the_family():
    assert bc.default_variable("Debian") == "GRUB_CMDLINE_LINUX_DEFAULT"
    assert bc.default_variable("RedHat") == "GRUB_CMDLINE_LINUX"


def test_evaluate_expands_earlier_values_like_the_shell():
    files = [(GRUB, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'),
             ("/d/50.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1"\n'),
             ("/d/90.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT sysctl.kernel.watchdog_thresh=60"\n'
                           "export GRUB_CMDLINE_LINUX='rd.driver.pre=nvme'  # site\n")]
    values, assignments = bc.evaluate(files)
    assert values["GRUB_CMDLINE_LINUX_DEFAULT"] == ["console=tty1", "sysctl.kernel.watchdog_thresh=60"]
    assert bc.kernel_args(values) == ["rd.driver.pre=nvme", "console=tty1", "sysctl.kernel.watchdog_thresh=60"]
    assert [a.where for a in assignments][-1] == "/d/90.cfg line 2"
    linux, default = bash_values(files)
    assert linux + default == bc.kernel_args(values)


def test_plan_edit_keeps_references_and_quoting():
    files = [(GRUB, "GRUB_CMDLINE_LINUX='iommu=off quiet'\nGRUB_CMDLINE_LINUX_DEFAULT=splash\n"),
             ("/d/90.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} a=1"  # x\n')]
    out = bc.plan_edit(files, "GRUB_CMDLINE_LINUX_DEFAULT", ["iommu=pt"], ["iommu=off"])
    assert out["texts"][GRUB] == "GRUB_CMDLINE_LINUX='quiet'\nGRUB_CMDLINE_LINUX_DEFAULT=splash\n"
    assert out["texts"]["/d/90.cfg"] == 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT a=1 iommu=pt"  # x\n'
    assert out["after"] == ["quiet", "splash", "a=1", "iommu=pt"]
    # The drop-in appends to /etc/default/grub's value ($NAME): it does not override it.
    assert out["overridden"] == []
    replaced = files + [("/d/95.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="b=2"\n')]
    assert bc.plan_edit(replaced, "GRUB_CMDLINE_LINUX_DEFAULT", ["iommu=pt"], [])["overridden"] == [
        "/etc/default/grub line 2", "/d/90.cfg line 1"]


def test_plan_edit_refuses_a_variable_that_is_not_a_command_line():
    with pytest.raises(bc.BootConfigError, match="GRUB_CMDLINE_XEN is not a kernel command-line variable"):
        bc.plan_edit([(GRUB, "")], "GRUB_CMDLINE_XEN", ["iommu=pt"], [])


def test_plan_edit_names_the_files_when_the_variable_is_never_assigned():
    with pytest.raises(bc.VariableNotAssigned, match="no line assigns GRUB_CMDLINE_LINUX in /etc/default/grub"):
        bc.plan_edit([(GRUB, "GRUB_TIMEOUT=5\n")], "GRUB_CMDLINE_LINUX", ["iommu=pt"], [])


def test_grub_cfg_default_entry_and_bls_entry():
    cfg = ("set default=0\nmenuentry 'Ubuntu' --class ubuntu {\n\trecordfail\n"
           "\tlinux\t/boot/vmlinuz-6.8.0-48-generic root=PARTUUID=2a9e1c5d-01 ro console=tty1 iommu=pt $vt_handoff\n}\n"
           "menuentry 'Ubuntu (recovery)' {\n\tlinux /boot/vmlinuz root=x ro single\n}\n")
    args = bc.grub_cfg_default_args(cfg)
    assert args == ["root=PARTUUID=2a9e1c5d-01", "ro", "console=tty1", "iommu=pt", "$vt_handoff"]
    assert bc.readback_problems([("cfg", args)], ["iommu=pt"], ["iommu=off"]) == []
    assert bc.readback_problems([("cfg", args)], ["amd_iommu=on"], []) == ["cfg lacks amd_iommu=on"]
    with pytest.raises(bc.BootConfigError, match="no menu entry with a linux line"):
        bc.grub_cfg_default_args("set default=0\n")
    entry = bc.bls_entry("title R\nversion 5.14\nlinux /vmlinuz-5.14\noptions root=/dev/x ro iommu=pt $tuned_params\n",
                         "/boot/loader/entries/a.conf")
    assert entry["options"] == ["root=/dev/x", "ro", "iommu=pt", "$tuned_params"]


@pytest.mark.parametrize("line, why", [
    ('GRUB_CMDLINE_LINUX="a"\'b\'', "adjacent quoting"),
    ('GRUB_CMDLINE_LINUX="$(x)"', "command substitution"),
    ("GRUB_CMDLINE_LINUX=`x`", "unquoted value with quotes"),
    ('GRUB_CMDLINE_LINUX="a\\', "line continuation"),
    ("[ -n x ] && GRUB_CMDLINE_LINUX=a", "does not model"),
    ('GRUB_CMDLINE_LINUX="a=\\"b c"', "double quote"),
])
def test_refused_lines_name_file_and_line(line, why):
    with pytest.raises(bc.BootConfigError) as exc:
        bc.parse_file("/d/x.cfg", "# c\n" + line + "\n")
    assert str(exc.value).startswith("/d/x.cfg line 2 (") and why in str(exc.value)


# --- properties: any operator layout, any plan -------------------------------------------------

NAMES = st.sampled_from(["quiet", "splash", "iommu", "amd_iommu", "intel_iommu", "vfio-pci.ids", "vfio_pci.ids",
                         "rd.driver.pre", "modprobe.blacklist", "console", "nomodeset", "rd.lvm.lv"])
VALUES = st.sampled_from([None, "on", "off", "pt", "on,sm_on", "10de:1db4", "10de:1b80", "nvme", "nouveau",
                          "nvme,vfio-pci", "ttyS0,115200n8", "rl/root"])
ARGS = st.lists(st.builds(lambda n, v: n if v is None else n + "=" + v, NAMES, VALUES), max_size=6)
PLANS = st.sampled_from([
    (["iommu=pt", "vfio-pci.ids=10de:1db4", "rd.driver.pre=vfio-pci", "modprobe.blacklist=nouveau,nvidiafb"],
     ["iommu=off", "amd_iommu=off"]),
    (["intel_iommu=on", "iommu=pt", "vfio-pci.ids=10de:1db4"], ["iommu=off", "intel_iommu=off", "vfio-pci.ids=10de:1b80"]),
    (["amd_iommu=on"], ["vfio-pci.ids", "amd_iommu=off", "iommu=off"]),
])
QUOTES = st.sampled_from(['"{}"', "'{}'"])


@st.composite
def layouts(draw):
    """/etc/default/grub with both variables and zero to two drop-ins assigning either, some appending."""
    default = draw(QUOTES).format(" ".join(draw(ARGS)))
    linux = draw(QUOTES).format(" ".join(draw(ARGS)))
    grub = f"GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT={default}\nGRUB_CMDLINE_LINUX={linux}\n"
    files = [(GRUB, grub)]
    for index in range(draw(st.integers(0, 2))):
        variable = draw(st.sampled_from(bc.CMDLINE_VARIABLES))
        words = draw(ARGS)
        if draw(st.booleans()):
            text = f'{variable}="${variable} {" ".join(words)}"\n'
        else:
            text = f"{variable}={draw(QUOTES).format(' '.join(words))}\n"
        files.append((f"/etc/default/grub.d/{index + 1}0-x.cfg", "# drop-in\n" + text))
    return files


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), PLANS, st.sampled_from(bc.CMDLINE_VARIABLES))
def test_property_edit_takes_effect_keeps_the_rest_and_is_idempotent(files, plan, variable):
    present, absent = plan
    out = bc.plan_edit(files, variable, present, absent)
    edited = [(path, out["texts"].get(path, text)) for path, text in files]
    values, _ = bc.evaluate(edited)
    line = bc.kernel_args(values)
    assert line == out["after"]
    assert kc.check(line, present, absent) == []
    # Every operator argument the plan does not forbid or override survives.
    planned = {kc.param_key(a) for a in present}
    for arg in out["before"]:
        if kc.check([arg], [], absent) == [] and kc.param_key(arg) not in planned:
            assert arg in line
    # The shell reads the edited files the same way.
    linux, default = bash_values(edited)
    assert linux + default == line
    again = bc.plan_edit(edited, variable, present, absent)
    assert again["changes"] == [] and again["texts"] == {}


@settings(max_examples=100, deadline=None)
@given(layouts())
def test_property_model_reads_files_as_bash_does(files):
    values, _ = bc.evaluate(files)
    linux, default = bash_values(files)
    assert values["GRUB_CMDLINE_LINUX"] == linux and values["GRUB_CMDLINE_LINUX_DEFAULT"] == default


# --- host_state ---------------------------------------------------------------------------------

def test_state_pending_survives_a_failed_step_and_clears_on_success():
    state = hs.load(None, "/s")
    marked = hs.update(state, pending_add=["initramfs"])
    assert marked["pending"] == ["initramfs"]
    # The tool failed: nothing clears it; the next run reads it back from the file.
    reread = hs.load(hs.dump(marked), "/s")
    assert reread["pending"] == ["initramfs"]
    assert hs.update(reread, pending_remove=["initramfs"])["pending"] == []
    with pytest.raises(hs.StateError, match="unknown step 'grub'"):
        hs.update(state, pending_add=["grub"])


@pytest.mark.parametrize("text", ["{", "[]", '{"pending": ["x"]}', '{"reboot": 3}'])
def test_corrupt_state_file_names_the_file_and_the_fix(text):
    with pytest.raises(hs.StateError, match="^/var/lib/x.json .*remove /var/lib/x.json to start afresh: the next run then "
                                            "repeats the initramfs and boot-config steps once"):
        hs.load(text, "/var/lib/x.json")


def test_reboot_decision_refuses_a_second_reboot_for_the_same_configuration():
    fp = hs.fingerprint([["root=x", "ro", "iommu=pt"]], ["kernel command line lacks iommu=pt"])
    state = hs.update(hs.empty(), record_reboot={"boot_id": "boot-1", "fingerprint": fp})
    assert hs.reboot_decision(hs.empty(), "boot-1", fp)[0] is True
    assert hs.reboot_decision(state, "boot-1", fp)[0] is True          # the reboot has not happened
    allowed, reason = hs.reboot_decision(state, "boot-2", fp)
    assert allowed is False and "already rebooted (from boot boot-1, now boot boot-2)" in reason
    changed = hs.fingerprint([["root=x", "ro", "iommu=pt", "amd_iommu=on"]], ["kernel command line lacks iommu=pt"])
    assert hs.reboot_decision(state, "boot-2", changed)[0] is True      # something changed
    assert hs.update(state, clear_reboot=True)["reboot"] is None


# --- refusals: exactly the constructs the editor cannot prove, named by file and line ------------------------------

# Shell the editor must read without refusing (nothing in it can change the command-line variables), as shipped
# files and operators write it; and shell it cannot prove, each with the line (0-based, within the piece) that the
# refusal must name. {V} is a command-line variable.
PROVABLE = [
    "# a comment", "", "GRUB_TIMEOUT=5", "export GRUB_TERMINAL=console",
    "GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`",
    "GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${NAME:-Ubuntu} ) 2>/dev/null || echo Ubuntu`",
    "GRUB_DISTRIBUTOR=\"$(sed 's, release .*$,,g' /etc/system-release)\"",
    "if [ -e /etc/gpu-node ]; then\n  GRUB_TIMEOUT=10\nfi",
    'GRUB_SAVED="$GRUB_CMDLINE_LINUX"', 'GRUB_BACKGROUND="a\nGRUB_CMDLINE_LINUX=not-an-assignment"',
    "true; GRUB_GFXMODE=auto", "echo configured >/dev/null",
]
UNPROVABLE = [
    (". /etc/default/grub.local", 0), ("source /etc/default/grub.local", 0),
    ('if [ -e /etc/gpu-node ]; then\n  {V}="iommu=off"\nfi', 1), ('[ -e /etc/gpu-node ] && {V}="iommu=off"', 0),
    ('for x in a; do\n  {V}="$x"\ndone', 1), ('f() {{\n  {V}="iommu=off"\n}}', 1), ('eval "$EXTRA_ARGS"', 0),
    ("unset {V}", 0), ('{V}+=" iommu=off"', 0), ('{V}="$(cat /etc/kernel-args)"', 0), ("{V}=`cat /etc/x`", 0),
    ('{V}="quiet "\'splash\'', 0), ('GRUB_TIMEOUT=5; {V}="quiet"', 0), ("[ -e /x ] && return", 0),
    ('X=${{{V}:=iommu=off}}', 0), ('{V}="quiet \\\nsplash"', 0),
]


@st.composite
def layouts_with_shell(draw):
    """Layouts as ``layouts`` draws them, with pieces of other shell between the lines: ``(files, refusable)``,
    ``refusable`` the (path, line) of each piece the editor cannot prove."""
    files, refusable = [], set()
    for path, text in draw(layouts()):
        lines = text.splitlines()
        out = []
        for line in lines + [None]:
            for _ in range(draw(st.integers(0, 1))):
                if draw(st.integers(0, 3)) == 0:
                    piece, at = draw(st.sampled_from(UNPROVABLE))
                    piece = piece.format(V=draw(st.sampled_from(bc.CMDLINE_VARIABLES)))
                    refusable.add((path, len(out) + 1 + at))
                else:
                    piece = draw(st.sampled_from(PROVABLE))
                out += piece.split("\n")
            if line is not None:
                out.append(line)
        files.append((path, "\n".join(out) + "\n"))
    return files, refusable


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts_with_shell(), PLANS, st.sampled_from(bc.CMDLINE_VARIABLES))
def test_property_every_refusal_is_justified_and_every_provable_file_is_edited(case, plan, variable):
    """The editor refuses exactly the files holding a construct it cannot prove, naming that construct's file and
    line; a file without one it edits, the shell reading the result as the model does. An editor that refuses too
    much fails, and so does one that edits what it cannot prove."""
    files, refusable = case
    present, absent = plan
    event("holds a construct the editor cannot prove" if refusable else "provable")
    try:
        out = bc.plan_edit(files, variable, present, absent)
    except bc.BootConfigError as exc:
        named = str(exc).split(" (", 1)[0]
        assert refusable, f"refused a provable layout: {exc}"
        assert any(named == f"{path} line {line}" for path, line in refusable), (str(exc), sorted(refusable))
        return
    assert not refusable, f"edited a layout holding {sorted(refusable)}"
    edited = [(path, out["texts"].get(path, text)) for path, text in files]
    linux, default = bash_values(edited)
    assert linux + default == out["after"] and kc.check(out["after"], present, absent) == []


def test_refusals_name_the_construct_and_the_fix():
    cases = {
        'GRUB_CMDLINE_LINUX="a"\n. /etc/default/grub.local\n':
            ("line 2 (. /etc/default/grub.local): sources another file", "move what it sets into /etc/default/grub"),
        'if [ -e /x ]; then\n  GRUB_CMDLINE_LINUX="b"\nfi\n':
            ("line 2 (GRUB_CMDLINE_LINUX=\"b\"): GRUB_CMDLINE_LINUX is assigned inside a compound command",
             "make it a plain assignment on a line of its own"),
        'GRUB_CMDLINE_LINUX="netroot=iscsi:u:pw@h::3260::iqn"\neval "$X"\n': ("line 2 (eval \"$X\"): runs eval", ""),
        'GRUB_CMDLINE_LINUX="netroot=iscsi:u:pw@h::3260::iqn" ; eval x\n':
            ("line 1 (GRUB_CMDLINE_LINUX=\"netroot=iscsi:u:********@h::3260::iqn\" ; eval x)", ""),
        "X='open\n": ("line 1 (X='open): a single quote opened on this line is never closed", "close it"),
        'GRUB_CMDLINE_LINUX+=" x"\n': ("line 1 (GRUB_CMDLINE_LINUX+=\" x\"): GRUB_CMDLINE_LINUX+= (appending", ""),
    }
    for text, (words, fix) in cases.items():
        with pytest.raises(bc.BootConfigError) as exc:
            bc.parse_file("/etc/default/grub", text)
        assert str(exc.value).startswith("/etc/default/grub " + words.split(" (", 1)[0]) and words in str(exc.value)
        assert fix in str(exc.value) and ":pw@" not in str(exc.value)


# --- why a generated configuration lacks the plan: the cause and its fix -------------------------------------------

def test_diagnosis_names_the_true_cause():
    present, absent = ["iommu=pt"], ["iommu=off"]
    sources = {"GRUB_CMDLINE_LINUX": "/etc/default/grub line 5", "GRUB_CMDLINE_LINUX_DEFAULT": "/etc/default/grub line 4"}
    lacks = ["/boot/grub/grub.cfg default entry lacks iommu=pt"]
    given_by_files = ["quiet", "iommu=pt"]

    def cause(expected, state):
        return bc.diagnose(lacks, expected, sources, present, absent, "/boot/grub/grub.cfg", state, "update-grub")

    pending, text = cause(given_by_files, {"pending": ["boot_config"]})
    assert pending == "tool_pending" and "has not completed since the GRUB files were changed" in text
    files, text = cause(["quiet"], {"pending": [], "generated_from": bc.inputs_fingerprint(["quiet"])})
    assert files == "files" and "The GRUB files themselves do not give them" in text and "lacks iommu=pt" in text
    not_run, text = cause(given_by_files, {"pending": [], "generated_from": bc.inputs_fingerprint(["quiet"])})
    assert not_run == "tool_not_run" and "but update-grub has not run since they changed" in text
    assert cause(given_by_files, None)[0] == "tool_not_run"               # nothing recorded: not known to have run
    override, text = cause(given_by_files, {"pending": [], "generated_from": bc.inputs_fingerprint(given_by_files)})
    assert override == "override" and "something outside the files overrides them" in text
    assert all(t.startswith("the boot configuration the tool generated does not carry the planned arguments: "
                            "/boot/grub/grub.cfg default entry lacks iommu=pt. ")
               for _c, t in (cause(given_by_files, None), cause(["quiet"], None)))


def test_bls_arguments_the_rewrite_would_drop():
    entries = [("/e/a.conf", ["root=/dev/x", "ro", "quiet", "console=ttyS1", "$tuned_params", "iommu=off", "iommu=nopt"]),
               ("/e/a-debug.conf", ["root=/dev/x", "ro", "systemd.log_level=debug"]),
               ("/e/b.conf", ["root=/dev/x", "ro", "quiet", "iommu=pt"])]
    assert bc.bls_dropped(entries, ["quiet", "iommu=pt"], ["iommu=pt"], ["iommu=off"]) == [("/e/a.conf", ["console=ttyS1"])]


def test_state_is_written_ahead_durably_and_records_what_the_tool_generated_from(tmp_path):
    path = "/var/lib/open-gpu-cloud/passthrough_host.json"
    state = hs.write_ahead(str(tmp_path), path, ["initramfs"])
    real = tmp_path / path.lstrip("/")
    assert state["pending"] == ["initramfs"] and json.loads(real.read_text())["pending"] == ["initramfs"]
    before = real.stat().st_mtime_ns
    hs.write_ahead(str(tmp_path), path, ["initramfs"])                     # pending already: nothing written
    assert real.stat().st_mtime_ns == before and not list(real.parent.glob(".host_state.*"))
    done = hs.update(hs.read(str(tmp_path), path)[0], pending_remove=["initramfs"], generated_from="sha256:x")
    assert done["generated_from"] == "sha256:x" and hs.load(hs.dump(done), path) == done
    assert hs.load('{"pending": [], "reboot": null, "version": 1}', path)["generated_from"] is None  # older files
    with pytest.raises(hs.StateError, match="generated_from: a string or null"):
        hs.load('{"pending": [], "generated_from": 3}', path)
    (tmp_path / "file").write_text("")
    with pytest.raises(hs.StateError, match="^cannot write /var/lib/x.json: "):
        hs.save(str(tmp_path / "file" / "x.json"), hs.empty(), "/var/lib/x.json")


def test_other_boot_mechanisms_are_found_and_grubs_own_files_are_not(tmp_path):
    from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import boot_files as bf
    (tmp_path / "etc/kernel").mkdir(parents=True)
    (tmp_path / "etc/kernel/cmdline").write_text("root=/dev/x ro\n")
    assert bf.other_boot_mechanisms(str(tmp_path), "RedHat") == []       # grub2-mkconfig --update-bls-cmdline's own
    assert bf.other_boot_mechanisms(str(tmp_path), "Debian")[0].startswith("kernel-install / systemd-boot")
    (tmp_path / "etc/kernel/install.conf").write_text("layout=grub\n")
    assert len(bf.other_boot_mechanisms(str(tmp_path), "Debian")) == 1
