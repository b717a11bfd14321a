# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Where things are: the rules for names and paths that come from the inventory, in one place.

* An inventory host name becomes a file name (``<passthrough_plan_dir>/<host>.json``, kolla's
  ``nova/<host>/nova.conf``): ``host_name_problem`` refuses what would leave the directory or not be a
  name at all - an empty name, ``.`` or ``..``, a ``/`` or a NUL character.
* A path variable is absolute (``path_problem``): a relative path would resolve against the directory
  ansible-playbook runs in (the checkout), not where the operator meant.
* A directory the control host writes into (``writable_dir_problem``) exists as a directory this user can
  write, or does not exist yet; the answer names its owner and mode rather than an errno.
* The BMC's address (``bmc_address``) is ``host[:port]``: the Redfish modules put ``https://`` in front
  of it themselves, so an ``https://`` the operator wrote is taken off; any other scheme, or a path, is refused.
  Credentials written into an address are refused, and never echoed (``without_credentials``). Its host and port
  are read by ``addresses.parse_authority``, the one reader of every address the project takes (a port 0, a host
  that is no name or IP address, refused; an IPv6 address given in brackets, for the Redfish modules' URL).
* Two path variables name two separate files (``same_or_nested``): a lock that is the state file, or its directory,
  would replace it.
* What the project trusts on the control host (the coordination directory and its records, the keepers' runtime
  directory, a client certificate) can be written by this user alone (``foreign_write_problem``): owned by this user,
  not writable by group or others, and every directory above it owned by this user or root and not writable by group
  or others unless sticky (as /tmp is) - the rule OpenSSH's StrictModes applies to ~/.ssh. Whoever else could write
  it could delete a reboot slot (more hosts reboot at once than a wave allows) or plant a stop record.

Every function returns a problem in words (naming the variable and the host) or None, so the callers (the
roles' preflight filters, the plan loader) report every problem of a host at once.
"""

from __future__ import annotations

import os
import pwd
import stat

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import addresses
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common.addresses import without_credentials

__all__ = ["host_name_problem", "path_problem", "writable_dir_problem", "bmc_address", "same_or_nested",
           "without_credentials", "foreign_write_problem"]


def host_name_problem(host):
    """Why the inventory name ``host`` cannot be a file name, or None."""
    if not isinstance(host, str) or not host:
        return f"the inventory host name {host!r} is empty or not a string"
    bad = []
    if host in (".", ".."):
        bad.append(f"is {host!r}")
    if "/" in host:
        bad.append("holds a '/'")
    if "\0" in host:
        bad.append("holds a NUL character")
    if not bad:
        return None
    shown = host.replace("\0", "\\0")
    return (f"the inventory host name {shown!r} {' and '.join(bad)}: it names the host's files "
            "(<passthrough_plan_dir>/<host>.json, kolla's nova/<host>/nova.conf), so it must be a plain file name. "
            "Rename the host in the inventory (ansible_host keeps its address)")


def path_problem(name, value, allow_empty=False):
    """Why the path variable ``name`` with ``value`` is not an absolute path, or None."""
    if allow_empty and (value is None or value == ""):
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        return (f"{name} ({value!r}) is not an absolute path: give it starting with / (a relative path resolves "
                "against the directory ansible-playbook runs in)")
    if "\0" in value:
        return f"{name} holds a NUL character"
    return None


def writable_dir_problem(name, path):
    """Why this user cannot write into the directory ``path`` (variable ``name``), or None; a missing
    directory is no problem (it is created). ``path`` must be absolute (see ``path_problem``)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path.rstrip("/")) or "/"
        while parent != "/" and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if os.path.isdir(parent) and not os.access(parent, os.W_OK | os.X_OK):
            return (f"{name} ({path}) does not exist and {_me()} cannot create it in {parent} "
                    f"({_owner_mode(os.stat(parent))})")
        return None
    except PermissionError:
        parts = [p for p in path.split("/") if p]
        blocking = next(("/" + "/".join(parts[:i]) for i in range(len(parts))
                         if not os.access("/" + "/".join(parts[:i]), os.X_OK)), path)
        return f"{name} ({path}) cannot be reached by {_me()}: {blocking} is {_owner_mode(os.stat(blocking))}"
    except OSError as exc:
        return f"{name} ({path}) cannot be read: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{name} ({path}) is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return (f"{name} ({path}) is not writable by {_me()}: it is {_owner_mode(info)}. Run as its owner, give "
                f"{_me()} write access, or point {name} at a directory of {_me()}'s")
    return None


def _me():
    return _user(os.geteuid())


def _user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _owner_mode(info):
    return f"owned by {_user(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}"


def _fix(path, info):
    me = _me()
    fixes = []
    if info.st_uid != os.geteuid():
        fixes.append(f"chown {me} {path}")
    if stat.S_IMODE(info.st_mode) & 0o022:
        fixes.append(f"chmod go-w {path}")
    return " && ".join(fixes)


def foreign_write_problem(path, what, ancestors=True):
    """Why ``path`` (``what`` it is, for the message: "the coordination directory ...") could be written by a user
    other than this one, or None: it (when it exists) is not this user's, or is writable by group or others; or,
    with ``ancestors``, a directory above it is owned by another user than this one and root, or is writable by group
    or others without the sticky bit. A missing ``path`` is no problem (it is created private). The answer names the
    path, its owner and mode, and the commands that fix it."""
    path = os.path.abspath(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and (info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022):
        return (f"{what} {path} is {_owner_mode(info)}: another user than {_me()} could write it. Make it "
                f"{_me()}'s alone ({_fix(path, info)}), or give a directory of {_me()}'s own")
    if not ancestors:
        return None
    parent = os.path.dirname(path)
    while True:
        try:
            above = os.stat(parent)
        except OSError:
            above = None
        if above is not None:
            foreign_owner = above.st_uid not in (0, os.geteuid())
            open_mode = stat.S_IMODE(above.st_mode) & 0o022 and not above.st_mode & stat.S_ISVTX
            if foreign_owner or open_mode:
                fix = ([f"chown root {parent}"] if foreign_owner else []) + ([f"chmod go-w {parent}"] if open_mode
                                                                             else [])
                return (f"{what} {path} lies in {parent}, which is {_owner_mode(above)}: another user than {_me()} "
                        f"could replace what it holds. Make {parent} {_me()}'s or root's and not writable by group or "
                        f"others ({' && '.join(fix)}), or give a directory elsewhere")
        if parent == "/":
            return None
        parent = os.path.dirname(parent)


def same_or_nested(first, second):
    """How two absolute paths collide - "is the same file as", "is a directory of", "lies inside" - or None when they
    name two separate files (or either is not a path: path_problem reports that)."""
    if not (isinstance(first, str) and isinstance(second, str) and first.startswith("/") and second.startswith("/")):
        return None
    one, two = os.path.normpath(first), os.path.normpath(second)
    if one == two:
        return "is the same file as"
    if two.startswith(one.rstrip("/") + "/"):
        return "is a directory of"
    if one.startswith(two.rstrip("/") + "/"):
        return "lies inside"
    return None


def bmc_address(value):
    """``(address, problem)``: the BMC's ``host[:port]`` for the Redfish modules (which prepend ``https://``)
    from what the operator wrote. ``https://host[:port]`` (with or without a trailing ``/``) gives
    ``host[:port]``; another scheme, a path, a query, user information or spaces are a problem."""
    if not isinstance(value, str):
        return None, f"passthrough_host_bmc_address ({value!r}) is not a string"
    address = value.strip()
    shown = without_credentials(value)
    scheme, sep, rest = address.partition("://")
    if sep:
        if scheme.lower() != "https":
            return None, (f"passthrough_host_bmc_address ({shown}) uses {scheme}://: Redfish is spoken over HTTPS "
                          "only (the password goes with every request); give host[:port], or https://host[:port]")
        address = rest.rstrip("/")
    problems = [what for chars, what in (("/", "a path"), ("?#", "a query"), ("@", "user information"),
                                         (" \t", "spaces")) if any(c in address for c in chars)]
    if problems or not address:
        return None, (f"passthrough_host_bmc_address ({shown}) must be the BMC's host[:port] (e.g. 10.0.0.21 or "
                      f"bmc-h1.example:8443), not {' or '.join(problems) or 'empty'}: the role adds https:// and "
                      "Redfish's /redfish/v1 itself; the user goes in passthrough_host_bmc_username and the password "
                      "in passthrough_host_bmc_password (in the host's vault)")
    try:
        parsed = addresses.parse_authority(address, "passthrough_host_bmc_address", bare_ipv6=True)
    except addresses.AddressError as exc:
        return None, (f"{exc} (the BMC's host[:port], e.g. 10.0.0.21, [2001:db8::21]:8443 or "
                      "bmc-h1.example:8443)")
    return parsed.authority, None
