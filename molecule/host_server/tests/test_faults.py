"""Faults on the real server, sharing its boots.

1. A package's initramfs hook that fails (prepare.yml, before the converge): no reboot, the rebuild stays pending;
   with the hook removed, the next run (the converge) rebuilds the initramfs and reboots.
2. Then, on the converged server, three changes between two runs, as in a real rollout: the operator adds an
   argument of their own to /etc/default/grub; the server takes the Ubuntu cloud image's boot layout (its
   /etc/default/grub.d/50-cloudimg-settings.cfg, which sets GRUB_CMDLINE_LINUX_DEFAULT after /etc/default/grub);
   the policy allows unsafe interrupts (one more kernel argument). The run edits GRUB where it takes effect,
   regenerates grub.cfg with the real grub-mkconfig and reboots, but the server does not come back (qemu turns the
   reboot into a power-off): the play fails naming the host within passthrough_host_reboot_timeout and the rollout
   stops. Powered on again, the server runs what the run configured; the next run (plan.yml, host.yml) verifies it
   without another reboot and clears the recorded one.
"""

from __future__ import annotations

import pytest
from conftest import (GPU_A, GPU_A_AUDIO, GPU_B, HOST, OPERATOR_ARGS, REPO, STATE, grub_default_line, held_by, kept,
                      plan, playbook, recap, recorded, report, server, simulated_boot_line, simulated_reboot, words)

from realserver import vm

POLICY = {"vendors": ["1234", "1af4"], "keep_on_host": [GPU_B], "allow_unsafe_interrupts": True}
UNSAFE = "vfio_iommu_type1.allow_unsafe_interrupts=1"
OPERATOR_EDIT = "panic=30"
DROP_IN = "/etc/default/grub.d/50-cloudimg-settings.cfg"
REBOOT_TIMEOUT = 60


# ---- 1. The broken initramfs hook (prepare.yml) ----

def test_a_failing_initramfs_hook_stops_the_run_before_any_reboot(before):
    run = kept("broken-hook-run.json")
    said = words(run["output"])
    assert run["rc"] != 0
    assert f"{HOST}: update-initramfs -u -k all failed" in said, said[-3000:]
    assert "broken-gpu-driver failed with return 1" in said, said[-3000:]
    assert "The host was not rebooted; the rebuild stays pending" in said, said[-3000:]
    after = kept("after-broken-hook.json")
    assert after["boot_id"] == before["boot_id"]
    assert recorded(after) == {"pending": ["initramfs"], "reboot": None}


def test_the_next_run_finished_the_job(before, converged):
    # The converge rebuilt the initramfs it found pending (no input file had changed since) and rebooted once.
    assert recorded(converged) == {"pending": [], "reboot": None}
    assert converged["boots"][-2:] == [before["boot_id"], converged["boot_id"]]
    assert "usr/local/sbin/vfio-pci-bind" in converged["initramfs"]


# ---- 2. An operator's edit, the Ubuntu layout, a reboot that never comes back, the next run ----

@pytest.fixture(scope="module")
def rollout(converged):  # converged first: the server as the converge left it is read before anything changes
    host = server()
    drop_in = (REPO / "fixtures" / "distros" / "ubuntu2404-cloud" / DROP_IN.lstrip("/")).read_text()
    host.check_output(f"sed -i 's/^GRUB_CMDLINE_LINUX=\"/&{OPERATOR_EDIT} /' /etc/default/grub")
    host.check_output(f"mkdir -p /etc/default/grub.d && printf '%s' {_quote(drop_in)} > {DROP_IN}")
    vm.qmp(STATE, "set-action", {"reboot": "shutdown"})  # the firmware hangs, say: the server does not come back
    lost = playbook("plan.yml", "host.yml", extra={"passthrough_policy": POLICY,
                                                   "passthrough_host_reboot_timeout": REBOOT_TIMEOUT})
    powered_off = vm.wait_stopped(STATE, timeout=600)
    vm.start(STATE)  # an operator powers it on
    back = report("--journal-boots", "1")
    again = playbook("plan.yml", "host.yml", extra={"passthrough_policy": POLICY})
    final = report("--journal-boots", "0")
    return {"lost": lost, "powered_off": powered_off, "back": back, "again": again, "final": final}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_a_host_that_does_not_come_back_fails_the_play_naming_it_and_stops_the_rollout(rollout):
    run = rollout["lost"]
    said = words(run.stdout)
    assert run.returncode != 0 and recap(run.stdout)["failed"] == 1, said[-3000:]
    assert rollout["powered_off"], "the server did not power off instead of rebooting"
    assert f"Timed out waiting for last boot time check (timeout={REBOOT_TIMEOUT})" in said, said[-3000:]
    assert f"{HOST} (wave 1):" in said and "The rollout stops here" in said, said[-3000:]


def test_the_operators_edit_is_kept_and_the_plan_lands_in_the_cloud_images_drop_in(rollout):
    files = rollout["back"]["files"]
    assert OPERATOR_EDIT in files["/etc/default/grub"]
    # The cloud image's drop-in holds the last assignment of GRUB_CMDLINE_LINUX_DEFAULT: the plan went there.
    assert "console=tty1 console=ttyS0" in files[DROP_IN]
    for arg in plan()["kernel_args"]:
        assert arg in files[DROP_IN], (arg, files[DROP_IN])


def test_the_real_grub_mkconfig_puts_the_plan_where_the_ubuntu_layout_takes_effect(rollout):
    back = rollout["back"]
    line = grub_default_line(back["files"])
    # The drop-in's GRUB_CMDLINE_LINUX_DEFAULT replaced /etc/default/grub's ("quiet" is gone), with the plan in it.
    assert "quiet" not in line and "console=tty1" in line
    for arg in plan()["kernel_args"] + [UNSAFE, OPERATOR_EDIT] + OPERATOR_ARGS:
        assert arg in line, (arg, line)
    # The server booted exactly that line when it was powered on again.
    assert back["cmdline"] == line


def test_the_server_powered_on_again_runs_the_plan(rollout, converged):
    back = rollout["back"]
    assert {a: d["driver"] for a, d in back["devices"].items()} == {
        a: d["driver"] for a, d in converged["devices"].items()}
    journal = back["journal"][back["boot_id"]]
    assert held_by(journal, "bochs-drm", GPU_B) and not held_by(journal, "bochs-drm", GPU_A)
    assert not [line for line in journal if "unknown parameter" in line], journal
    # The reboot the lost run recorded is still on record; nothing is pending.
    state = recorded(back)
    assert state["pending"] == [] and state["reboot"]["boot_id"].replace("-", "") == converged["boot_id"]


def test_the_next_run_picks_up_from_the_recorded_reboot_without_another(rollout):
    run, final = rollout["again"], rollout["final"]
    said = words(run.stdout)
    assert run.returncode == 0, said[-4000:]
    assert f"{HOST}: ready; 1 device(s) for Nova ({GPU_A}), 2 on vfio-pci." in said, said[-4000:]
    assert final["boot_id"] == rollout["back"]["boot_id"]
    assert recorded(final) == {"pending": [], "reboot": None}


def test_the_stand_ins_agree_with_the_real_tools_on_the_ubuntu_layout(tmp_path, rollout, before):
    back = rollout["back"]
    assert simulated_boot_line(tmp_path, back) == grub_default_line(back["files"])
    cmdline, drivers = simulated_reboot(tmp_path, before, back)
    assert cmdline == back["cmdline"]
    for address in (GPU_A, GPU_A_AUDIO, GPU_B):
        assert drivers[address] == back["devices"][address]["driver"], address
