"""What a task worker loads for templating stays light.

ansible-core loads every filter plugin of its search path (the top-level ``filter_plugins/``) the first time a task
worker templates a builtin filter or test, and a task worker is a fresh fork for each task on each host; a
collection's filter or lookup is loaded by the tasks that call it. What such a file imports is paid once per task
per host: openstacksdk alone costs about 0.4 CPU-s to import here, which made every task of a 24-host no-op cost
about 0.2 s per host, and short-name adapters in ``filter_plugins/`` for the collection's filters 0.9 s per host
over the whole no-op (bench/fleet/README.md). The clients belong to the modules and action plugins that talk to a
service; the pure logic a filter or lookup shares with them must not import them.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

from ogc_testlib import COLLECTION, ROOT, SCRIPT_ENV, collection_plugin

# The client libraries (and what they pull in) that no filter or lookup may load.
CLIENTS = ("openstack", "keystoneauth1", "etcd3gw", "requests", "urllib3")

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


def test_the_project_puts_no_filter_in_filter_plugins():
    """The folder is a site's own (its README.md says why the project's filters are not there)."""
    folder = os.path.join(ROOT, "filter_plugins")
    assert os.path.isfile(os.path.join(folder, "README.md"))
    assert not glob.glob(os.path.join(folder, "*.py"))  # a checkout from before may keep a stale __pycache__
    assert len(COLLECTION_TEMPLATING_PLUGINS) >= 10


def test_no_filter_or_lookup_imports_a_client_library():
    found = {os.path.relpath(path, ROOT): sorted(_loaded_by(path) & set(CLIENTS))
             for path in COLLECTION_TEMPLATING_PLUGINS}
    found = {path: clients for path, clients in found.items() if clients}
    assert not found, (f"these plugins import client libraries, which every task worker pays for: {found}; import the "
                       "client where a module or action plugin uses it, not in logic a filter shares")


# Where the project's Ansible content and the tests' playbooks live.
CONTENT_FILES = sorted(
    path for pattern in ("site.yml", "playbooks/**/*.yml", "roles/**/*.yml", "roles/**/*.j2", "templates/**/*",
                         "group_vars/**/*.yml", "inventory/**/*.yml", "molecule/**/*.yml", "molecule/**/*.py",
                         "tests/**/*.yml", "tests/**/*.py", "scripts/**/*.py", "docs/**/*.md", "README.md",
                         "collections/ansible_collections/open_gpu_cloud/toolkit/plugins/modules/*.py")
    for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)
    if os.path.isfile(path) and "/tests/output/" not in path)


def _collection_filter_names():
    names = set()
    for path in glob.glob(os.path.join(COLLECTION, "plugins", "filter", "*.py")):
        names.update(collection_plugin("filter", os.path.basename(path)[:-3]).FilterModule().filters())
    return names


def test_the_project_calls_every_filter_of_the_collection_by_full_name():
    """Without short-name adapters a short name fails the task that uses it: after a ``|``, or as the filter a
    ``map``/``select``/``reject`` applies."""
    names = _collection_filter_names()
    assert len(names) > 40
    either = "|".join(sorted(names, key=len, reverse=True))
    short = re.compile(rf"\|\s*({either})\b|\b(?:map|select|reject)\(\s*['\"]({either})['\"]")
    found = []
    for path in CONTENT_FILES:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if short.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert len(CONTENT_FILES) > 300
    assert not found, "a filter called by its short name (call it open_gpu_cloud.toolkit.<filter>):\n" + "\n".join(found)
