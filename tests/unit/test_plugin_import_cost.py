"""The controller-side plugins templates use load no client library.

ansible-core loads every filter plugin on its search path (the top-level ``filter_plugins/`` adapters and the
filters they name) the first time a task worker templates a builtin filter or test, and a task worker is a fresh
fork for each task on each host. What a filter file imports is therefore paid once per task per host: openstacksdk
alone costs about 0.4 CPU-s to import here, which made every task of a 24-host no-op cost about 0.2 s per host
(bench/fleet/README.md). The clients belong to the modules and action plugins that talk to a service; the pure
logic a filter or lookup shares with them must not import them.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from ogc_testlib import COLLECTION, ROOT, SCRIPT_ENV

# The client libraries (and what they pull in) that no filter or lookup may load.
CLIENTS = ("openstack", "keystoneauth1", "etcd3gw", "requests", "urllib3")

TOP_LEVEL_FILTERS = sorted(glob.glob(os.path.join(ROOT, "filter_plugins", "*.py")))
COLLECTION_TEMPLATING_PLUGINS = sorted(glob.glob(os.path.join(COLLECTION, "plugins", "filter", "*.py"))
                                       + glob.glob(os.path.join(COLLECTION, "plugins", "lookup", "*.py")))

PROBE = """
import json, runpy, sys
before = set(sys.modules)
runpy.run_path(sys.argv[1])
print(json.dumps(sorted({name.split(".")[0] for name in set(sys.modules) - before})))
"""


def _loaded_by(path):
    """The top-level packages a fresh interpreter loads to run the plugin file (ansible-core loaded first, as in a
    task worker)."""
    probe = "import ansible.plugins.filter.core\n" + PROBE
    done = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, env=SCRIPT_ENV,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_plugin_lists_are_found():
    assert len(TOP_LEVEL_FILTERS) >= 10
    assert len(COLLECTION_TEMPLATING_PLUGINS) >= 10


def test_no_filter_or_lookup_imports_a_client_library():
    found = {os.path.relpath(path, ROOT): sorted(_loaded_by(path) & set(CLIENTS))
             for path in TOP_LEVEL_FILTERS + COLLECTION_TEMPLATING_PLUGINS}
    found = {path: clients for path, clients in found.items() if clients}
    assert not found, (f"these plugins import client libraries, which every task worker pays for: {found}; import the "
                       "client where a module or action plugin uses it, not in logic a filter shares")
