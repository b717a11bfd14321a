"""One reader for every address the project takes (plugins/module_utils/common/addresses.py): the BMC's host[:port],
the coordination service's URL and a cloud's auth_url all refuse a port 0 (never replaced by the default), a host
that is no name nor IP address, and credentials (never shown); IPv6 literals stay in their brackets in every
message. Examples with the bad inputs themselves, and a property test over hosts and ports."""

from __future__ import annotations

import ipaddress
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ogc_testlib import collection_module, collection_plugin

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import addresses
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import backend as be

checks = collection_plugin("filter", "passthrough_host_checks")
os_flavors = collection_module("os_flavors")


@pytest.mark.parametrize("authority, host, port", [
    ("10.0.0.21", "10.0.0.21", None), ("bmc-h1.example:8443", "bmc-h1.example", 8443),
    ("[2001:db8::21]:443", "2001:db8::21", 443), ("[fe80::1%eth0]", "fe80::1%eth0", None), ("etcd_1", "etcd_1", None),
])
def test_an_authority_is_read_into_host_and_port(authority, host, port):
    address = addresses.parse_authority(authority, "v")
    assert (address.host, address.port, address.authority) == (host, port, authority)


@pytest.mark.parametrize("authority, words", [
    ("etcd:0", "the port is 0, which the system takes for 'any port'"),
    ("etcd:", "the port '' is no number"),
    ("etcd:65536", "the port is 65536, above 65535"),
    ("etcd:２３７９", "the port '２３７９' is no number"),
    ("10.0.0.300", "holds 10.0.0.300, which is no IPv4 address"),
    ("[10.0.0.1]", "holds [10.0.0.1] in brackets, which only an IPv6 address takes"),
    ("[2001:db8::zz]:1", "holds [2001:db8::zz], which is no IPv6 address"),
    ("[2001:db8::1", "without its closing ']'"),
    ("2001:db8::1:2379", "holds an IPv6 address without brackets, so its port cannot be told apart: give "
                         "[2001:db8::1:2379]"),
    ("bmc!.example", "which is no host name"),
    ("-bmc", "which is no host name"),
    ("a" * 64 + ".example", "which is no host name"),
    ("", "names no host"),
    ("bmc one", "holds spaces"),
    ("user:pw@bmc", "carries credentials"),
])
def test_a_bad_authority_is_refused_naming_the_variable(authority, words):
    with pytest.raises(addresses.AddressError) as exc:
        addresses.parse_authority(authority, "the_variable")
    assert str(exc.value).startswith("the_variable") and words in str(exc.value) and "pw" not in str(exc.value)


@given(host=st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str),
                      st.from_regex(r"\A[a-z]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z][a-z0-9]{0,9}){0,3}\Z")),
       port=st.one_of(st.none(), st.integers(1, 65535)))
def test_every_host_and_port_reads_back_and_is_shown_as_given(host, port):
    authority = addresses.host_in_url(host) + (f":{port}" if port is not None else "")
    address = addresses.parse_url(f"etcd3+http://{authority}/p", "v", ("etcd3+http",))
    assert (address.host, address.port) == (host, port)
    assert address.shown == f"etcd3+http://{authority}/p"
    if ":" in host:
        assert ipaddress.IPv6Address(address.host) and address.shown.startswith(f"etcd3+http://[{host}]")


@given(port=st.integers(-10, 0) | st.integers(65536, 10 ** 6))
def test_no_port_outside_1_to_65535_is_taken(port):
    with pytest.raises(addresses.AddressError, match="bad host or port"):
        addresses.parse_authority(f"etcd:{port}", "v")


# ---- the three callers ---------------------------------------------------------------------------------------------

def test_the_bmc_address_is_read_by_the_one_reader():
    assert locations.bmc_address("https://[2001:db8::21]:8443/") == ("[2001:db8::21]:8443", None)
    assert locations.bmc_address("2001:db8::21") == ("[2001:db8::21]", None)  # no port can follow: bracketed
    for bad, words in (("bmc:0", "the port is 0"), ("10.0.0.256", "no IPv4 address"), ("bmc:http", "is no number"),
                       ("[2001:db8::zz]", "no IPv6 address")):
        address, problem = locations.bmc_address(bad)
        assert address is None and problem.startswith(f"passthrough_host_bmc_address ({bad}) has a bad host or port")
        assert words in problem
    errors = checks.var_errors({"passthrough_host_root": "/", "passthrough_host_reboot_timeout": 600,
                                "passthrough_host_bmc_address": "bmc:0", "passthrough_host_bmc_username": "u",
                                "passthrough_host_bmc_password": "p"}, "h1", family="Debian")
    assert errors == ["h1: passthrough_host_bmc_address (bmc:0) has a bad host or port: the port is 0, which the "
                      "system takes for 'any port' (no service listens there); give the service's port (1 to 65535), "
                      "or leave ':<port>' out for the default (the BMC's host[:port], e.g. 10.0.0.21, "
                      "[2001:db8::21]:8443 or bmc-h1.example:8443)."]


def test_the_coordination_url_is_read_by_the_one_reader_port_0_refused_ipv6_kept():
    with pytest.raises(be.BackendError) as exc:
        be.parse_url("etcd3+http://etcd.example:0")
    assert str(exc.value).startswith("passthrough_rollout_coordination_url (etcd3+http://etcd.example:0) has a bad "
                                     "host or port: the port is 0")
    kind, settings, shown = be.parse_url("etcd3+https://[2001:db8::5]:2379/fleet?ca_cert=/ca")
    assert (kind, settings["host"], settings["port"], shown) == ("etcd", "2001:db8::5", 2379,
                                                                 "etcd3+https://[2001:db8::5]:2379/fleet")
    assert be.parse_url("etcd3+http://[::1]")[2] == "etcd3+http://[::1]"
    assert be.open_backend("etcd3+http://[::1]:2379").shown == "etcd3+http://[::1]:2379/open-gpu-cloud"[:-15]
    with pytest.raises(be.BackendError, match=r"\(etcd3\+http://\[2001:db8::5\]:2379\) has unknown option"):
        be.parse_url("etcd3+http://[2001:db8::5]:2379?x=1")
    assert checks.rollout_var_errors({"passthrough_rollout_coordination_url": "etcd3+http://etcd:0"}, "h1")[0] \
        .startswith("h1: passthrough_rollout_coordination_url (etcd3+http://etcd:0) has a bad host or port")


def test_a_cloud_s_auth_url_is_read_by_the_one_reader(run_module, conn):
    for url, words in (("https://keystone.example:0/v3", "the port is 0"),
                       ("https://admin:Sup3r@keystone.example/v3", "carries credentials"),
                       ("ftp://keystone.example/v3", "uses ftp://"),
                       ("https://[2001:db8::9:5000/v3", "without its closing ']'")):
        result = run_module(os_flavors, {"auth": {"auth_url": url, "username": "admin", "password": "x"},
                                         "flavors": []})
        assert result["failed"] is True and result["msg"].startswith("auth.auth_url") and words in result["msg"]
        assert "Sup3r" not in json.dumps(result["msg"]) and not conn.connect_mock.called


# ---- the lease TTL against the backend's own limit, before any host is touched -------------------------------------

@pytest.mark.parametrize("url, ttl, refused", [
    ("file:///var/lib/ogc/coordination", 86_400, False), ("file:///var/lib/ogc/coordination", 86_401, True),
    ("file:///var/lib/ogc/coordination", 3_155_760_000, True),  # a century
    ("etcd3+http://etcd:2379", 9_000_000_000, False), ("etcd3+http://etcd:2379", 9_000_000_001, True),
])
def test_the_lease_ttl_is_checked_against_the_backend_s_limit_in_the_check_entry_point(url, ttl, refused):
    errors = checks.rollout_var_errors({"passthrough_rollout_coordination_url": url,
                                        "passthrough_rollout_lease_ttl": ttl}, "h1")
    if not refused:
        assert errors == []
        return
    why = ("etcd's own limit, MaxLeaseTTL" if url.startswith("etcd") else
           "the longest this project lets a dead control host hold its slots on a directory backend")
    limit = "9,000,000,000" if url.startswith("etcd") else "86,400"
    assert errors == [f"h1: passthrough_rollout_lease_ttl ({ttl}) is outside what {be.parse_url(url)[2]} takes: from 5 "
                      f"to {limit} s ({why}). A dead control host's slots stay held this long: give seconds, e.g. 60."]


def test_a_file_backend_grants_no_lease_beyond_its_limit(tmp_path):
    backend = be.FileBackend(str(tmp_path / "c"))
    with pytest.raises(be.BackendError, match=r"passthrough_rollout_lease_ttl \(86401\) is outside what file://"):
        backend.grant(1, 86_401, {})
    assert not (tmp_path / "c").exists()
