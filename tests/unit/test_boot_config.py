"""Unit and property tests for module_utils/boot_config.py (how the distributions build the default
entry's line and where an edit takes effect) and module_utils/host_state.py (pending steps, reboot
decisions). The shell's own reading of the files (bash sourcing them as grub-mkconfig does) is the
reference the model is checked against."""

import os
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.module_utils import boot_config as bc
from ansible.module_utils import host_state as hs
from ansible.module_utils import kernel_cmdline as kc

GRUB = "/etc/default/grub"


def bash_values(files):
    """GRUB_CMDLINE_LINUX and _DEFAULT after bash sources the texts in order, as grub-mkconfig does."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for index, (_, text) in enumerate(files):
            path = os.path.join(directory, "f%d" % index)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            paths.append(path)
        script = "".join('. "$%d"\n' % (i + 1) for i in range(len(paths)))
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
    with pytest.raises(bc.BootConfigError, match="no line assigns GRUB_CMDLINE_LINUX in /etc/default/grub"):
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
QUOTES = st.sampled_from(['"%s"', "'%s'"])


@st.composite
def layouts(draw):
    """/etc/default/grub with both variables and zero to two drop-ins assigning either, some appending."""
    grub = "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=%s\nGRUB_CMDLINE_LINUX=%s\n" % (
        draw(QUOTES) % " ".join(draw(ARGS)), draw(QUOTES) % " ".join(draw(ARGS)))
    files = [(GRUB, grub)]
    for index in range(draw(st.integers(0, 2))):
        variable = draw(st.sampled_from(bc.CMDLINE_VARIABLES))
        words = draw(ARGS)
        if draw(st.booleans()):
            text = '%s="$%s %s"\n' % (variable, variable, " ".join(words))
        else:
            text = "%s=%s\n" % (variable, draw(QUOTES) % " ".join(words))
        files.append(("/etc/default/grub.d/%d0-x.cfg" % (index + 1), "# drop-in\n" + text))
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
    with pytest.raises(hs.StateError, match="^/var/lib/x.json .*remove it to start afresh"):
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
