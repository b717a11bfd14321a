"""The server after the converge (plan.yml, then host.yml: update-initramfs, ansible.builtin.reboot) and the second
converge: what the kernel runs, who bound each device and when, what stays on the host, and that a check-mode run
changes nothing. Then the fast tests' stand-ins against the real tools on the same files."""

from __future__ import annotations

from conftest import (CONSOLE, GPU_A, GPU_A_AUDIO, GPU_B, GPU_SHARED, OPERATOR_ARGS, SHARED_NIC, grub_default_line,
                      held_by, monotonic, plan, playbook, recap, recorded, server, simulated_boot_line,
                      simulated_reboot)

PLANNED = [GPU_A, GPU_A_AUDIO]


def test_the_plan_is_what_the_groups_and_the_policy_allow():
    settled = plan()
    # The virtio GPU shares its IOMMU group with a NIC (behind a PCI bridge): it stays on the host. The second GPU
    # stays there by policy; its twin has the same ID, so it is bound by address, its audio function by ID.
    assert [s["address"] for s in settled["selected"]] == [GPU_A]
    assert settled["vfio_devices"] == PLANNED and settled["bind_by_address"] == [GPU_A]
    assert settled["vfio_ids"] == ["8086:293e"]
    # An AMD host: no intel_iommu=on (and no amd_iommu=on, which the kernel does not know).
    assert settled["kernel_args"] == ["iommu=pt", "vfio-pci.ids=8086:293e", "rd.driver.pre=vfio-pci"]
    assert settled["pending"] == [] and settled["reboot_required"] is False


def test_the_kernel_runs_the_planned_arguments_and_the_operators_own(before, converged):
    cmdline = converged["cmdline"]
    for arg in plan()["kernel_args"] + OPERATOR_ARGS + ["quiet"]:
        assert arg in cmdline, f"{arg} is not on the running command line {cmdline}"
    assert not set(plan()["kernel_args_absent"]) & set(cmdline)
    # GRUB passed exactly the line update-grub generated; before the host phase the server ran without the plan.
    assert cmdline == grub_default_line(converged["files"])
    assert not set(plan()["kernel_args"]) & set(before["cmdline"])


def test_each_planned_device_is_on_vfio_pci(before, converged):
    devices = converged["devices"]
    assert [devices[a]["driver"] for a in PLANNED] == ["vfio-pci", "vfio-pci"], {a: devices[a] for a in PLANNED}
    assert devices[GPU_A]["driver_override"] == "vfio-pci"  # bound by address
    # Before the host phase their host drivers had them.
    assert [before["devices"][a]["driver"] for a in PLANNED] == ["bochs-drm", "snd_hda_intel"]


def test_the_initramfs_bound_them_before_their_host_drivers_loaded(converged):
    # update-initramfs put vfio (the role's block of /etc/initramfs-tools/modules), the modprobe configuration (its
    # install hook runs the bind script before vfio-pci loads) and the bind script (the role's hook) in the initramfs.
    listed = converged["initramfs"]
    assert any(p.endswith(("/vfio-pci.ko", "/vfio_pci.ko")) for p in listed), listed
    assert {"etc/modprobe.d/vfio.conf", "usr/local/sbin/vfio-pci-bind"} <= set(listed), listed
    journal = converged["journal"][converged["boot_id"]]
    init = [monotonic(line) for line in journal if "Run /init as init process" in line]
    systemd = [monotonic(line) for line in journal if "systemd[1]: systemd " in line]
    vfio = [monotonic(line) for line in journal if "vfio_pci: add [8086:293e" in line]
    twin = [monotonic(line) for line in held_by(journal, "bochs-drm", GPU_B)]
    logins = [monotonic(line) for line in journal if "Accepted publickey" in line]
    assert init and systemd and vfio and twin and logins, "\n".join(journal)
    # vfio-pci loaded in the initramfs: after /init started, before systemd ran from the root file system.
    assert init[0] < vfio[0] < systemd[0], "\n".join(journal)
    # The host driver loaded later and took the twin kept on the host, but not the GPU of the same ID bound by
    # address: its driver_override was set already. All of it before Ansible first logged in after the reboot.
    assert vfio[0] < twin[0] < logins[0], "\n".join(journal)
    assert not held_by(journal, "bochs-drm", GPU_A)


def test_the_host_drivers_never_held_the_planned_devices(before, converged):
    previous, current = converged["boots"][-2], converged["boot_id"]
    assert previous == before["boot_id"]
    for address in PLANNED:
        driver = before["devices"][address]["driver"]
        # The check sees a host driver holding the device: the boot before the host phase says so.
        assert held_by(converged["journal"][previous], driver, address), (driver, address)
        assert not held_by(converged["journal"][current], driver, address), (
            f"{driver} held {address} in the boot after the reboot:\n"
            + "\n".join(held_by(converged["journal"][current], driver, address)))


def test_devices_that_stay_on_the_host_keep_their_drivers(before, converged):
    stayed = {a: d["driver"] for a, d in before["devices"].items() if a not in PLANNED}
    assert {a: converged["devices"][a]["driver"] for a in stayed} == stayed
    # The GPU kept by policy (the twin of one on vfio-pci), the virtio GPU next to its NIC (its group is not
    # viable), the console.
    assert (stayed[GPU_B], stayed[GPU_SHARED], stayed[SHARED_NIC], stayed[CONSOLE]) == (
        "bochs-drm", "virtio-pci", "e1000", "cirrus")
    assert converged["devices"][GPU_B]["driver_override"] is None


def test_one_reboot_settled_the_plan_and_the_second_converge_made_none(before, converged):
    assert converged["boots"][-2:] == [before["boot_id"], converged["boot_id"]], converged["boots"]
    assert recorded(converged) == {"pending": [], "reboot": None}


def test_a_check_mode_run_after_the_second_converge_changes_nothing(converged):
    run = playbook("plan.yml", "host.yml", check=True)
    assert run.returncode == 0, run.stdout[-4000:]
    assert recap(run.stdout)["changed"] == 0, run.stdout[-4000:]
    assert "--- before" not in run.stdout and "+++ after" not in run.stdout, run.stdout[-4000:]
    boot_id = server().file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert boot_id.replace("-", "") == converged["boot_id"]


# ---- The stand-ins of the fast tests against the real tools, on the same files ----

def test_the_update_grub_stand_in_generates_the_line_grub_mkconfig_generated(tmp_path, converged):
    assert simulated_boot_line(tmp_path, converged) == grub_default_line(converged["files"])


def test_the_reboot_stand_in_boots_what_the_real_reboot_booted(tmp_path, before, converged):
    cmdline, drivers = simulated_reboot(tmp_path, before, converged)
    assert cmdline == converged["cmdline"]
    # The stand-in leaves PCI bridges without a driver (discovery never reads them); every other function agrees.
    real = {a: d["driver"] for a, d in converged["devices"].items() if not d["class"].startswith("0604")}
    assert {a: drivers[a] for a in real} == real
