# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Where the fleet-wide records live, named by one URL (``passthrough_rollout_coordination_url``):

* ``file:///var/lib/open-gpu-cloud/coordination``: a directory on the control host (mode 0700, records 0600),
  every change under a flock of ``<dir>/.lock``. For one control host: a flock on a network file system is no
  guarantee, so several control hosts (AWX execution nodes) use a service.
* ``etcd3+http://host:2379[/prefix]``, ``etcd3+https://...?ca_cert=...&cert_cert=...&cert_key=...``: etcd v3 (the
  etcd kolla-ansible deploys with ``enable_etcd``, the URL form OpenStack's services give tooz), through its JSON
  gateway with OpenStack's own client, etcd3gw. Keys live under the prefix (default ``/open-gpu-cloud``).

Both keep the same things, in the same shape:

* leases: a run holds one (``grant``, with an id derived from the run, so every task of the run names the same),
  renews it (``keepalive``: its keeper does, every third of its TTL) and gives it back (``revoke``). A lease that is
  not renewed runs out: etcd deletes what it carries; the directory's records count as gone once their lease file's
  expiry has passed (and are cleared at the next change);
* the reboot slots, ``{index: record}``, each carried by its holder's lease (``read`` gives them with their
  ``expires``, on this control host's clock);
* the stop record (no lease: it is history, not a hold).

Only these records are read: any other key under the etcd prefix (or file in the directory) is another tool's, and
is ignored, never refused - a key the project never wrote stops no slot request.

A change is optimistic: ``read`` returns a view; ``commit(view, ...)`` applies puts and deletes only if no slot and
no stop record changed since that view (etcd: one transaction comparing the revisions of the whole slot range and
the stop key; the directory: the same comparison under the flock), else it returns False and the caller reads
again. Every request has a connect and a read timeout; a service that cannot be reached raises ``Unavailable``
naming it (the URL as shown, never with credentials: a URL that carries any is refused when it is parsed).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import stat
import tempfile
import time
from urllib.parse import parse_qs, urlsplit

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import addresses
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import locations
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.coordination import leases

__all__ = ["BackendError", "Unavailable", "LeaseLost", "View", "parse_url", "open_backend", "FileBackend",
           "EtcdBackend", "lease_id_of", "VARIABLE", "trust_problem", "ttl_problem", "MAX_TTL", "MIN_TTL",
           "wave_problem", "MAX_WAVE"]

VARIABLE = "passthrough_rollout_coordination_url"
ETCD_OPTIONS = ("ca_cert", "cert_cert", "cert_key")
DEFAULT_PREFIX = "/open-gpu-cloud"


class BackendError(leases.LeaseError):
    """The backend refused a request, or its URL is wrong."""


class Unavailable(BackendError):
    """The backend cannot be reached (refused, timed out, gone)."""


class LeaseLost(BackendError):
    """The run's lease is gone: it ran out (not renewed in time) or was revoked."""


class View:
    """What ``read`` saw: ``slots`` {index: record with ``expires``}, ``stop`` (record or None), ``now`` (this
    control host's clock) and ``token`` (what ``commit`` compares)."""

    def __init__(self, slots, stop, now, token):
        self.slots = slots
        self.stop = stop
        self.now = now
        self.token = token


def lease_id_of(run):
    """The lease id of a run (its ``run`` digest, 16 hex digits): a positive 63-bit integer, as etcd takes it."""
    return int(run, 16) & 0x7FFFFFFFFFFFFFFF or 1


def _shown(parts):
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"


def parse_url(url):
    """``(kind, settings, shown)`` of a coordination URL; BackendError naming the variable and the fix for anything
    else. Credentials in the URL are refused without being shown. An etcd URL's host and port are read by
    common/addresses.py (the one reader of every address: a port 0 refused, not replaced by the default; an IPv6
    literal kept in its brackets in ``shown``)."""
    if not isinstance(url, str) or not url:
        raise BackendError(f"{VARIABLE} ({url!r}) must be a URL: file:///<directory> on one control host, or "
                           "etcd3+http://<host>:2379 for several")
    if "://" not in url:
        shown = url if "@" not in url else "..."
        hint = f"file://{url}" if url.startswith("/") else "file:///<directory> or etcd3+http://<host>:2379"
        raise BackendError(f"{VARIABLE} ({shown}) is not a URL: give {hint}")
    authority = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "@" in authority:
        raise BackendError(
            f"{VARIABLE} carries credentials (user information before an '@'); the URL is not shown here. Give "
            "the address alone (etcd3+https://<host>:2379): the coordination service is reached with a client "
            "certificate (?ca_cert=...&cert_cert=...&cert_key=...), never with a password in a variable that ends "
            "up in logs")
    scheme = url.split("://", 1)[0].lower()
    if scheme in ETCD_SCHEMES:
        return _parse_etcd(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise BackendError(f"{VARIABLE} is not a URL this version reads (a bad host or port); it is not shown "
                           "here in case it holds a secret. Give file:///<directory> or etcd3+http://<host>:2379") \
            from None
    if parts.fragment:
        raise BackendError(f"{VARIABLE} ({_shown(parts)}) has a #fragment: remove it")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query:
            raise BackendError(f"{VARIABLE} ({_shown(parts)}) must be file:///<absolute directory>, with no host or "
                               "query")
        if not parts.path.startswith("/") or parts.path.rstrip("/") == "":
            raise BackendError(f"{VARIABLE} ({url}) must name an absolute directory other than /: "
                               "file:///var/lib/open-gpu-cloud/coordination")
        return "file", {"path": os.path.normpath(parts.path)}, f"file://{os.path.normpath(parts.path)}"
    raise BackendError(f"{VARIABLE} ({_shown(parts) if parts.scheme else '...'}) uses a scheme this version does "
                       "not read: give file:///<directory> (one control host) or etcd3+http(s)://<host>:2379 "
                       "(several control hosts: kolla-ansible's etcd)")


ETCD_SCHEMES = ("etcd3+http", "etcd3+https")


def _parse_etcd(url):
    try:
        address = addresses.parse_url(url, VARIABLE, ETCD_SCHEMES)
    except addresses.AddressError as exc:
        raise BackendError(str(exc)) from None
    query = parse_qs(address.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(ETCD_OPTIONS))
    if unknown:
        raise BackendError(f"{VARIABLE} ({address.shown}) has unknown option(s) {', '.join(unknown)}; known: "
                           f"{', '.join(ETCD_OPTIONS)} (the client certificate of etcd3+https)")
    options = {key: values[-1] for key, values in query.items()}
    for key, value in options.items():
        if not value.startswith("/"):
            raise BackendError(f"{VARIABLE} ({address.shown}): {key} must be an absolute path on the control host")
    if ("cert_cert" in options) != ("cert_key" in options):
        raise BackendError(f"{VARIABLE} ({address.shown}): give cert_cert and cert_key together")
    if options and address.scheme != "etcd3+https":
        raise BackendError(f"{VARIABLE} ({address.shown}): {', '.join(sorted(options))} only go with etcd3+https")
    prefix = address.path.rstrip("/") or DEFAULT_PREFIX
    settings = dict(host=address.host, port=address.port or 2379, protocol=address.scheme.split("+", 1)[1],
                    prefix=prefix, **options)
    return "etcd", settings, address.shown


# The lease TTLs (seconds) each backend takes: etcd's own limit (MaxLeaseTTL in its lease/lessor.go, 9,000,000,000 s;
# etcd 3.4 answers "etcdserver: too large lease TTL" above it), and for the directory one day - the longest a dead
# control host may be let hold its slots: beyond a day a TTL is a unit mistaken (milliseconds for seconds), not a
# choice. Both at least 5 s (etcd raises a shorter TTL to its own least, about 2 s, silently).
MIN_TTL = 5
MAX_TTL = {"etcd": 9_000_000_000, "file": 86_400}
TTL_VARIABLE = "passthrough_rollout_lease_ttl"


def ttl_problem(kind, ttl, shown):
    """Why ``ttl`` cannot be a lease TTL on the backend of kind ``kind`` (``shown``: its URL as shown), or None. A
    wrong type is refused, never converted."""
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        return f"{TTL_VARIABLE} ({ttl!r}, {type(ttl).__name__}) must be an int of seconds"
    if not MIN_TTL <= ttl <= MAX_TTL[kind]:
        what = "etcd's own limit, MaxLeaseTTL" if kind == "etcd" else \
            "the longest this project lets a dead control host hold its slots on a directory backend"
        return (f"{TTL_VARIABLE} ({ttl}) is outside what {shown} takes: from {MIN_TTL} to {MAX_TTL[kind]:,} s "
                f"({what}). A dead control host's slots stay held this long: give seconds, e.g. 60")
    return None


# A wave's reboot slots are taken in one transaction, a put per host of the wave (slots.acquire: all or none). etcd runs
# a transaction of at most 128 operations (its --max-txn-ops, 128 unless its server is started with another; beyond
# it answers "etcdserver: too many operations in txn request"); a directory backend has no such limit.
MAX_WAVE = {"etcd": 128}
BATCH_VARIABLE = "passthrough_rollout_reboot_batch"


def wave_problem(kind, hosts, shown):
    """Why a wave of ``hosts`` hosts of this run cannot take its reboot slots on the backend of kind ``kind``
    (``shown``: its URL as shown), or None."""
    limit = MAX_WAVE.get(kind)
    if limit is None or hosts <= limit:
        return None
    return (f"{BATCH_VARIABLE} gives a wave of {hosts} hosts, and {shown} takes a wave's reboot slots in one "
            f"transaction of at most {limit} operations (etcd's --max-txn-ops, {limit} unless its server is started "
            f"with another): give a batch of at most {limit} hosts, e.g. {{\"{BATCH_VARIABLE}\": {limit}}}")


def trust_problem(kind, settings):
    """Why what the backend of ``(kind, settings)`` (parse_url's) reads on the control host could be written by
    another user (locations.foreign_write_problem): the directory of a file backend, the client certificate and key
    of an etcd one; or None."""
    if kind == "file":
        return locations.foreign_write_problem(settings["path"], "the coordination directory")
    for option in ETCD_OPTIONS:
        if settings.get(option):
            problem = locations.foreign_write_problem(settings[option], f"the {option} file")
            if problem:
                return problem
    return None


def open_backend(url, connect_timeout=10, read_timeout=30):
    """The backend a URL names (parse_url)."""
    kind, settings, shown = parse_url(url)
    if kind == "file":
        return FileBackend(settings["path"], shown, lock_timeout=read_timeout)
    return EtcdBackend(settings, shown, connect_timeout, read_timeout)


# ---- a directory on one control host ---------------------------------------------------------------------------

_SLOT = "slot-"
_LEASE = "lease-"
_STOP = "stopped.json"
_FLOCK = ".lock"


class FileBackend:
    """The records in a directory of the control host (see the module's docstring)."""

    def __init__(self, path, shown=None, clock=time.time, lock_timeout=30):
        self.lock_timeout = lock_timeout
        self.path = path
        self.shown = shown or f"file://{path}"
        self.clock = clock

    def problem(self):
        """Why the directory cannot hold the records (a symbolic link, not a directory, writable by another user than
        this one: trust_problem), or None."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return f"{self.path} is a symbolic link: give the real directory, so that every run agrees on it"
        if not stat.S_ISDIR(info.st_mode):
            return f"{self.path} exists and is not a directory"
        return trust_problem("file", {"path": self.path})

    def check(self):
        """Refuse a path that is a symlink, not a directory or writable by another user (before anything is read or
        written)."""
        problem = self.problem()
        if problem:
            raise BackendError(f"{VARIABLE} ({self.shown}): {problem}")

    class _Flock:
        def __init__(self, backend, create):
            self.backend = backend
            self.create = create
            self.handle = None

        def __enter__(self):
            self.backend.check()
            if not os.path.isdir(self.backend.path):
                if not self.create:
                    return self
                os.makedirs(self.backend.path, mode=0o700, exist_ok=True)
            fd = os.open(os.path.join(self.backend.path, _FLOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            self.handle = os.fdopen(fd, "r+")
            started = time.monotonic()
            while True:  # bounded: a process that keeps the flock (stopped, or on a loaded host) fails the request
                try:
                    fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return self
                except BlockingIOError:
                    if time.monotonic() - started >= self.backend.lock_timeout:
                        self.handle.close()
                        self.handle = None
                        raise Unavailable(
                            f"the coordination directory {self.backend.shown}: its lock {self.backend.path}/{_FLOCK} "
                            f"stayed held by another process for {time.monotonic() - started:.1f} s (measured), "
                            f"longer than {self.backend.lock_timeout} s (passthrough_rollout_coordination_read_timeout)"
                            f"; find it with: fuser {self.backend.path}/{_FLOCK}. A change there takes milliseconds: "
                            "a process stopped while holding it (SIGSTOP, a debugger) must go on or end; on a control "
                            "host that loaded, raise passthrough_rollout_coordination_read_timeout") from None
                    time.sleep(0.01)

        def __exit__(self, *exc):
            if self.handle is not None:
                self.handle.close()  # closing drops the flock

    def _load(self, name):
        path = os.path.join(self.path, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise BackendError(f"{VARIABLE} ({self.shown}): {path} cannot be read ({exc.strerror}): it is no record "
                               "of open-gpu-cloud's coordination (a symbolic link?); remove it, after checking that no "
                               "run of playbooks/host.yml is rebooting a host") from None
        with os.fdopen(fd, encoding="utf-8") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
                raise BackendError(f"{VARIABLE} ({self.shown}): {locations.foreign_write_problem(path, 'the record', False)}")
            text = handle.read()
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BackendError(f"{path} is not a record of open-gpu-cloud's coordination (a JSON object): remove it, "
                               "after checking that no run of playbooks/host.yml is rebooting a host")
        return data, text

    def _write(self, name, record):
        fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=self.path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, os.path.join(self.path, name))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _remove(self, name):
        try:
            os.unlink(os.path.join(self.path, name))
        except FileNotFoundError:
            pass

    def _names(self):
        try:
            return sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []

    def _leases(self, now):
        """{lease id: record} of the leases whose expiry has not passed."""
        found = {}
        for name in self._names():
            if name.startswith(_LEASE):
                record, _revision = self._load(name)
                if record is not None and leases.expiry_of(record) > now:
                    found[name[len(_LEASE):]] = record
        return found

    def _snapshot(self, now):
        live = self._leases(now)
        slots, texts = {}, {}
        for name in self._names():
            if name.startswith(_SLOT) and name[len(_SLOT):].isdigit():
                record, text = self._load(name)
                lease = live.get(str(record.get("lease"))) if record is not None else None
                if lease is None:
                    continue  # its lease ran out or was revoked: free
                slots[int(name[len(_SLOT):])] = dict(record, expires=leases.expiry_of(lease))
                texts[name] = text
        stop, stop_text = self._load(_STOP)
        texts[_STOP] = stop_text
        return View(slots, stop, now, json.dumps(texts, sort_keys=True))

    def read(self):
        with self._Flock(self, create=False):
            return self._snapshot(self.clock())

    def commit(self, view, puts=None, deletes=(), lease=None):
        """Apply ``puts`` ({index: record}, carried by ``lease``) and ``deletes`` (indexes) if nothing changed since
        ``view``; False otherwise. LeaseLost when ``lease`` has run out."""
        with self._Flock(self, create=True):
            now = self.clock()
            current = self._snapshot(now)
            if current.token != view.token:
                return False
            if puts and str(lease) not in self._leases(now):
                raise LeaseLost(f"the run's lease {lease} in {self.shown} has run out or was revoked")
            for index in deletes:
                self._remove(f"{_SLOT}{index}")
            for index, record in (puts or {}).items():
                self._write(f"{_SLOT}{index}", dict(record, lease=str(lease)))
            self._sweep(now)
            return True

    def _sweep(self, now):
        """Remove the leases that ran out and the slots they carried."""
        live = self._leases(now)
        for name in self._names():
            if name.startswith(_LEASE) and name[len(_LEASE):] not in live:
                self._remove(name)
            elif name.startswith(_SLOT) and name[len(_SLOT):].isdigit():
                record, _revision = self._load(name)
                if record is None or str(record.get("lease")) not in live:
                    self._remove(name)

    def stop_removal(self):
        """How the operator removes the stop record (a command)."""
        return f"rm {os.path.join(self.path, _STOP)}"

    def put_stop(self, record):
        with self._Flock(self, create=True):
            self._write(_STOP, record)

    def grant(self, lease, ttl, holder):
        """Grant lease ``lease`` for ``ttl`` seconds; False when it exists already (another task of the run)."""
        problem = ttl_problem("file", ttl, self.shown)
        if problem:
            raise BackendError(problem)
        with self._Flock(self, create=True):
            now = self.clock()
            if str(lease) in self._leases(now):
                return False
            self._write(f"{_LEASE}{lease}", dict(holder, lease=str(lease), ttl=ttl, expires=now + ttl))
            return True

    def keepalive(self, lease):
        """Renew the lease for its TTL; the seconds it has now, or -1 when it is gone."""
        with self._Flock(self, create=False):
            now = self.clock()
            record = self._leases(now).get(str(lease))
            if record is None:
                return -1
            self._write(f"{_LEASE}{lease}", dict(record, expires=now + record["ttl"]))
            return record["ttl"]

    def remaining(self, lease):
        """Seconds left of the lease, or -1 when it is gone."""
        with self._Flock(self, create=False):
            now = self.clock()
            record = self._leases(now).get(str(lease))
            return -1 if record is None else leases.expiry_of(record) - now

    def revoke(self, lease):
        """Give the lease back, and everything it carries."""
        with self._Flock(self, create=False):
            self._remove(f"{_LEASE}{lease}")
            self._sweep(self.clock())


# ---- etcd v3 --------------------------------------------------------------------------------------------------

def _b64(text):
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _unb64(text):
    return base64.b64decode(text or "").decode("utf-8")


def _range_end(prefix):
    data = bytearray(prefix.encode("utf-8"))
    data[-1] += 1
    return base64.b64encode(bytes(data)).decode("ascii")


class EtcdBackend:
    """The records as keys of etcd v3 under ``<prefix>/slot/<index>`` (carried by their holder's lease) and
    ``<prefix>/stopped``; leases are etcd's own."""

    def __init__(self, settings, shown, connect_timeout=10, read_timeout=30, clock=time.time):
        # Imported here, not with this file: the filter that checks the URL (parse_url) loads this file in the task
        # worker of each task that calls it, and etcd3gw brings requests with it
        # (tests/unit/test_plugin_import_cost.py). etcd3gw puts an IPv6 host in brackets itself.
        try:
            import etcd3gw
            from etcd3gw import exceptions as etcd_errors
        except ImportError:
            raise BackendError(f"{VARIABLE} ({shown}) names etcd, and the Python package etcd3gw is not installed on "
                               "the control host: install it (pip install etcd3gw; the execution environment has it)"
                               ) from None
        self.errors = etcd_errors
        self.shown = shown
        self.clock = clock
        self.prefix = settings["prefix"]
        self.settings = settings
        self.client = etcd3gw.Etcd3Client(
            host=settings["host"], port=settings["port"], protocol=settings["protocol"],
            ca_cert=settings.get("ca_cert"), cert_cert=settings.get("cert_cert"), cert_key=settings.get("cert_key"),
            timeout=(connect_timeout, read_timeout), api_path="/v3/")
        self.timeouts = (connect_timeout, read_timeout)

    def check(self):
        """Refuse a client certificate or key another user could write (trust_problem)."""
        problem = trust_problem("etcd", self.settings)
        if problem:
            raise BackendError(f"{VARIABLE} ({self.shown}): {problem}")

    def _post(self, path, payload):
        try:
            return self.client.post(self.client.get_url(path), json=payload)
        except (self.errors.ConnectionFailedError, self.errors.ConnectionTimeoutError) as exc:
            raise Unavailable(f"the coordination service {self.shown} cannot be reached (connect timeout "
                              f"{self.timeouts[0]} s, read timeout {self.timeouts[1]} s): {_first_line(exc)}") from None
        except self.errors.Etcd3Exception as exc:
            raise BackendError(f"the coordination service {self.shown} refused {path}: {_first_line(exc)}") from None

    def _slot_key(self, index):
        return f"{self.prefix}/slot/{index:04d}"

    def read(self):
        now = self.clock()
        answer = self._post("/kv/range", {"key": _b64(self.prefix + "/"), "range_end": _range_end(self.prefix + "/")})
        revision = int(answer["header"]["revision"])
        slots, stop, ttls = {}, None, {}
        for item in answer.get("kvs", []):
            key = _unb64(item["key"])
            if not self._ours(key):
                continue  # not a record of this project's (another tool's key under the prefix): not read
            try:
                record = json.loads(_unb64(item.get("value")))
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise BackendError(f"{self.shown}: {key}, a key of open-gpu-cloud's coordination, holds no record of "
                                   f"it (a JSON object): delete it ({self.stop_removal().rsplit(' ', 1)[0]} {key}), "
                                   "after checking that no run of playbooks/host.yml is rebooting a host")
            if key == f"{self.prefix}/stopped":
                stop = record
            else:
                lease = item.get("lease", "0")
                if lease not in ttls:
                    ttls[lease] = self._ttl(lease)
                if ttls[lease] > 0:
                    slots[int(key.rsplit("/", 1)[1])] = dict(record, expires=now + ttls[lease])
        return View(slots, stop, now, revision)

    def _ours(self, key):
        """Whether ``key`` is one of this project's records: ``<prefix>/stopped`` or ``<prefix>/slot/<digits>``."""
        if key == f"{self.prefix}/stopped":
            return True
        slot = f"{self.prefix}/slot/"
        return key.startswith(slot) and key[len(slot):].isdigit() and key[len(slot):].isascii()

    def _ttl(self, lease):
        answer = self._post("/kv/lease/timetolive", {"ID": lease})
        return int(answer.get("TTL", -1))

    def commit(self, view, puts=None, deletes=(), lease=None):
        slot_prefix = f"{self.prefix}/slot/"
        txn = {
            "compare": [
                {"key": _b64(slot_prefix), "range_end": _range_end(slot_prefix), "target": "MOD", "result": "LESS",
                 "mod_revision": view.token + 1},
                {"key": _b64(f"{self.prefix}/stopped"), "target": "MOD", "result": "LESS",
                 "mod_revision": view.token + 1},
            ],
            "success": [{"request_delete_range": {"key": _b64(self._slot_key(index))}} for index in deletes]
            + [{"request_put": {"key": _b64(self._slot_key(index)),
                                "value": _b64(json.dumps(dict(record, lease=str(lease)), sort_keys=True)),
                                "lease": lease}}
               for index, record in (puts or {}).items()],
            "failure": [],
        }
        try:
            answer = self._post("/kv/txn", txn)
        except BackendError as exc:
            if puts and "lease not found" in str(exc):
                raise LeaseLost(f"the run's lease {lease} in {self.shown} has run out or was revoked") from None
            raise
        return bool(answer.get("succeeded"))

    def stop_removal(self):
        """How the operator removes the stop record (a command)."""
        endpoint = f"{self.settings['protocol']}://{addresses.host_in_url(self.settings['host'])}:{self.settings['port']}"
        return f"etcdctl --endpoints={endpoint} del {self.prefix}/stopped"

    def put_stop(self, record):
        self._post("/kv/put", {"key": _b64(f"{self.prefix}/stopped"), "value": _b64(json.dumps(record, sort_keys=True))})

    def grant(self, lease, ttl, holder):  # pylint: disable=unused-argument  # etcd keeps no holder for a lease
        try:
            self._post("/lease/grant", {"TTL": int(ttl), "ID": lease})
        except BackendError as exc:
            if "lease already exists" in str(exc):
                return False
            raise
        return True

    def keepalive(self, lease):
        answer = self._post("/lease/keepalive", {"ID": lease})
        return int((answer.get("result") or {}).get("TTL", -1))

    def remaining(self, lease):
        return self._ttl(lease)

    def revoke(self, lease):
        try:
            self._post("/kv/lease/revoke", {"ID": lease})
        except BackendError as exc:
            if "not found" not in str(exc):
                raise


def _first_line(exc):
    """What etcd (or the connection) said: the gateway's error message when it answered in JSON, else the reason."""
    detail = getattr(exc, "detail_text", None) or ""
    try:
        said = json.loads(detail)
        detail = said.get("error") or said.get("message") or detail if isinstance(said, dict) else detail
    except ValueError:
        pass
    text = " ".join(t for t in [str(detail).strip()] + [str(a) for a in getattr(exc, "args", ()) if a] if t)
    text = text.strip() or type(exc).__name__
    return text.splitlines()[0][:300]
