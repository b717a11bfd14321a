"""Checks and cleaning of what comes from the inventory, as filters: thin adapters over plugins/module_utils/common/locations.py
(host names as file names, absolute paths, writable directories, the BMC address) and plugins/module_utils/common/redact.py
(credentials on a kernel command line, a known secret in a message).

* ``hosts | open_gpu_cloud.toolkit.ogc_host_name_errors``: a message per inventory name that cannot be a file name;
* ``{variable: value} | open_gpu_cloud.toolkit.ogc_path_errors(host, optional=[names])``: a message per path variable that is not
  absolute (those in ``optional`` may be empty);
* ``{variable: directory} | open_gpu_cloud.toolkit.ogc_writable_dir_errors(host)``: a message per directory on the control host this
  user cannot write into (a missing one is fine: it is created);
* ``address | open_gpu_cloud.toolkit.ogc_bmc_address``: the BMC's ``host[:port]`` (an ``https://`` taken off); ``ogc_bmc_address_errors``
  the refusal, if any;
* ``address | open_gpu_cloud.toolkit.ogc_without_credentials``: an address or URL as it may be shown (user information masked);
* ``text | open_gpu_cloud.toolkit.ogc_redact``: credentials masked; ``text | open_gpu_cloud.toolkit.ogc_mask_secret(secret)``: a secret masked where it
  stands as a token of its own.
"""

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""


def host_name_errors(hosts):
    """``Host <name>: ...`` for each inventory name of ``hosts`` that cannot be a file name."""
    if isinstance(hosts, str):
        hosts = [hosts]
    out = []
    for host in hosts or []:
        problem = locations.host_name_problem(host)
        if problem:
            out.append(f"Host {str(host)!r}: {problem}.")
    return out


def path_errors(paths, host, optional=()):
    """``<host>: <variable> (...) is not an absolute path ...`` for each path variable of ``paths``
    ({name: value}) that is not absolute; the names in ``optional`` may be empty."""
    out = []
    for name, value in (paths or {}).items():
        problem = locations.path_problem(name, value, allow_empty=name in (optional or ()))
        if problem:
            out.append(f"{host}: {problem}.")
    return out


def writable_dir_errors(paths, host):
    """``<host>: <variable> (...) is not writable by <user>: it is owned by ...`` for each directory of
    ``paths`` ({name: directory}, absolute, on the control host) this user cannot write into."""
    out = []
    for name, value in (paths or {}).items():
        if not isinstance(value, str) or not value.startswith("/"):
            continue  # path_errors reports it
        problem = locations.writable_dir_problem(name, value)
        if problem:
            out.append(f"{host}: {problem}.")
    return out


def bmc_address_errors(value, host):
    """The refusal of a BMC address (a list of at most one message), empty when it is usable or not set."""
    if value in (None, ""):
        return []
    problem = locations.bmc_address(value)[1]
    return [f"{host}: {problem}."] if problem else []


def bmc_address(value):
    """The BMC's ``host[:port]`` for the Redfish modules' ``baseuri``."""
    address, problem = locations.bmc_address(value)
    if problem:
        raise AnsibleFilterError(problem)
    return address


class FilterModule:
    """Inventory input filters."""

    def filters(self):
        return {
            "ogc_host_name_errors": host_name_errors,
            "ogc_path_errors": path_errors,
            "ogc_writable_dir_errors": writable_dir_errors,
            "ogc_bmc_address": bmc_address,
            "ogc_bmc_address_errors": bmc_address_errors,
            "ogc_without_credentials": locations.without_credentials,
            "ogc_redact": redact.redact,
            "ogc_mask_secret": redact.mask_secret,
        }
