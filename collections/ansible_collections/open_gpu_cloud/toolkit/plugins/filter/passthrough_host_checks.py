"""The refusals of the passthrough_host and passthrough_rollout roles, each a message naming the host, the variable
or device and the fix.

One filter per check point of a role, so a host is checked in one task there instead of one task per rule
(on a fleet, every task costs the controller a worker per host):

* ``passthrough_host_var_errors``: the host role's own variables, before anything is read or written
  (roles/passthrough_host tasks/preflight_vars.yml);
* ``passthrough_host_left_alone``: what no reboot and no BIOS setting can settle on the host (a virtual machine without
  nested virtualization or a virtual IOMMU, no GPU for passthrough), so the role leaves it alone before its firmware
  phase and writes nothing there (roles/passthrough_host tasks/preflight.yml; the rule is
  plugins/module_utils/passthrough/settle.py's);
* ``passthrough_host_preflight_errors``: the host's stored plan and the facts it was made from, before
  anything is written (roles/passthrough_host tasks/preflight.yml);
* ``passthrough_host_bios_enables``: what the BIOS attributes staged on the BMC switch on (roles/passthrough_host
  tasks/firmware.yml), which the preflight does not refuse as off;
* ``passthrough_rollout_var_errors``: the rollout's drain variables, before the host role writes anything
  (roles/passthrough_rollout tasks/check.yml; the batch's rule is plugins/filter/reboot_waves.py's);
* ``passthrough_rollout_wave_errors``: the planned reboot waves against what the coordination backend takes in one
  transaction (roles/passthrough_rollout tasks/plan.yml, before any slot is taken; the rule is
  plugins/module_utils/coordination/backend.py's wave_problem).

Each returns a list of messages, empty when nothing is wrong; the role asserts the list is empty and joins the
messages into one failure.
"""

import os


from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import settle
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import verify as passthrough_verify

# The path variables a host's root is put in front of; those of OPTIONAL_PATH_VARS may be empty (the boot-config
# output: the family's own).
PATH_VARS = (
    "passthrough_host_grub_path",
    "passthrough_host_grub_dropin_dir",
    "passthrough_host_state_file",
    "passthrough_host_lock_file",
    "passthrough_host_modprobe_file",
    "passthrough_host_blacklist_file",
    "passthrough_host_modules_load_file",
    "passthrough_host_bind_script",
    "passthrough_host_boot_config_output",
)
OPTIONAL_PATH_VARS = ("passthrough_host_boot_config_output",)
# Durations the role bounds its steps with (the reboot's own, passthrough_host_reboot_timeout, is checked with the root).
SECONDS_VARS = ("passthrough_host_lock_lease", "passthrough_host_tool_timeout",
                "passthrough_host_reboot_connect_timeout", "passthrough_host_bmc_timeout")
COMMAND_VARS = ("passthrough_host_boot_config_command", "passthrough_host_initramfs_command",
                "passthrough_host_reboot_command")
GRUB_VARIABLES = ("", "GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")


def has_work(plan):
    """Whether a plan has work for its host: devices for Nova, or devices to bind to vfio-pci (with the IOMMU
    off nothing is selected yet, but the GPUs to bind are known and the reboot turns the IOMMU on)."""
    return bool(plan.get("selected")) or bool(plan.get("vfio_devices"))


def _positive_number(value):
    """A count of seconds: an int (or digits) above zero; a boolean is not a number here."""
    if isinstance(value, bool):
        return False
    try:
        return int(value) > 0
    except (TypeError, ValueError):
        return False


def _text(value):
    return "" if value is None else str(value)


def var_errors(values, host, family="", supported=("Debian", "RedHat")):
    """The refusals of the role's variables.

    :param values: the role's variables by name (the passthrough_host_* names of defaults/main.yml).
    :param host: the inventory hostname, named in every message.
    :param family: the OS family the role will use (given or gathered).
    :param supported: the OS families whose tools the role knows.
    """
    errors = []
    root = values.get("passthrough_host_root")
    ok = (isinstance(root, str) and root.startswith("/")
          and values.get("passthrough_host_grub_variable", "") in GRUB_VARIABLES
          and _positive_number(values.get("passthrough_host_reboot_timeout"))
          and all(isinstance(values.get(name, []), (list, tuple)) for name in COMMAND_VARS))
    if not ok:
        errors.append(
            f"{host}: passthrough_host_root ({_text(root)}) must be an absolute path, passthrough_host_grub_variable "
            f"({_text(values.get('passthrough_host_grub_variable'))}) empty, GRUB_CMDLINE_LINUX or "
            "GRUB_CMDLINE_LINUX_DEFAULT, passthrough_host_reboot_timeout a positive number of seconds, and the "
            "*_command variables lists of arguments (e.g. [update-grub]), not strings.")

    seconds = [name for name in SECONDS_VARS if name in values and not _positive_number(values[name])]
    if seconds:
        errors.append(
            f"{host}: {', '.join(f'{name} ({_text(values[name])})' for name in seconds)} must be a positive number of "
            "seconds (an int, e.g. 900).")

    same = locations.same_or_nested(values.get("passthrough_host_lock_file"), values.get("passthrough_host_state_file"))
    if same:
        errors.append(
            f"{host}: passthrough_host_lock_file ({_text(values.get('passthrough_host_lock_file'))}) {same} "
            f"passthrough_host_state_file ({_text(values.get('passthrough_host_state_file'))}): the lock would replace "
            "the state (or the state's directory). Give each a file of its own, e.g. the defaults "
            "/var/lib/open-gpu-cloud/passthrough_host.lock and /var/lib/open-gpu-cloud/passthrough_host.json.")

    relative = [f"{name} ({_text(values[name])})" for name in PATH_VARS
                if name in values and locations.path_problem(name, values[name], allow_empty=name in OPTIONAL_PATH_VARS)]
    if relative:
        errors.append(
            f"{host}: {' '.join(relative)} is not an absolute path. Give every passthrough_host_* path as it is on "
            "the host, starting with / (e.g. /etc/default/grub); the role puts passthrough_host_root in front of it.")

    if family not in supported:
        errors.append(
            f"{host}: OS family {family or 'unknown'} is not supported (only {', '.join(supported)}). Gather facts, or "
            "set passthrough_host_os_family to the family whose tools (update-grub/update-initramfs or "
            "grub2-mkconfig/dracut) the host has.")

    bmc = _text(values.get("passthrough_host_bmc_address"))
    if bmc and locations.bmc_address(bmc)[1]:
        errors.append(f"{host}: {locations.bmc_address(bmc)[1]}.")
    if bmc and not (_text(values.get("passthrough_host_bmc_username")) and
                    _text(values.get("passthrough_host_bmc_password"))):
        errors.append(
            f"{host}: passthrough_host_bmc_address is set ({locations.without_credentials(bmc)}) but "
            "passthrough_host_bmc_username or "
            "passthrough_host_bmc_password is empty: put both in the host's vaulted variables, or unset "
            "passthrough_host_bmc_address to skip the firmware phase.")

    return errors


# The rollout's durations (seconds) and the least each may be.
ROLLOUT_SECONDS = {"passthrough_rollout_lease_ttl": 5, "passthrough_rollout_keeper_start_timeout": 1, "passthrough_rollout_coordination_connect_timeout": 1,
                   "passthrough_rollout_coordination_read_timeout": 1, "passthrough_rollout_cloud_connect_timeout": 1,
                   "passthrough_rollout_cloud_read_timeout": 1, "passthrough_rollout_reboot_slot_timeout": 0}


def _at_least(value, minimum):
    if isinstance(value, bool):
        return False
    try:
        return int(value) >= minimum
    except (TypeError, ValueError):
        return False


# The rollout's variables that carried the host role's prefix before they took their own role's: an inventory that
# still sets an old name is refused, never read under it (a drain cloud ignored would reboot hosts with instances).
RENAMED = {f"passthrough_host_{name}": f"passthrough_rollout_{name}"
           for name in ("reboot_batch", "reboot_slot_timeout", "drain_cloud", "drain_clouds_yaml", "nova_host",
                        "drain_mode", "drain_timeout")}


def renamed_errors(values, host):
    """The refusals of the rollout's old variable names an inventory still sets (values: old name -> its value, None
    when unset), each naming the new one."""
    old = sorted(name for name in RENAMED if values.get(name) is not None)
    if not old:
        return []
    return [f"{host}: {', '.join(old)} {'is' if len(old) == 1 else 'are'} no longer read: the passthrough_rollout "
            f"role's variables carry its own prefix. Rename {'it' if len(old) == 1 else 'them'} in the inventory ("
            + ", ".join(f"{name} -> {RENAMED[name]}" for name in old) + "), then run this play again."]


def coordination_errors(values, host, play_hosts=None):
    """The refusals of the rollout's coordination variables: the backend's URL (backend.parse_url: a scheme this
    version reads, no credentials - never echoed), a lease TTL or (for a batch of a number of hosts, with the play's
    PLAY_HOSTS) a wave the backend cannot take, a directory backend that is a symbolic link, no directory, or the
    plan directory (or inside it, or holding it), and the retired passthrough_host_reboot_slots_dir."""
    errors = []
    if values.get("passthrough_host_reboot_slots_dir") is not None:
        errors.append(
            f"{host}: passthrough_host_reboot_slots_dir is no longer read: the fleet-wide reboot slots are on the "
            "coordination backend named by passthrough_rollout_coordination_url (by default a directory beside the "
            "plan directory, file://<its parent>/coordination, for one control host; etcd3+http://<etcd host>:2379 "
            "for several). Remove passthrough_host_reboot_slots_dir from the inventory (and set "
            "passthrough_rollout_coordination_url where the default does not fit), then run this play again.")
    url = values.get("passthrough_rollout_coordination_url")
    if url in (None, ""):
        return errors
    try:
        kind, settings, shown = backend.parse_url(url)
    except backend.BackendError as exc:
        return errors + [f"{host}: {exc}."]
    ttl = values.get("passthrough_rollout_lease_ttl")
    if _at_least(ttl, ROLLOUT_SECONDS["passthrough_rollout_lease_ttl"]):
        problem = backend.ttl_problem(kind, int(ttl), shown)
        if problem:
            errors.append(f"{host}: {problem}.")
    batch = values.get("passthrough_rollout_reboot_batch")
    if isinstance(play_hosts, int) and isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1:
        # A wave of this run holds at most the batch, and at most the play's hosts (a percentage is of the fleet, known
        # when the waves are planned: wave_errors).
        problem = backend.wave_problem(kind, min(batch, play_hosts), shown)
        if problem:
            errors.append(f"{host}: {problem}.")
    if kind == "file":
        problem = backend.FileBackend(settings["path"], shown).problem()
        if problem:
            errors.append(f"{host}: {backend.VARIABLE} ({shown}): {problem}.")
        plan_dir = values.get("passthrough_plan_dir")
        same = locations.same_or_nested(settings["path"], plan_dir)
        if same:
            errors.append(
                f"{host}: {backend.VARIABLE} ({shown}) {same} passthrough_plan_dir ({plan_dir}): the coordination "
                "records would mix with the plan files, the fleet's record. Give it a directory of its own, e.g. "
                f"file://{os.path.dirname(os.path.normpath(plan_dir))}/coordination.")
    else:
        problem = backend.trust_problem(kind, settings)
        if problem:
            errors.append(f"{host}: {backend.VARIABLE} ({shown}): {problem}.")
    return errors


def wave_errors(waves, url, host):
    """The refusal of the planned reboot waves (reboot_waves.py's {size, serial, waves}) that the coordination
    backend at URL cannot take (backend.wave_problem), as a list of one message naming the host (empty when it can,
    or when the URL is refused already by the check entry point)."""
    largest = max((len(wave) for wave in (waves or {}).get("waves", [])), default=0)
    try:
        kind, _settings, shown = backend.parse_url(url)
    except backend.BackendError:
        return []
    problem = backend.wave_problem(kind, largest, shown)
    return [f"{host}: {problem}."] if problem else []


def rollout_var_errors(values, host, play_hosts=None):
    """The refusals of the passthrough_rollout role's drain, timeout and coordination variables (its batch:
    reboot_waves.py's batch_errors).

    :param values: the variables by name (passthrough_rollout_drain_cloud, passthrough_rollout_drain_clouds_yaml,
        passthrough_rollout_drain_timeout, passthrough_rollout_nova_host, the passthrough_rollout_* timeouts and
        coordination URL: the names of roles/passthrough_rollout; passthrough_plan_dir; the retired
        passthrough_host_reboot_slots_dir and the old names of RENAMED, None unless the inventory sets them).
    :param host: the inventory hostname, named in every message.
    """
    errors = []
    bad = [f"{name} ({_text(values[name])})" for name, least in ROLLOUT_SECONDS.items()
           if name in values and not _at_least(values[name], least)]
    if bad:
        errors.append(f"{host}: {', '.join(bad)} must be a number of seconds (an int: the lease at least 5, a timeout "
                      "at least 1).")
    errors += renamed_errors(values, host)
    errors += coordination_errors(values, host, play_hosts)
    clouds_yaml = locations.path_problem("passthrough_rollout_drain_clouds_yaml",
                                         values.get("passthrough_rollout_drain_clouds_yaml", ""), allow_empty=True)
    if clouds_yaml:
        errors.append(f"{host}: {clouds_yaml}; it names clouds.yaml on the control host, or leave it empty for "
                      "openstacksdk's search path.")

    if _text(values.get("passthrough_rollout_drain_cloud")):
        timeout = values.get("passthrough_rollout_drain_timeout")
        nova_host = _text(values.get("passthrough_rollout_nova_host"))
        if not (_positive_number(timeout) and nova_host):
            errors.append(
                f"{host}: passthrough_rollout_drain_timeout ({_text(timeout)}) must be a positive number of seconds and "
                f"passthrough_rollout_nova_host ({nova_host}) the host's name in Nova (openstack compute service list).")
    return errors


def bios_enables(purposes, changes):
    """What the BIOS attributes staged on the BMC switch on at the power cycle that applies them (firmware.yml).

    :param purposes: the vendor's table, purpose (virtualization, iommu, sriov) -> {attribute: value}.
    :param changes: the attributes staged (those whose current value differs).
    :returns: the purposes among virtualization and iommu that a staged attribute serves, sorted. A vendor whose
        table has no iommu attribute ties the IOMMU to CPU virtualization (Dell: ProcVirtualization switches both),
        so staged virtualization switches the IOMMU on as well.
    """
    if not isinstance(purposes, dict) or not isinstance(changes, dict):
        return []
    staged = {name for name, attrs in purposes.items()
              if isinstance(attrs, dict) and any(key in changes and changes[key] == value
                                                 for key, value in attrs.items())}
    if "virtualization" in staged and not purposes.get("iommu"):
        staged.add("iommu")
    return sorted(staged & {"virtualization", "iommu"})


# What a BMC cannot change either: the host is left alone (not failed), named in the summary and the fleet report.
LEFT_ALONE_CAUSES = ("no_gpu", "vm_without_nested_virtualization", "vm_without_iommu")


def left_alone(plan, facts, bmc=False):
    """The blockers (``settle.py``: ``{cause, reason, fix}``) for which the role leaves the host alone, before its
    firmware phase: those no BIOS attribute staged through the BMC (``bmc``: passthrough_host_bmc_address is set)
    could settle either. Empty: the role goes on (firmware, the preflight's refusals, the configuration)."""
    if not isinstance(plan, dict) or not isinstance(facts, dict):
        return []
    enables = ("virtualization", "iommu") if bmc else ()
    return [b for b in settle.blocks(plan, facts, firmware_enables=enables) if b["cause"] in LEFT_ALONE_CAUSES]


def left_alone_message(blockers, plan, host):
    """The warning of a host left alone: the host, its GPUs, each cause with its reason and its fix."""
    plan = plan if isinstance(plan, dict) else {}
    gpus = sorted({s.get("address") for s in plan.get("selected") or [] if isinstance(s, dict)}
                  | {e.get("address") for e in plan.get("excluded") or []
                     if isinstance(e, dict) and e.get("cause") == "iommu_inactive"} - {None})
    what = f" (GPU {', '.join(gpus)})" if gpus else ""
    causes = " ".join(f"[{b['cause']}] {b['reason'][:1].upper()}{b['reason'][1:]}. First, {b['fix']}." for b in blockers)
    return (f"{host}{what}: left alone - nothing is written on this host and it is not rebooted, as no reboot can make "
            f"it a passthrough host. {causes}")


def preflight_errors(plan, facts, host, policy=None, expect_no_gpus=False, firmware_enables=()):
    """What stops the host before anything is written: no CPU virtualization, an IOMMU that a reboot cannot
    switch on, a plan that selects nothing (unless expected), devices kept on the host that cost a GPU.

    CPU virtualization or an IOMMU that is off now is no refusal when BIOS attributes staged on the BMC switch it on
    (``firmware_enables``, from bios_enables): the power cycle of the host's reboot applies them, and the
    verification after it reads the host again.

    A host that is itself a virtual machine (facts ``hypervisor``: the CPU's hypervisor flag) and whose CPU shows no
    svm/vmx is refused as what it is, not sent to its firmware setup: a GPU passed into a VM reaches Nova's guests
    only through nested virtualization and a virtual IOMMU, which its hypervisor does not offer; the refusal also
    stops the reboot the plan may ask for (``intel_iommu=on`` gives a VM no nested virtualization).

    :param plan: the host's stored plan (roles/passthrough, load.yml).
    :param facts: the facts that plan was made from.
    :param host: the inventory hostname.
    :param policy: the host's passthrough_policy (its keep_on_host and exclude are named in the fix).
    :param expect_no_gpus: passthrough_host_expect_no_gpus.
    :param firmware_enables: what the staged BIOS attributes switch on (bios_enables).
    """
    policy = policy if isinstance(policy, dict) else {}
    errors = []
    vendor = facts.get("cpu_vendor")
    flag = "svm" if vendor == "amd" else "vmx"
    guest = facts.get("hypervisor") is True
    running = list(facts.get("kernel_cmdline") or [])
    # Read as the kernel reads the line (kernel_cmdline): intel-iommu=off,sm_on still blocks, and
    # intel_iommu=on,sm_on already asks for the IOMMU.
    absent = list(plan.get("kernel_args_absent") or []) + list(kernel_cmdline.IOMMU_OFF)
    try:
        blocking = kernel_cmdline.check(running, [], absent)
        # What the vendor's IOMMU needs on the line (the planner's rule); AMD-Vi needs nothing there.
        enabling = [arg for arg in kernel_cmdline.vendor_iommu_args(vendor)
                    if not kernel_cmdline.satisfies(running, arg)]
    except kernel_cmdline.CmdlineError:
        blocking, enabling = True, []  # a line the model refuses: a reboot may well change it

    guest_refused = guest and facts.get("virtualization") is None
    if guest_refused:
        no_iommu = ("" if facts.get("iommu_enabled") else
                    ", and it shows no IOMMU (no /sys/kernel/iommu_groups, no /sys/class/iommu unit)")
        reboot = ""
        if plan.get("reboot_required") or plan.get("reboot_blocked"):
            with_args = f" with {' '.join(enabling)}" if enabling else ""
            reboot = f" and the host is not rebooted (a reboot{with_args} would not give it nested virtualization)"
        errors.append(
            f"{host}: this host is itself a virtual machine: the {facts.get('cpu_model') or 'CPU'} shows the "
            f"hypervisor flag and no {flag} flag in /proc/cpuinfo (its hypervisor gives it no nested "
            f"virtualization){no_iommu}. A GPU passed into a VM cannot be passed on to Nova's guests unless its "
            f"hypervisor offers nested virtualization and a virtual IOMMU, so nothing is written{reboot}. Use "
            "bare-metal hosts for gpu_hosts: remove this host from the gpu_hosts group (or, where its hypervisor "
            f"can, give the VM nested virtualization ({flag}) and a virtual IOMMU, then run this play again).")
    elif facts.get("virtualization") is None and "virtualization" not in firmware_enables:
        errors.append(
            f"{host}: the {facts.get('cpu_model') or 'CPU'} shows no {flag} flag in "
            "/proc/cpuinfo: hardware virtualization is off. Enable SVM Mode (AMD) / VT-x (Intel) in the firmware "
            "setup (or set it through the BMC with passthrough_host_bmc_address), then run this play again.")

    # Whether a reboot can switch the IOMMU on is settle.py's rule (the planner's and the verification's too).
    iommu_blocked = any(b["cause"] in settle.IOMMU_CAUSES
                        for b in settle.reboot_blockers(facts, firmware_enables=tuple(firmware_enables or ())))
    if iommu_blocked and not guest_refused and "iommu" not in firmware_enables:
        if facts.get("iommu_firmware") == "none":
            why = "the firmware's ACPI tables (/sys/firmware/acpi/tables) have no DMAR or IVRS table"
        else:
            why = ("on AMD the firmware switches it on and nothing on the running command line turns it off"
                   if vendor == "amd" else "the running kernel command line already asks for it")
        fix = (passthrough_verify.VM_IOMMU_FIX if guest else
               "Enable AMD-Vi/IOMMU or VT-d in the firmware setup (or through the BMC with "
               "passthrough_host_bmc_address), then reboot and run this play again.")
        errors.append(
            f"{host}: the IOMMU is inactive (no /sys/kernel/iommu_groups) and a reboot cannot change that: {why} "
            f"({' '.join(running)}). {fix}")

    if not (has_work(plan) or expect_no_gpus):
        reasons = list(plan.get("notes") or []) + [d.get("reason", "") for d in plan.get("excluded") or []]
        errors.append(
            f"{host}: the plan selects no device for passthrough ({'; '.join(reasons) or 'no display device found'}). "
            "If this host is meant to have no GPU for Nova, set passthrough_host_expect_no_gpus: true for it (or "
            "remove it from the GPU hosts group).")

    excluded_by_policy = [str(a).lower() for a in policy.get("exclude") or []]
    lost = [d for d in plan.get("excluded") or []
            if d.get("cause") == "keep_on_host_group" and d.get("address") not in excluded_by_policy]
    if lost:
        because = "".join(f"{d['address']} cannot go to Nova because {d.get('reason', '')}; " for d in lost)
        errors.append(
            f"{host}: passthrough_policy.keep_on_host ({', '.join(str(a) for a in policy.get('keep_on_host') or [])}) "
            f"keeps on the host a device that the plan needs on vfio-pci: {because}remove the device from "
            "keep_on_host (its IOMMU group then goes to vfio-pci whole), or list "
            f"{', '.join(d['address'] for d in lost)} in passthrough_policy.exclude to accept losing the GPU(s).")
    return errors


class FilterModule:
    """The passthrough_host role's checks."""

    def filters(self):
        return {
            "passthrough_host_var_errors": var_errors,
            "passthrough_host_preflight_errors": preflight_errors,
            "passthrough_host_left_alone": left_alone,
            "passthrough_host_left_alone_message": left_alone_message,
            "passthrough_host_has_work": has_work,
            "passthrough_host_bios_enables": bios_enables,
            "passthrough_rollout_var_errors": rollout_var_errors,
            "passthrough_rollout_wave_errors": wave_errors,
        }
