"""Find, in a kernel log, the kernel's own complaints about its command line.

A command line the kernel rejects or ignores must fail the test with the kernel's message, not with
a later symptom. The kernel (6.1) words them as:

* ``Unknown kernel command line parameters "foo bar=1", will be passed to user space.`` (init/main.c)
* ``DMAR: Unknown option - '1'`` / ``AMD-Vi: Unknown option - 'on'`` (the vendor IOMMU parsers; note
  that the Intel one matches prefixes: ``intel_iommu=onn`` is taken as ``on`` without a word)
* ``Malformed early option 'x'`` (init/main.c)
* ``vfio_pci: unknown parameter 'idz' ignored`` (a module loaded with an option it does not have,
  e.g. from ``vfio-pci.idz=`` on the command line, which kmod passes on)
* ``Unknown parameter `x'`` and ``` `v' invalid for parameter `x'``` (kernel/params.c)
* ``vfio_pci: invalid id string "..."`` / ``failed to add dynamic id`` (vfio-pci's ids= parser)

Arguments meant for the initramfs (``rd.*``, dracut's) and GRUB's ``BOOT_IMAGE=`` are passed to
user space on purpose: listing them as unknown is expected, not a rejection.
"""

from __future__ import annotations

import re

USERSPACE_PREFIXES = ("rd.", "BOOT_IMAGE=")

UNKNOWN_PARAMETERS = re.compile(r'Unknown kernel command line parameters "(?P<args>[^"]*)", will be passed to user space')
COMPLAINTS = [
    re.compile(r"\bUnknown option - '[^']*'"),
    re.compile(r"\bMalformed early option '[^']*'"),
    re.compile(r"\bunknown parameter '[^']*' ignored"),
    re.compile(r"\bUnknown parameter `[^']*'"),
    re.compile(r"`[^']*' invalid for parameter `[^']*'"),
    re.compile(r"\binvalid id string\b"),
    re.compile(r"\bfailed to add dynamic id\b"),
]
TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def cmdline_complaints(dmesg: str) -> list[str]:
    """Return the kernel log lines (timestamps removed) in which the kernel rejects or ignores an argument."""
    found = []
    for raw in dmesg.splitlines():
        line = TIMESTAMP.sub("", raw).strip()
        match = UNKNOWN_PARAMETERS.search(line)
        if match:
            if [arg for arg in match.group("args").split() if not arg.startswith(USERSPACE_PREFIXES)]:
                found.append(line)
            continue
        if any(pattern.search(line) for pattern in COMPLAINTS):
            found.append(line)
    return found


def passed_to_userspace(dmesg: str) -> list[str]:
    """Arguments the kernel said it passes to user space (rd.* and the like included)."""
    args = []
    for line in dmesg.splitlines():
        match = UNKNOWN_PARAMETERS.search(line)
        if match:
            args.extend(match.group("args").split())
    return args


def assert_cmdline_accepted(dmesg: str, cmdline: str) -> None:
    """Raise AssertionError quoting the kernel when it rejected or ignored part of ``cmdline``."""
    complaints = cmdline_complaints(dmesg)
    if complaints:
        raise AssertionError(
            f"the kernel rejected or ignored part of the command line `{cmdline}`; it logged:\n  "
            + "\n  ".join(complaints)
        )
