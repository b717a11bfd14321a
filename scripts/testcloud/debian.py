"""Debian packages the test cloud's servers come from (MariaDB, RabbitMQ), installed on first use.

scripts/setup-system.sh installs them for the test command (requirements/debian-packages.txt); this covers the
demo (scripts/demo.sh starts a test cloud and installs nothing by hand) and a cloud started alone.
"""

import os
import shutil
import subprocess


class PackageError(Exception):
    """A package the test cloud needs is missing and cannot be installed: the message says what to install."""


def ensure_installed(programs, packages, log, access=os.X_OK):
    """Install PACKAGES (apt-get update, then install --no-install-recommends) when one of PROGRAMS (paths) is
    missing; needs root and apt-get. The command lines and their output go to LOG. ACCESS is what each path must
    allow: executing (programs), or reading (os.R_OK, data files)."""
    if all(os.access(path, access) for path in programs):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PackageError(f"{', '.join(p for p in programs if not os.access(p, access))} missing and cannot be "
                           f"installed here (needs root and apt-get): install the Debian packages "
                           f"{' '.join(packages)} (scripts/setup-system.sh does), then start again")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(log, "a", encoding="utf-8") as out:
        # Without an init system the packages start no server; the test cloud starts its own.
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
            out.write(f"\n$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
            if proc.returncode:
                raise PackageError(f"`{' '.join(argv)}` exited {proc.returncode}; see {log}")
    missing = [path for path in programs if not os.access(path, access)]
    if missing:
        raise PackageError(f"{' '.join(packages)} installed, but {', '.join(missing)} missing")
