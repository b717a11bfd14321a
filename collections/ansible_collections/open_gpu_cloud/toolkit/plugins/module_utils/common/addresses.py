# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Every network address the project takes from the inventory, read by one function: the BMC's ``host[:port]``
(passthrough_host_bmc_address), the coordination service's URL (passthrough_rollout_coordination_url) and a cloud's
endpoint (the auth_url of the cloud modules' ``auth``).

``parse_url`` reads ``scheme://authority[/path][?query]`` (``parse_authority`` the authority alone, as the BMC's
address is given) and returns an ``Address``, or raises ``AddressError`` naming the variable, what is wrong and the
form expected. The rules, for every caller alike:

* the host is a DNS name (letters, digits, ``-``, ``_`` and dots; labels of 1 to 63 characters, 253 at most in
  all), an IPv4 address (four numbers 0-255: ``10.0.0.300`` is refused, not looked up as a name), or an IPv6
  literal in brackets (``[2001:db8::1]``; a zone ``%eth0`` is kept) - a bare IPv6 address is taken only where no
  port can follow (``parse_authority(..., bare_ipv6=True)``: the BMC's address);
* the port, when given, is 1 to 65535: ``:0`` (which a socket takes for "any port") and ``:`` with nothing after it
  are refused, never replaced by the default;
* user information (``user:password@``) is refused, and the address is then never shown: it may hold a password;
* ``Address.shown`` is the address as the operator reads it in every message, IPv6 literals kept in their
  brackets (``etcd3+http://[2001:db8::5]:2379/fleet``), never with credentials.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["AddressError", "Address", "parse_authority", "parse_url", "host_in_url", "without_credentials"]

_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


class AddressError(ValueError):
    """An address refused, worded for the operator (it names the variable and never a secret)."""


class Address:
    """A parsed address: ``scheme`` ('' for an authority alone), ``host`` (an IPv6 literal without its brackets),
    ``port`` (None when not given), ``path``, ``query``, ``authority`` (host[:port] as it stands in a URL) and
    ``shown`` (the whole address as messages show it)."""

    def __init__(self, scheme, host, port, path="", query=""):
        self.scheme, self.host, self.port, self.path, self.query = scheme, host, port, path, query
        self.authority = host_in_url(host) + (f":{port}" if port is not None else "")
        self.shown = (f"{scheme}://" if scheme else "") + self.authority + path

    def __repr__(self):
        return f"Address({self.shown!r})"


def host_in_url(host):
    """A host as it stands in a URL: an IPv6 literal in brackets."""
    return f"[{host}]" if ":" in host else host


def without_credentials(value):
    """An address as it may be shown: whatever stands before an ``@`` in its authority (a user, a password) is masked,
    so a refusal never echoes a secret."""
    text = str(value)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        authority = "********@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{tail}"


def _host_problem(host):
    """Why ``host`` (brackets taken off an IPv6 literal) is no host, or None."""
    if not host:
        return "names no host"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return f"holds {host_in_url(host)}, which is no IPv6 address"
        return None
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"holds {host}, which is no IPv4 address (four numbers from 0 to 255)"
        return None
    if len(host.rstrip(".")) > 253 or not all(_LABEL.match(label) for label in host.rstrip(".").split(".")):
        return (f"holds {host!r}, which is no host name (letters, digits, '-' and dots, labels of at most 63 "
                "characters) nor IP address")
    return None


def parse_authority(authority, variable, scheme="", path="", query="", bare_ipv6=False):
    """The ``Address`` of ``host[:port]`` (``[v6]:port`` for an IPv6 literal); AddressError naming ``variable``.
    ``bare_ipv6``: a bare IPv6 address (no brackets, so no port) is taken too."""
    if not isinstance(authority, str):
        raise AddressError(f"{variable} ({authority!r}) is not a string")
    if "@" in authority:
        raise AddressError(f"{variable} carries credentials (user information before an '@'); it is not shown here. "
                           "Give the address alone: the credentials go in variables of their own")
    shown = f"{scheme}://{authority}{path}" if scheme else authority
    if any(c.isspace() for c in authority) or not authority:
        raise AddressError(f"{variable} ({shown!r}) {'holds spaces' if authority else 'names no host'}: give "
                           "host[:port]")
    port_text = None
    if authority.startswith("["):
        host, close, rest = authority[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise AddressError(f"{variable} ({shown}) has an IPv6 literal without its closing ']' or with something "
                               "after it other than :port: give [2001:db8::1]:port")
        port_text = rest[1:] if rest else None
        if ":" not in host:
            raise AddressError(f"{variable} ({shown}) holds [{host}] in brackets, which only an IPv6 address takes")
    elif authority.count(":") > 1:
        if not bare_ipv6:
            raise AddressError(f"{variable} ({shown}) holds an IPv6 address without brackets, so its port cannot be "
                               f"told apart: give [{authority}] (with :port after the ']')")
        host = authority
    else:
        host, colon, port_text = authority.partition(":")
        port_text = port_text if colon else None
    problem = _host_problem(host)
    if problem:
        raise AddressError(f"{variable} ({shown}) has a bad host or port: it {problem}")
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not port_text.isascii():
            raise AddressError(f"{variable} ({shown}) has a bad host or port: the port {port_text!r} is no number; "
                               "give one from 1 to 65535"
                               + (", or leave ':' out for the default" if not port_text else ""))
        port = int(port_text)
        if not 1 <= port <= 65535:
            what = ("0, which the system takes for 'any port' (no service listens there)" if port == 0
                    else f"{port}, above 65535")
            raise AddressError(f"{variable} ({shown}) has a bad host or port: the port is {what}; give the "
                               "service's port (1 to 65535), or leave ':<port>' out for the default")
    return Address(scheme, host, port, path, query)


def parse_url(value, variable, schemes):
    """The ``Address`` of ``scheme://authority[/path][?query]``, its scheme one of ``schemes``; AddressError naming
    ``variable`` for anything else (a ``#fragment`` included). The scheme is compared without case and returned in
    lower case."""
    if not isinstance(value, str):
        raise AddressError(f"{variable} ({value!r}) ({type(value).__name__}) must be a URL string")
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise AddressError(f"{variable} ({without_credentials(value)}) is not a URL: give "
                           f"{' or '.join(f'{s}://<host>[:<port>]' for s in schemes)}")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise AddressError(f"{variable} carries credentials (user information before an '@'); the URL is not shown "
                           "here. Give the address alone: the credentials go in variables of their own")
    tail = rest[len(authority):]
    if "#" in tail:
        raise AddressError(f"{variable} ({without_credentials(value.split('#', 1)[0])}) has a #fragment: remove it")
    path, _q, query = tail.partition("?")
    if scheme.lower() not in schemes:
        raise AddressError(f"{variable} ({without_credentials(value)}) uses {scheme or 'no'}://: give "
                           f"{' or '.join(f'{s}://' for s in schemes)}")
    return parse_authority(authority, variable, scheme.lower(), path, query)
