"""playbooks/remove_host.yml refuses a host it must not or cannot remove, and a timeout of the wrong type, before it
reads or writes anything: the message names the variable, what it got and the fix. The removal itself, on real
Nova and Placement services: the move test's last step in tests/integration/site/test_site_end_to_end.py."""

from __future__ import annotations

import re

import pytest

from ogc_testlib import output, run_playbook, words

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("extra, got", [
    ('{"remove_host": ["gpu-007"]}', "got ['gpu-007'], a list"),   # one host, as a name: never a list's text
    ("remove_host=../etc", "got ../etc"),                          # not a host name: it becomes part of file paths
    ("remove_host=localhost", "got localhost"),                   # the control host
    ('{"remove_host": "gpu-007", "remove_host_down_timeout": "5m"}', "(got 5m, a str)"),
])
def test_a_bad_target_or_timeout_is_refused_before_anything(tmp_path, extra, got):
    proc = run_playbook("playbooks/remove_host.yml", "-i", "inventory/demo", "-e", extra,
                        "-e", f"passthrough_plan_dir={tmp_path}/plans")
    said = words(output(proc))
    assert proc.returncode != 0 and "remove_host.yml: give the one GPU host to remove as a name" in said, said[-3000:]
    assert got in said and "Nothing was changed." in said, said[-3000:]
    assert re.search(r"localhost : ok=\d+ changed=0 unreachable=0 failed=1", said), said[-1000:]
    assert list(tmp_path.iterdir()) == []
