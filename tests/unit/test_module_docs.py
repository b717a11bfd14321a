"""Every module documents itself: ansible-doc reads each one's DOCUMENTATION, EXAMPLES and RETURN, by its full name."""

import json
import os
import subprocess
import sys

from ogc_testlib import COLLECTION, ROOT

COLLECTION_MODULES = os.path.join(COLLECTION, "plugins", "modules")
MODULES = sorted(f"open_gpu_cloud.toolkit.{name[:-3]}" for name in os.listdir(COLLECTION_MODULES)
                 if name.endswith(".py"))


def test_ansible_doc_reads_every_module():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", "module",
                           *MODULES], capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=300)
    assert proc.returncode == 0 and "[ERROR]" not in proc.stderr, proc.stderr[-3000:]
    docs = json.loads(proc.stdout)
    assert sorted(docs) == MODULES, proc.stderr[-3000:]
    for name, entry in docs.items():
        assert entry["doc"]["short_description"], name
        assert entry["examples"] and entry["return"], name
