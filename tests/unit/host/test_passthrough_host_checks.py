"""plugins/filter/passthrough_host_checks.py: the passthrough_host role's refusals of its variables and of a plan
the host cannot take (the integration test test_passthrough_host_faults.py runs them through the role)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ogc_testlib import ROOT, load_source, collection_plugin

checks = collection_plugin("filter", "passthrough_host_checks")

GOOD_VARS = {
    "passthrough_host_root": "/",
    "passthrough_host_grub_variable": "",
    "passthrough_host_reboot_timeout": 1800,
    "passthrough_host_boot_config_command": [],
    "passthrough_host_initramfs_command": [],
    "passthrough_host_reboot_command": [],
    "passthrough_host_grub_path": "/etc/default/grub",
    "passthrough_host_grub_dropin_dir": "/etc/default/grub.d",
    "passthrough_host_state_file": "/var/lib/open-gpu-cloud/passthrough_host.json",
    "passthrough_host_modprobe_file": "/etc/modprobe.d/vfio.conf",
    "passthrough_host_blacklist_file": "/etc/modprobe.d/blacklist-passthrough.conf",
    "passthrough_host_modules_load_file": "/etc/modules-load.d/vfio.conf",
    "passthrough_host_bind_script": "/usr/local/sbin/vfio-pci-bind",
    "passthrough_host_boot_config_output": "",
    "passthrough_host_bmc_address": "",
    "passthrough_host_bmc_username": "",
    "passthrough_host_bmc_password": "",
}


def var_errors(family="Debian", **changes):
    return checks.var_errors(dict(GOOD_VARS, **changes), "gpu1", family=family, supported=["Debian", "RedHat"])


# The passthrough_rollout role's drain variables, as its defaults set them.
GOOD_ROLLOUT_VARS = {
    "passthrough_rollout_drain_cloud": "",
    "passthrough_rollout_drain_clouds_yaml": "",
    "passthrough_rollout_drain_timeout": 1800,
    "passthrough_rollout_nova_host": "gpu1",
}


def rollout_errors(**changes):
    return checks.rollout_var_errors(dict(GOOD_ROLLOUT_VARS, **changes), "gpu1")


def test_the_defaults_pass():
    assert var_errors() == []
    assert var_errors(family="RedHat") == []


@pytest.mark.parametrize("changes", [
    {"passthrough_host_root": "srv/gpu1"},
    {"passthrough_host_root": ["/"]},
    {"passthrough_host_grub_variable": "GRUB_CMDLINE"},
    {"passthrough_host_reboot_timeout": 0},
    {"passthrough_host_reboot_timeout": "soon"},
    {"passthrough_host_reboot_timeout": True},      # a boolean is not a number of seconds
    {"passthrough_host_boot_config_command": "update-grub"},
    {"passthrough_host_reboot_command": {"cmd": "reboot"}},
])
def test_bad_role_variables_name_every_variable_and_the_fix(changes):
    errors = var_errors(**changes)
    assert len(errors) == 1 and errors[0].startswith("gpu1: passthrough_host_root (")
    assert "the *_command variables lists of arguments (e.g. [update-grub]), not strings." in errors[0]


def test_relative_paths_are_named_each():
    errors = var_errors(passthrough_host_modprobe_file="etc/modprobe.d/vfio.conf",
                        passthrough_host_boot_config_output="boot/grub/grub.cfg")
    assert errors == ["gpu1: passthrough_host_modprobe_file (etc/modprobe.d/vfio.conf) "
                      "passthrough_host_boot_config_output (boot/grub/grub.cfg) is not an absolute path. Give every "
                      "passthrough_host_* path as it is on the host, starting with / (e.g. /etc/default/grub); the "
                      "role puts passthrough_host_root in front of it."]


def test_unsupported_or_unknown_os_family():
    assert var_errors(family="Suse")[0].startswith("gpu1: OS family Suse is not supported (only Debian, RedHat).")
    assert var_errors(family="")[0].startswith("gpu1: OS family unknown is not supported")


def test_bmc_without_credentials_and_drain_without_a_timeout():
    bmc = var_errors(passthrough_host_bmc_address="10.0.0.5", passthrough_host_bmc_username="admin")
    assert bmc == ["gpu1: passthrough_host_bmc_address is set (10.0.0.5) but passthrough_host_bmc_username or "
                   "passthrough_host_bmc_password is empty: put both in the host's vaulted variables, or unset "
                   "passthrough_host_bmc_address to skip the firmware phase."]
    assert var_errors(passthrough_host_bmc_address="10.0.0.5", passthrough_host_bmc_username="admin",
                      passthrough_host_bmc_password="s3cret") == []
    drain = rollout_errors(passthrough_rollout_drain_cloud="ogc", passthrough_rollout_drain_timeout=-1)
    assert drain[0].startswith("gpu1: passthrough_rollout_drain_timeout (-1) must be a positive number of seconds")
    assert rollout_errors(passthrough_rollout_drain_cloud="ogc", passthrough_rollout_nova_host="")[0].endswith(
        "passthrough_rollout_nova_host () the host's name in Nova (openstack compute service list).")
    # Without a drain cloud the drain settings are not read.
    assert rollout_errors(passthrough_rollout_drain_timeout=0) == []


def test_the_rollout_s_old_variable_names_are_refused_naming_the_new_ones():
    assert rollout_errors(passthrough_host_drain_cloud="ogc") == [
        "gpu1: passthrough_host_drain_cloud is no longer read: the passthrough_rollout role's variables carry its own "
        "prefix. Rename it in the inventory (passthrough_host_drain_cloud -> passthrough_rollout_drain_cloud), then "
        "run this play again."]
    both = rollout_errors(passthrough_host_reboot_batch=2, passthrough_host_nova_host="gpu-1")
    assert both[0].startswith("gpu1: passthrough_host_nova_host, passthrough_host_reboot_batch are no longer read")
    assert both[0].endswith("Rename them in the inventory (passthrough_host_nova_host -> passthrough_rollout_nova_host, "
                            "passthrough_host_reboot_batch -> passthrough_rollout_reboot_batch), then run this play "
                            "again.")
    # Unset (None, as tasks/check.yml passes an undefined one): nothing to refuse.
    assert rollout_errors(**{name: None for name in checks.RENAMED}) == []


def test_every_new_name_is_a_variable_of_the_rollout_and_no_old_one_is():
    specs = yaml.safe_load((Path(ROOT) / "roles" / "passthrough_rollout" / "meta" / "argument_specs.yml").read_text())
    declared = {name for entry in specs["argument_specs"].values() for name in entry.get("options", {})}
    assert set(checks.RENAMED.values()) <= declared
    assert not set(checks.RENAMED) & declared
    check = (Path(ROOT) / "roles" / "passthrough_rollout" / "tasks" / "check.yml").read_text()
    assert all(f"'{old}': {old} | default(none)" in check for old in checks.RENAMED)


def test_every_problem_is_reported_at_once():
    errors = var_errors(family="Suse", passthrough_host_root="x", passthrough_host_state_file="var/state.json",
                        passthrough_host_bmc_address="bmc")
    assert len(errors) == 4 and all(e.startswith("gpu1: ") for e in errors)


def test_a_password_is_never_in_a_message():
    errors = var_errors(passthrough_host_bmc_address="bmc", passthrough_host_bmc_password="hunter2-Secret",
                        passthrough_host_root="x")
    assert errors and not any("hunter2-Secret" in e for e in errors)


PLAN = {"selected": [{"address": "0000:27:00.0"}], "vfio_devices": ["0000:27:00.0"], "excluded": [], "notes": [],
        "kernel_args_absent": ["iommu=off"]}
FACTS = {"virtualization": "svm", "cpu_vendor": "amd", "cpu_model": "AMD EPYC 7302", "iommu_enabled": True,
         "kernel_cmdline": ["ro", "quiet"]}


def preflight(plan=None, facts=None, **kwargs):
    return checks.preflight_errors(dict(PLAN, **(plan or {})), dict(FACTS, **(facts or {})), "gpu1", **kwargs)


def test_a_ready_host_passes():
    assert preflight() == []


def test_no_virtualization_names_the_cpu_and_its_flag():
    amd = preflight(facts={"virtualization": None})
    assert amd[0].startswith("gpu1: the AMD EPYC 7302 shows no svm flag in /proc/cpuinfo")
    intel = preflight(facts={"virtualization": None, "cpu_vendor": "intel", "cpu_model": None,
                             "kernel_cmdline": ["intel_iommu=on"]})
    assert intel[0].startswith("gpu1: the CPU shows no vmx flag in /proc/cpuinfo")
    # A bare-metal host (hypervisor false, or facts stored before the hypervisor fact) keeps the firmware advice.
    assert preflight(facts={"virtualization": None, "hypervisor": False}) == amd


def test_a_virtual_machine_without_nested_virtualization_is_not_sent_to_its_firmware():
    # An AMD guest with no IOMMU: one message, the VM's; the firmware advice of the IOMMU check is not added.
    guest = preflight(plan={"reboot_required": True}, facts={"virtualization": None, "hypervisor": True,
                                                             "iommu_enabled": False})
    assert guest == [
        "gpu1: this host is itself a virtual machine: the AMD EPYC 7302 shows the hypervisor flag and no svm flag "
        "in /proc/cpuinfo (its hypervisor gives it no nested virtualization), and it shows no IOMMU (no "
        "/sys/kernel/iommu_groups, no /sys/class/iommu unit). A GPU passed into a VM cannot be passed on to Nova's "
        "guests unless its hypervisor offers nested virtualization and a virtual IOMMU, so nothing is written and the "
        "host is not rebooted (a reboot would not give it nested virtualization). Use bare-metal hosts for "
        "gpu_hosts: remove this host from the gpu_hosts group (or, where its hypervisor can, give the VM nested "
        "virtualization (svm) and a virtual IOMMU, then run this play again)."]
    # With an IOMMU and nothing to reboot for, the message says neither.
    quiet = preflight(facts={"virtualization": None, "hypervisor": True})[0]
    assert "shows no IOMMU" not in quiet and "rebooted" not in quiet and "nothing is written. Use" in quiet
    # Expecting no GPU does not make a VM a host for Nova's guests.
    assert len(preflight(facts={"virtualization": None, "hypervisor": True}, expect_no_gpus=True)) == 1


def test_a_virtual_machine_with_nested_virtualization_but_no_iommu_is_told_of_its_hypervisor():
    errors = preflight(facts={"hypervisor": True, "iommu_enabled": False})
    assert len(errors) == 1 and "a reboot cannot change that" in errors[0]
    assert errors[0].endswith(
        "This host is itself a virtual machine (the hypervisor flag in /proc/cpuinfo): its IOMMU can only be a virtual "
        "one that its hypervisor offers. Give the VM a virtual IOMMU there, or use a bare-metal host for gpu_hosts "
        "(remove this one from the group), then run this play again.")
    assert "firmware setup" not in errors[0]
    # An Intel guest whose line lacks intel_iommu=on is let through: a virtual VT-d shows only once it is asked for.
    assert preflight(facts={"hypervisor": True, "iommu_enabled": False, "cpu_vendor": "intel"}) == []


@pytest.mark.parametrize("facts, refused", [
    ({"iommu_enabled": False}, True),                                     # AMD, nothing turns it off: firmware
    ({"iommu_enabled": False, "kernel_cmdline": ["amd_iommu=off"]}, False),   # the reboot removes it
    ({"iommu_enabled": False, "cpu_vendor": "intel"}, False),             # the reboot adds intel_iommu=on
    ({"iommu_enabled": False, "cpu_vendor": "intel", "kernel_cmdline": ["intel_iommu=on"]}, True),
    # Read as the kernel reads the line: options and the name's -/_ spelling count.
    ({"iommu_enabled": False, "cpu_vendor": "intel", "kernel_cmdline": ["intel_iommu=on,sm_on"]}, True),
    ({"iommu_enabled": False, "cpu_vendor": "intel", "kernel_cmdline": ["intel-iommu=off,sm_on"]}, False),
    ({"iommu_enabled": False, "kernel_cmdline": ["amd_iommu=off,fullflush"]}, False),
    # A line the model cannot read is not blamed on the firmware: the GRUB edit names what is wrong with it.
    ({"iommu_enabled": False, "kernel_cmdline": ['foo="bar']}, False),
])
def test_an_iommu_a_reboot_cannot_switch_on_is_refused(facts, refused):
    errors = preflight(facts=facts)
    assert bool(errors) == refused
    if refused:
        assert "the IOMMU is inactive (no /sys/kernel/iommu_groups) and a reboot cannot change that" in errors[0]


DELL = {"virtualization": {"ProcVirtualization": "Enabled"}, "iommu": {}, "sriov": {"SriovGlobalEnable": "Enabled"}}
SUPERMICRO = {"virtualization": {"SVMMode": "Enabled"}, "iommu": {"IOMMU": "Enabled"},
              "sriov": {"SR_IOVSupport": "Enabled"}}


@pytest.mark.parametrize("purposes, changes, enables", [
    (SUPERMICRO, {}, []),
    (SUPERMICRO, {"SVMMode": "Enabled"}, ["virtualization"]),
    (SUPERMICRO, {"IOMMU": "Enabled"}, ["iommu"]),
    (SUPERMICRO, {"SR_IOVSupport": "Enabled"}, []),
    (SUPERMICRO, {"SVMMode": "Enabled", "IOMMU": "Enabled"}, ["iommu", "virtualization"]),
    # Dell's table has no IOMMU attribute: ProcVirtualization switches VT-d / AMD-Vi as well.
    (DELL, {"ProcVirtualization": "Enabled"}, ["iommu", "virtualization"]),
    (DELL, {"SriovGlobalEnable": "Enabled"}, []),
    ({}, {"SVMMode": "Enabled"}, []),
    (None, None, []),
])
def test_what_the_staged_bios_attributes_switch_on(purposes, changes, enables):
    assert checks.bios_enables(purposes, changes) == enables


def test_what_staged_bios_attributes_switch_on_is_not_refused_as_off():
    # SVM off now, staged on the BMC: the reboot's power cycle applies it (roles/passthrough_host firmware.yml).
    assert preflight(facts={"virtualization": None}, firmware_enables=["virtualization"]) == []
    # The AMD IOMMU off in the firmware: no refusal once the firmware's IOMMU attribute is staged; still one for SVM.
    off = {"virtualization": None, "iommu_enabled": False}
    assert preflight(facts=off, firmware_enables=["iommu", "virtualization"]) == []
    only_iommu = preflight(facts=off, firmware_enables=["iommu"])
    assert len(only_iommu) == 1 and "shows no svm flag" in only_iommu[0]
    # A virtual machine is refused as one whatever is staged (it has no BMC of its own to stage anything on).
    assert preflight(facts={"virtualization": None, "hypervisor": True}, firmware_enables=["virtualization"])


def test_a_plan_selecting_nothing_is_refused_unless_expected():
    empty = {"selected": [], "vfio_devices": [], "notes": ["IOMMU off"], "excluded": [{"reason": "audio"}]}
    assert preflight(plan=empty)[0].startswith(
        "gpu1: the plan selects no device for passthrough (IOMMU off; audio). If this host is meant to have no GPU")
    assert "(no display device found)" in preflight(plan=dict(empty, notes=[], excluded=[]))[0]
    assert preflight(plan=empty, expect_no_gpus=True) == []


def test_a_device_kept_on_the_host_that_costs_a_gpu():
    lost = {"address": "0000:27:00.0", "cause": "keep_on_host_group", "reason": "0000:28:00.0 shares its group"}
    policy = {"keep_on_host": ["0000:28:00.0"]}
    errors = preflight(plan={"excluded": [lost]}, policy=policy)
    assert errors == ["gpu1: passthrough_policy.keep_on_host (0000:28:00.0) keeps on the host a device that the plan "
                      "needs on vfio-pci: 0000:27:00.0 cannot go to Nova because 0000:28:00.0 shares its group; remove "
                      "the device from keep_on_host (its IOMMU group then goes to vfio-pci whole), or list "
                      "0000:27:00.0 in passthrough_policy.exclude to accept losing the GPU(s)."]
    assert preflight(plan={"excluded": [lost]}, policy=dict(policy, exclude=["0000:27:00.0"])) == []


@given(virt=st.sampled_from([None, "svm", "vmx"]), vendor=st.sampled_from(["amd", "intel", None]),
       iommu=st.booleans(), cmdline=st.lists(st.sampled_from(["ro", "intel_iommu=on", "iommu=off", "amd_iommu=off"])),
       selected=st.booleans(), expect=st.booleans(), guest=st.booleans())
def test_each_message_names_the_host_and_only_real_problems_are_reported(virt, vendor, iommu, cmdline, selected,
                                                                          expect, guest):
    plan = dict(PLAN, selected=PLAN["selected"] if selected else [], vfio_devices=PLAN["vfio_devices"] if selected else [])
    facts = dict(FACTS, virtualization=virt, cpu_vendor=vendor, iommu_enabled=iommu, kernel_cmdline=cmdline,
                 hypervisor=guest)
    errors = checks.preflight_errors(plan, facts, "gpu1", expect_no_gpus=expect)
    assert all(e.startswith("gpu1: ") for e in errors)
    # Nothing is refused on a host whose CPU virtualizes, whose IOMMU is on and whose plan selects a GPU.
    if virt and iommu and selected:
        assert errors == []
    assert (virt is None and not guest) == any("hardware virtualization is off" in e for e in errors)
    assert (virt is None and guest) == any("this host is itself a virtual machine" in e for e in errors)
    # Only a bare-metal host is sent to its firmware setup.
    assert not (guest and any("firmware setup" in e for e in errors))
    assert (not selected and not expect) == any("the plan selects no device" in e for e in errors)


@pytest.mark.parametrize("plan, work", [
    ({"selected": [], "vfio_devices": []}, False),
    ({"selected": [], "vfio_devices": ["0000:01:00.0"]}, True),   # IOMMU off: bound first, selected after the reboot
    ({"selected": [{"address": "0000:01:00.0"}], "vfio_devices": ["0000:01:00.0"]}, True),
])
def test_has_work_is_the_rule_the_role_and_the_preflight_share(plan, work):
    assert checks.has_work(plan) is work
    assert bool(checks.preflight_errors(dict(PLAN, **plan), FACTS, "gpu1")) is not work
