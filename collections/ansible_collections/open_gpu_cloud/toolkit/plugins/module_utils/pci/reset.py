# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Resetting a passthrough GPU through sysfs before it is given back to Nova (plugins/modules/pci_device_reset.py).

A one-time-use GPU (docs/ops.md, "Returning one-time-use GPUs") goes back to Nova only after the kernel reset it:
``echo 1 > /sys/bus/pci/devices/<address>/reset`` (the kernel picks the method, ``reset_method`` when it exists).
That is safe only when

* the device is bound to vfio-pci (its ``driver`` link): a reset under a host driver pulls the device from under it;
* no process holds its IOMMU group open (``/dev/vfio/<group>``, or its vfio cdev ``/dev/vfio/devices/vfioN`` of
  iommufd): a guest still running there (a server Nova lost track of) or a tool;
* the kernel can reset it (the host's passthrough plan says ``resettable``, and ``reset`` is in sysfs).

Pure: ``decide`` (the one rule: reset, or skip with the reason), ``holds`` (whether an fd's link target is one of a
device's vfio nodes), ``plan_entry``. Reading and writing sysfs/procfs: ``read_device``, ``find_holders``,
``write_reset``; every path they touch resolves inside its root (a symlink out of a sandbox or captured tree is
refused, as pci_passthrough_facts refuses it), and every failure is a ``ResetError`` naming the path.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci import address as pci_address

VFIO_DRIVER = "vfio-pci"
# How a skip may be overridden: a device the kernel cannot (or may not be known to) reset can still be returned
# when the operator says so (return_gpus_without_reset); a blocked one never is (it is not on vfio-pci, a process
# holds it, it is gone from the bus, or its reset failed).
NO_RESET = "no_reset"
BLOCKED = "blocked"
RETURN_COMMAND = "openstack resource provider inventory set {uuid} --amend --resource {rc}:reserved=0"


class ResetError(Exception):
    """A tree that cannot be read or written as sysfs/procfs; the message names the path and the fix."""


# --------------------------------------------------------------------------- pure parts

def return_command(uuid, resource_class):
    """The command that returns a one-time-use device by hand (osc-placement)."""
    return RETURN_COMMAND.format(uuid=uuid or "<provider>", rc=resource_class or "<resource class>")


def vfio_nodes(group, cdevs=()):
    """The device nodes through which a process holds a device on vfio-pci: its group's ``/dev/vfio/<group>`` and
    (``/dev/vfio/noiommu-<group>`` in vfio's no-IOMMU mode) and each of its vfio cdevs ``/dev/vfio/devices/<name>``
    (iommufd, kernel 6.2 and later)."""
    nodes = [f"/dev/vfio/{group}", f"/dev/vfio/noiommu-{group}"] if group not in (None, "") else []
    return nodes + [f"/dev/vfio/devices/{name}" for name in cdevs]


def holds(target, nodes):
    """Whether an open file's link target (``readlink /proc/<pid>/fd/<n>``) is one of these device nodes. The
    kernel appends `` (deleted)`` to a node removed since it was opened: it is still held."""
    if not isinstance(target, str):
        return False
    name = target[:-len(" (deleted)")] if target.endswith(" (deleted)") else target
    return name in nodes


def plan_entry(plan, address):
    """The plan's ``selected`` entry of this address (the GPUs the host gives Nova), or None."""
    for entry in (plan or {}).get("selected") or []:
        if isinstance(entry, dict) and str(entry.get("address", "")).lower() == address:
            return entry
    return None


def _who(holders):
    return ", ".join(f"{h.get('comm') or '?'} (pid {h['pid']}, {h['target']})" for h in holders)


def decide(host, address, device, entry, provider=None, resource_class=None):
    """The one rule: reset this device now, or skip it and why.

    device: what sysfs/procfs show now (read_device plus find_holders): present, driver, iommu_group, reset_path
    (None without a ``reset`` file), holders [{pid, comm, target}], unreadable [{path, error}]; entry: the plan's
    selected entry (plan_entry) or None; provider / resource_class name the Placement provider for the command that
    returns it by hand. Returns {action: reset | skip, kind: None | no_reset | blocked, reason}. What may harm a
    device or its user (blocked) is judged before whether the kernel can reset it (no_reset)."""
    by_hand = return_command(provider, resource_class)
    where = f"{host}: GPU {address}"
    if not device.get("present"):
        return _skip(BLOCKED, f"{where} is not on the PCI bus ({device.get('path')} is missing): not reset, not "
                              "returned. Find out why (playbooks/health.yml) before giving it back to Nova")
    if device.get("driver") != VFIO_DRIVER:
        bound = f"bound to {device['driver']}" if device.get("driver") else "bound to no driver"
        return _skip(BLOCKED, f"{where} is {bound}, not vfio-pci: a reset would pull it from under the host; not "
                              "reset, not returned. Bind it to vfio-pci again (playbooks/host.yml, or a reboot), then "
                              "run playbooks/return_gpus.yml again")
    if device.get("iommu_group") in (None, ""):
        return _skip(BLOCKED, f"{where} is on vfio-pci but has no IOMMU group ({device.get('path')}/iommu_group is "
                              "missing), so who holds it cannot be told: not reset, not returned. Check the host's "
                              "IOMMU (playbooks/health.yml)")
    if device.get("holders"):
        return _skip(BLOCKED, f"{where}: its IOMMU group {device.get('iommu_group')} is held open by "
                              f"{_who(device['holders'])}: a guest or a tool still uses it, and a reset would pull it "
                              "from under them; not reset, not returned. Find and stop that process (a server Nova "
                              "no longer lists: virsh list --all on the host), then run again")
    if device.get("unreadable"):
        first = device["unreadable"][0]
        return _skip(BLOCKED, f"{where}: cannot tell whether a process holds its IOMMU group "
                              f"{device.get('iommu_group')}: {first['path']}: {first['error']} "
                              f"({len(device['unreadable'])} unreadable): not reset, not returned. Run as root (the "
                              "play's become: true) and run again")
    if entry is None:
        return _skip(NO_RESET, f"{where} is not in the host's passthrough plan (plan.selected), so whether the "
                               "kernel can reset it is not known: not reset, not returned. Plan the host again "
                               "(playbooks/plan.yml), or reboot the host and return it by hand: "
                               f"`{by_hand}` (or run with -e return_gpus_without_reset=true)")
    if entry.get("resettable") is None:
        return _skip(NO_RESET, f"{where}: the host's passthrough plan does not say whether the kernel can reset it "
                               "(a plan made before reset methods were recorded, or from a capture without them): "
                               "not reset, not returned. Plan the host again (playbooks/plan.yml) and run again, or "
                               f"reboot the host and return it by hand: `{by_hand}`")
    if entry.get("resettable") is False:
        return _skip(NO_RESET, f"{where} has no usable reset (the plan: no reset_method or reset in sysfs; no FLR, "
                               "not alone on its bus), so the next guest would find what the last one left: not "
                               "reset, not returned. Drain and reboot the host, then return it by hand: "
                               f"`{by_hand}` (or run with -e return_gpus_without_reset=true after the reboot)")
    if not device.get("reset_path"):
        methods = ", ".join(entry.get("reset_methods") or ["?"])
        return _skip(NO_RESET, f"{where}: the plan says the kernel can reset it ({methods}), but sysfs has no "
                               f"{device.get('path')}/reset now (another kernel?): not reset, not "
                               "returned. Plan the host again (playbooks/plan.yml), or reboot it and return the GPU by "
                               f"hand: `{by_hand}`")
    return dict(action="reset", kind=None, reason="")


def _skip(kind, reason):
    return dict(action="skip", kind=kind, reason=reason)


# --------------------------------------------------------------------------- sysfs and procfs

def _real_root(root, name):
    if not isinstance(root, str) or not root.startswith("/"):
        raise ResetError(f"{name} ({root!r}) is not an absolute path: give /sys and /proc, or a sandbox host's sys/ "
                         "and proc/ directories")
    if not os.path.isdir(root):
        raise ResetError(f"{name} {root} does not exist or is not a directory")
    return os.path.realpath(root)


def _inside(path, root_real, root):
    """Resolve path; refuse it when it leads out of root (a symlink out of the tree)."""
    real = os.path.realpath(path)
    if real != root_real and not real.startswith(root_real.rstrip(os.sep) + os.sep):
        raise ResetError(f"{path} leads outside {root} (a symlink out of the tree, to {real}): refusing to touch it; "
                         "fix the tree (recapture or rebuild the sandbox host)")
    return real


def _link_name(path, root_real, root):
    """The last part of a symlink's target inside the tree (a driver's or group's name); None without the link."""
    try:
        target = os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise ResetError(f"{path} should be a symlink (as in the kernel's sysfs) but is not") from None
        raise ResetError(f"cannot read link {path}: {exc.strerror}") from None
    _inside(path, root_real, root)
    return os.path.basename(target.rstrip(os.sep))


def check_roots(sysfs_root, procfs_root):
    """Refuse roots that are not a sysfs and a procfs tree (before any device: a wrong root is the task's error, not
    every device's). Returns the real path of sysfs_root."""
    root_real = _real_root(sysfs_root, "sysfs_root")
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    if not os.path.isdir(devices):
        raise ResetError(f"{sysfs_root} is not a sysfs tree: {devices} is missing; give /sys or a sandbox host's sys/")
    _real_root(procfs_root, "procfs_root")
    if not os.path.isfile(os.path.join(procfs_root, "cmdline")):
        raise ResetError(f"{procfs_root} is not a procfs tree ({procfs_root}/cmdline is missing): give /proc or a "
                         "sandbox host's proc/")
    return root_real


def read_device(sysfs_root, address):
    """What sysfs shows of a device now: {address, path, present, driver, iommu_group, cdevs (its vfio cdev names),
    reset_path (the real path of its ``reset``, a regular file inside the root; None without one)}."""
    if not pci_address.is_address(address):
        raise ResetError(f"{address!r} is not a PCI address like 0000:27:00.0")
    root_real = _real_root(sysfs_root, "sysfs_root")
    path = os.path.join(sysfs_root, "bus", "pci", "devices", address)
    view = dict(address=address, path=path, present=False, driver=None, iommu_group=None, cdevs=[], reset_path=None)
    if not os.path.lexists(path):
        return view
    base = _inside(path, root_real, sysfs_root)
    if not os.path.isdir(base):
        raise ResetError(f"{path} is not a device directory (as the kernel's sysfs has it)")
    view["present"] = True
    view["driver"] = _link_name(os.path.join(base, "driver"), root_real, sysfs_root)
    view["iommu_group"] = _link_name(os.path.join(base, "iommu_group"), root_real, sysfs_root)
    cdev_dir = os.path.join(base, "vfio-dev")
    if os.path.isdir(cdev_dir):
        _inside(cdev_dir, root_real, sysfs_root)
        view["cdevs"] = sorted(name for name in os.listdir(cdev_dir) if name.startswith("vfio"))
    reset = os.path.join(base, "reset")
    if os.path.lexists(reset):
        real = _inside(reset, root_real, sysfs_root)
        try:
            mode = os.stat(real).st_mode
        except OSError as exc:
            raise ResetError(f"cannot read {reset}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            raise ResetError(f"{reset} is not a regular file, as the kernel's sysfs attributes are: refusing to "
                             "write it")
        view["reset_path"] = real
    return view


def find_holders(procfs_root, nodes):
    """The processes holding one of these device nodes open, from every ``<procfs_root>/<pid>/fd/*`` link:
    (holders [{pid, comm, fd, target}], unreadable [{path, error}]). A process that ends meanwhile is left out; an
    fd directory that cannot be read is noted (no answer is not "nobody")."""
    holders, unreadable = [], []
    if not nodes:
        return holders, unreadable
    try:
        pids = sorted((p for p in os.listdir(procfs_root) if p.isdigit()), key=int)
    except OSError as exc:
        raise ResetError(f"cannot list {procfs_root}: {exc.strerror}") from None
    for pid in pids:
        fd_dir = os.path.join(procfs_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        except OSError as exc:
            unreadable.append(dict(path=fd_dir, error=exc.strerror or str(exc)))
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue  # closed meanwhile
            if holds(target, nodes):
                holders.append(dict(pid=int(pid), comm=_comm(procfs_root, pid), fd=int(fd) if fd.isdigit() else fd,
                                    target=target))
    return holders, unreadable


def _comm(procfs_root, pid):
    try:
        with open(os.path.join(procfs_root, pid, "comm"), encoding="utf-8", errors="replace") as handle:
            return handle.read(64).strip() or None
    except OSError:
        return None


def write_reset(path):
    """Write ``1`` to a device's ``reset`` (a real path read_device checked): the kernel resets the device. Never
    creates a file, never follows a link; an error is a ResetError with the kernel's words."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ResetError(f"cannot open {path} for writing: {exc.strerror}; run as root (the play's become: true)") \
            from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ResetError(f"{path} is not a regular file: refusing to write it")
        os.write(fd, b"1")
    except OSError as exc:
        raise ResetError(f"writing 1 to {path} failed: {exc.strerror} (the kernel could not reset the device)") \
            from None
    finally:
        os.close(fd)
