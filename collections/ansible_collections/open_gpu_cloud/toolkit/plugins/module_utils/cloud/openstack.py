# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""Shared plumbing for the open-gpu-cloud OpenStack modules (library/os_*.py).

* ``openstack_argument_spec()``: the connection options every module takes (``cloud`` from
  clouds.yaml or an ``auth`` dict whose secrets are ``no_log``, ``region_name``, ``interface``,
  TLS options, ``connect_timeout`` and ``read_timeout`` with defaults: no call waits without end).
* ``CloudModule``: an AnsibleModule wrapper that opens ONE openstacksdk connection per module run
  (authenticating at once, so wrong credentials and unreachable endpoints fail before anything is
  written), records what was done, and turns SDK/keystoneauth exceptions into ``fail_json`` naming
  the resource, the server's message and the items already done.
* The resource protocol (``converge``, ``run_module``; its values ``Action`` and ``Plan`` are in
  cloud/protocol.py): prepare (validate) -> read -> make_plan (pure) -> apply, with check mode handled once,
  in ``converge``.

Modules import it as ``from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.openstack import ...``.
"""

from __future__ import annotations

import difflib
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, _load_params, missing_required_lib

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud.protocol import DONE_KEYS
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import addresses

try:
    import openstack
    from openstack import exceptions as sdk_exceptions
    HAS_SDK = True
    SDK_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised by the missing-library message only
    openstack = None
    sdk_exceptions = None
    HAS_SDK = False
    SDK_IMPORT_ERROR = traceback.format_exc()

try:
    from keystoneauth1 import exceptions as ksa_exceptions
except ImportError:  # pragma: no cover
    ksa_exceptions = None

# Keys of an ``auth`` dict (keystoneauth's password, token and application-credential plugins).
AUTH_OPTIONS = dict(
    auth_url=dict(type="str"),
    username=dict(type="str"),
    user_id=dict(type="str"),
    password=dict(type="str", no_log=True),
    token=dict(type="str", no_log=True),
    application_credential_id=dict(type="str"),
    application_credential_name=dict(type="str"),
    application_credential_secret=dict(type="str", no_log=True),
    project_name=dict(type="str"),
    project_id=dict(type="str"),
    project_domain_name=dict(type="str"),
    project_domain_id=dict(type="str"),
    user_domain_name=dict(type="str"),
    user_domain_id=dict(type="str"),
    domain_name=dict(type="str"),
    domain_id=dict(type="str"),
    system_scope=dict(type="str"),
)

# Seconds to wait for a connection to an API, and for its answer (each read of it): an endpoint that accepts
# connections and never answers fails the module after the read timeout instead of holding the run.
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 120


def _unknown_auth_keys():
    """The keys of the ``auth`` dict this run was given that are not keystoneauth options (a misspelt ``passwrd``),
    read from the module's arguments before Ansible validates them."""
    try:
        auth = (_load_params() or {}).get("auth")
    # No arguments to read (a test, an import).
    except (SystemExit, Exception):  # pylint: disable=broad-except
        return []
    return sorted(k for k in auth if isinstance(k, str) and k not in AUTH_OPTIONS) if isinstance(auth, dict) else []


def openstack_argument_spec():
    """The connection options shared by every os_* module (merged into each module's own spec). A key of ``auth``
    that is not a keystoneauth option is declared too, ``no_log``: it may be a misspelt secret, so its value is
    never printed; CloudModule then refuses it by name (``unknown_auth_error``)."""
    auth_options = dict(AUTH_OPTIONS)
    auth_options.update((key, dict(type="raw", no_log=True)) for key in _unknown_auth_keys())
    return dict(
        cloud=dict(type="str"),
        clouds_yaml=dict(type="path"),
        auth=dict(type="dict", options=auth_options),
        auth_type=dict(type="str"),
        region_name=dict(type="str"),
        interface=dict(type="str", default="public", choices=["public", "internal", "admin"],
                       aliases=["endpoint_type"]),
        validate_certs=dict(type="bool", aliases=["verify"]),
        ca_cert=dict(type="str", aliases=["cacert"]),
        connect_timeout=dict(type="float", default=CONNECT_TIMEOUT),
        read_timeout=dict(type="float", default=READ_TIMEOUT, aliases=["api_timeout"]),
    )


def unknown_auth_error(auth):
    """The refusal of the unknown keys of an ``auth`` dict, naming them (never their values) and the closest known
    key; None when every key is known."""
    unknown = sorted(k for k in (auth or {}) if k not in AUTH_OPTIONS)
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(AUTH_OPTIONS), n=1)
        hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return (f"auth has unknown key(s) {', '.join(hints)}; their values are not shown, as they may be secrets. Known "
            f"keys: {', '.join(sorted(AUTH_OPTIONS))}")


def sdk_message(exc):
    """The server's own words from an openstacksdk / keystoneauth exception, on one line."""
    parts = []
    status = getattr(exc, "status_code", None) or getattr(exc, "http_status", None)
    details = getattr(exc, "details", None)
    message = getattr(exc, "message", None) or str(exc)
    if details and details not in message:
        message = f"{message}: {details}"
    if status and str(status) not in message:
        parts.append(f"HTTP {status}")
    parts.append(" ".join(str(message).split()))
    return ": ".join(parts)


def auth_url_error(auth):
    """Why ``auth``'s auth_url (Keystone's endpoint) is no http(s) URL of a host[:port] (common/addresses.py, the one
    reader of every address: a port 0, a host that is no name or IP address, credentials in it refused), or None."""
    url = (auth or {}).get("auth_url") if isinstance(auth, dict) else None
    if url in (None, ""):
        return None
    try:
        addresses.parse_url(url, "auth.auth_url", ("http", "https"))
    except addresses.AddressError as exc:
        return f"{exc} (Keystone's endpoint, e.g. https://keystone.example:5000/v3)"
    return None


def connection_kwargs(params):
    """openstack.connect() keyword arguments from the module parameters (None values dropped)."""
    kwargs = {}
    if params.get("cloud"):
        kwargs["cloud"] = params["cloud"]
    if params.get("auth"):
        kwargs["auth"] = dict((k, v) for k, v in params["auth"].items() if v is not None)
    for key in ("auth_type", "region_name", "interface"):
        if params.get(key) is not None:
            kwargs[key] = params[key]
    if params.get("read_timeout") is not None:
        kwargs["api_timeout"] = params["read_timeout"]
    if params.get("validate_certs") is not None:
        kwargs["verify"] = params["validate_certs"]
    if params.get("ca_cert"):
        kwargs["cacert"] = params["ca_cert"]
    return kwargs


class CloudModule:
    """One module run: parameters, one connection, progress, and failures with context."""

    def __init__(self, argument_spec, **kwargs):
        spec = openstack_argument_spec()
        spec.update(argument_spec)
        kwargs.setdefault("supports_check_mode", True)
        self.module = AnsibleModule(argument_spec=spec, **kwargs)
        self.params = self.module.params
        unknown = unknown_auth_error(self.params.get("auth")) or auth_url_error(self.params.get("auth"))
        if unknown:
            self.module.fail_json(msg=unknown)
        self.check_mode = self.module.check_mode
        self._conn = None
        # Progress, reported on failure so the operator knows what a re-run still has to do.
        self.progress = {}
        # A module converging several kinds of resource (os_cloud) keeps one progress per section.
        self.sections = []
        # Projects a section would create in check mode (name -> placeholder): later sections of the same
        # run treat them as existing and empty instead of failing on a project that is not there yet.
        self.planned_projects = {}
        if not HAS_SDK:
            self.module.fail_json(msg=missing_required_lib("openstacksdk"), exception=SDK_IMPORT_ERROR)

    # ---- connection ------------------------------------------------------------
    @property
    def conn(self):
        """The run's single openstacksdk connection, authenticated on first use."""
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _where(self):
        if self.params.get("cloud"):
            return f"cloud '{self.params['cloud']}'"
        auth = self.params.get("auth") or {}
        if auth.get("auth_url"):
            return f"auth_url {addresses.without_credentials(auth['auth_url'])}"
        return "the cloud from the environment (OS_CLOUD / OS_* variables)"

    def _connect(self):
        kwargs = connection_kwargs(self.params)
        clouds_yaml = self.params.get("clouds_yaml")
        if clouds_yaml:
            if not os.path.isfile(clouds_yaml) or not os.access(clouds_yaml, os.R_OK):
                self.module.fail_json(msg=f"clouds_yaml {clouds_yaml} is not a readable file: give the path of the "
                                          "clouds.yaml on the host that runs the module (the control host), or leave it "
                                          "empty for openstacksdk's search path")
            # openstacksdk reads it first, before its search path, exactly as when OS_CLIENT_CONFIG_FILE is exported
            # (this process is the one module run).
            os.environ["OS_CLIENT_CONFIG_FILE"] = clouds_yaml
        try:
            conn = openstack.connect(**kwargs)
            # keystoneauth hands its session's timeout to requests, which takes (connect, read): the two bounds apart
            # (openstacksdk's api_timeout, a single number, sets both to the read timeout until here).
            conn.session.timeout = (self.params["connect_timeout"], self.params["read_timeout"])
        except Exception as exc:  # config errors: unknown cloud name, missing auth_url, ...
            self.module.fail_json(msg=f"cannot configure the connection to {self._where()}: {sdk_message(exc)} (check "
                                      "clouds.yaml / the auth option)")
        try:
            conn.authorize()
        except Exception as exc:  # pylint: disable=broad-except
            self.module.fail_json(msg=self._auth_failure(exc))
        return conn

    def _auth_failure(self, exc):
        where = self._where()
        text = sdk_message(exc)
        # The kind of failure comes from the exception classes and status codes along the chain (openstacksdk
        # re-raises keystoneauth's exception inside its handler), never from the words of a message.
        if _caused_by(exc, "ConnectFailure", "ConnectTimeout", "ConnectionError"):
            return (f"cannot reach the identity endpoint of {where}: {text} "
                    "(is Keystone running and the auth_url right?)")
        if _caused_by(exc, "Unauthorized") or _http_status(exc) == 401:
            return f"authentication to {where} failed (wrong user, password or project?): {text}"
        return f"cannot authenticate to {where}: {text}"

    # ---- progress and failures -----------------------------------------------------
    def record(self, key, item):
        """Note one completed item (e.g. record('created', 'gpu_tiny'))."""
        self.progress.setdefault(key, []).append(item)

    def start_section(self, name):
        """From now on record() notes progress under this section (os_cloud: access, flavors, quotas)."""
        self.progress = {}
        self.sections.append((name, self.progress))

    def fail(self, msg, **extra):
        """fail_json with the progress so far (``changed`` true when something was already written)."""
        sections = self.sections or [(None, self.progress)]
        if self.sections:
            result = dict((name, dict(progress)) for name, progress in self.sections)
            msg = f"{self.sections[-1][0]}: {msg}"
        else:
            result = dict(self.progress)
        result.update(extra)
        msg = msg.rstrip(".")
        done = []
        for name, progress in sections:
            words = ", ".join(f"{key} {', '.join(map(str, progress[key]))}" for key in DONE_KEYS
                              if progress.get(key))
            if words:
                done.append(f"{name}: {words}" if name else words)
        if done:
            msg = f"{msg}. Already done in this run: {'; '.join(done)}; a re-run finishes the job"
        self.module.fail_json(msg=msg, changed=bool(done), **result)

    def fail_sdk(self, exc, action, resource):
        """An API call failed: name the action, the resource and the server's message."""
        self.fail(f"{action} {resource} failed: {sdk_message(exc)}", failed_item=resource)

    def call(self, action, resource, func, *args, idempotent=False, **kwargs):
        """Run one API call; an SDK or connection error becomes fail_sdk (never a traceback).

        An ``idempotent`` call (one that repeating cannot do twice, such as a delete that ignores a missing
        resource) is repeated after an answer that says the service is briefly unavailable (HTTP 502, 503, 504:
        kolla-ansible's HAProxy answers so while an API container restarts or has no healthy backend), at most
        SERVER_ERROR_RETRIES times with a pause between. A 500 is the service's own failure and fails at once.
        """
        for attempt in range(SERVER_ERROR_RETRIES + 1):
            try:
                return func(*args, **kwargs)
            except Exception as exc:  # pylint: disable=broad-except
                if idempotent and attempt < SERVER_ERROR_RETRIES and _is_unavailable(exc):
                    time.sleep(SERVER_ERROR_PAUSE * (attempt + 1))
                    continue
                if _is_api_error(exc):
                    self.fail_sdk(exc, action, resource)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def read_all(self, action, items, func, label=str, workers=8):
        """Run func(item) for every item concurrently (read-only calls: GETs); results in item order.

        The first SDK error becomes fail_sdk naming that item. Writes are never done this way: they stay
        sequential so a failure halfway leaves a clear list of what was done.
        """
        items = list(items)
        if len(items) < 2:
            return [self.call(action, label(item), func, item) for item in items]
        with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
            futures = [pool.submit(func, item) for item in items]
        results = []
        for item, future in zip(items, futures):
            try:
                results.append(future.result())
            except Exception as exc:  # pylint: disable=broad-except
                if _is_api_error(exc):
                    self.fail_sdk(exc, action, label(item))
                raise
        return results

    def find_projects(self, names_or_ids):
        """{name or id: project} for the given projects, from ONE project listing.

        Missing ones are absent from the answer; a name that exists in several domains is an error. In
        check mode a project an earlier section of this run would create is answered by a PlannedProject.
        """
        wanted = set(names_or_ids)
        if not wanted:
            return {}
        projects = self.call("listing", "projects", lambda: list(self.conn.identity.projects()))
        found = {}
        for project in projects:
            if project.id in wanted:
                found[project.id] = project
            if project.name in wanted:
                if project.name in found and found[project.name].id != project.id:
                    self.fail(f"project name '{project.name}' exists in several domains: give its ID",
                              failed_item=project.name)
                found[project.name] = project
        for name in wanted - set(found):
            if name in self.planned_projects:
                found[name] = self.planned_projects[name]
        return found

    def plan_project(self, name):
        """Check mode: note that this run would create project `name` (see find_projects)."""
        self.planned_projects[name] = PlannedProject(name)

    def exit(self, changed, **result):
        self.module.exit_json(changed=changed, **result)


# --------------------------------------------------------------------------- the resource protocol
#
# Every module for one kind of resource goes through the same four steps, each in its own function of the
# resource's module_utils file (cloud_access, cloud_flavors, cloud_quotas, cloud_images, server_lifetimes,
# pci_inventory):
#
#   prepare(params) -> (declared, problem)            validate: pure, before any API call
#   read(cm, params, declared) -> state                read: API GETs only; may fail, nothing was written
#   make_plan(params, declared, state) -> Plan         plan: pure, the actions and the before/after diff
#   apply(cm, params, state, action, applied)          apply: carry out ONE action (writes)
#   report(params, declared, state, plan, applied, progress) -> result for exit_json
#
# and optionally finish(cm, params, state, applied), run at the end of every real run, writes or not (it waits for
# what the run promises: os_server_lifetimes for the servers it acted on, os_compute_drain for an idle host), and
# announce(cm, plan), which tells later sections of an os_cloud run what this plan creates (check mode too).
# converge() below runs read -> plan -> apply -> report and is the only place that knows check mode: apply is
# skipped, everything else (the plan, its progress keys, changed and the diff) is the same code. Action and Plan
# live in cloud/protocol.py, which imports no SDK, so that pure logic a filter shares (ops/pci_return.py) builds
# plans without loading openstacksdk in every task worker.


def converge(cm, logic, params, declared):
    """read -> plan -> apply -> report for one kind of resource (prepare has already passed).

    Check mode is handled here and nowhere else: apply (and finish) are skipped and every action is
    recorded as the real run records it once done, so both report the same progress, ``changed`` and diff.
    In a real run an action is recorded only after apply returned, so a failure halfway reports exactly
    what was done (CloudModule.fail). apply may return the Action it actually carried out when that differs
    from the planned one (os_images learns a URL's content only by downloading it): that one is recorded and
    its diff replaces the planned one's; it is the only way a real run can report other than check mode.
    Returns (changed, result); the result has ``diff`` when Ansible asked for one.
    """
    state = logic.read(cm, params, declared)
    plan = logic.make_plan(params, declared, state)
    if plan.problem:
        cm.fail(**plan.problem)
    for warning in plan.warnings:
        cm.module.warn(warning)
    if hasattr(logic, "announce"):  # what later sections of the same run may count on (os_cloud)
        logic.announce(cm, plan)
    applied = {}
    changed = False
    for action in plan.actions:
        if action.writes and not cm.check_mode:
            done = logic.apply(cm, params, state, action, applied)
            if done is not None:
                plan.amend(action, done)
                action = done
        changed = changed or action.writes
        cm.record(action.done, action.item)
    if not cm.check_mode and hasattr(logic, "finish"):
        logic.finish(cm, params, state, applied)
    result = logic.report(params, declared, state, plan, applied, cm.progress)
    if cm.module._diff and plan.diff is not None:
        result["diff"] = plan.diff
    return changed, result


def run_module(logic, **module_kwargs):
    """main() of a module for one kind of resource: validate, then converge(), then exit_json.

    `logic` is its module_utils module (cloud_access, cloud_images, ...), which also holds its ARGUMENT_SPEC.
    os_cloud runs several of them over one connection.
    """
    cm = CloudModule(logic.ARGUMENT_SPEC, **module_kwargs)
    declared, problem = logic.prepare(cm.params)
    if problem:
        cm.fail(**problem)
    changed, result = converge(cm, logic, cm.params, declared)
    cm.exit(changed, **result)


def run_sections(sections, argument_spec):
    """main() of os_cloud: several kinds of resource, in order, over one connection.

    sections: ((name, logic), ...); each section's options are a dict option of that name (None: not
    managed). Every section's declaration is checked before the first API call; each section then
    converges on its own and reports its result (and diff) under its name.
    """
    cm = CloudModule(argument_spec)
    chosen = [(name, logic, cm.params[name]) for name, logic in sections if cm.params[name] is not None]

    prepared, problems = [], []
    for name, logic, params in chosen:
        declared, problem = logic.prepare(params)
        if problem:
            problems.append((name, problem))
        prepared.append((name, logic, params, declared))
    if problems:
        errors = [f"{name}: {error}" for name, problem in problems for error in problem["errors"]]
        cm.fail("; ".join(f"{name}: {problem['msg']}" for name, problem in problems), errors=errors)

    result = dict(sections=[name for name, _logic, _params, _declared in prepared])
    changed = False
    diffs = []
    for name, logic, params, declared in prepared:
        cm.start_section(name)
        section_changed, section_result = converge(cm, logic, params, declared)
        changed = changed or section_changed
        diff = section_result.pop("diff", None)
        if diff is not None:
            diffs.append(dict(diff, before_header=f"{name} (before)", after_header=f"{name} (after)"))
        result[name] = section_result
    if cm.module._diff:
        result["diff"] = diffs
    cm.exit(changed, **result)


class PlannedProject:
    """A project check mode would create: it has no ID yet and holds nothing."""

    planned = True

    def __init__(self, name):
        self.name = name
        self.id = f"(new project {name})"


def _chain(exc):
    """exc and the exceptions it wraps (__cause__/__context__), outermost first."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _http_status(exc):
    """The first HTTP status an exception of the chain carries (status_code / http_status), or None."""
    for each in _chain(exc):
        status = getattr(each, "status_code", None) or getattr(each, "http_status", None)
        if status:
            return int(status)
    return None


def _caused_by(exc, *names):
    """True when exc or an exception it wraps (__cause__/__context__) has one of these class names."""
    return any(cls.__name__ in names for each in _chain(exc) for cls in type(each).__mro__)


SERVER_ERROR_RETRIES = 2  # Cloud.call: repeats of an idempotent call after an HTTP 502/503/504
SERVER_ERROR_PAUSE = 2.0   # seconds before the first repeat; the second waits twice as long
UNAVAILABLE = (502, 503, 504)  # Bad Gateway, Service Unavailable, Gateway Timeout: the request was not served


def _is_unavailable(exc):
    """An answer saying the service is briefly unavailable (not its own failure, not a refusal of the request,
    not a connection failure)."""
    return _is_api_error(exc) and getattr(exc, "status_code", None) in UNAVAILABLE


def _is_api_error(exc):
    if sdk_exceptions is not None and isinstance(exc, sdk_exceptions.SDKException):
        return True
    if ksa_exceptions is not None and isinstance(exc, ksa_exceptions.ClientException):
        return True
    return False
