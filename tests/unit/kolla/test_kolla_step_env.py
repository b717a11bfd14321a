"""kolla_deploy's kolla-ansible runs keep nothing of a job runner's Ansible settings.

Under ansible-runner (AWX, Automation Platform) the job's environment points the stdout callback at ansible-runner's
event writer and the fact cache at the job's artifacts. kolla-ansible, started by the role inside that job, is an
Ansible run of its own: with those settings its events joined the job's, and it read the job's cached partial facts
as gathered ones, skipped gathering, and failed on ansible_facts.nodename (tests/integration/site/test_site_end_to_end.py
found it). roles/kolla_deploy/files/run-kolla-step.sh starts kolla-ansible without them; the environment here is the
one ansible-runner itself prepares, so a setting a new ansible-runner adds is seen.
"""

from __future__ import annotations

import os
import subprocess

from ansible_runner.config.runner import RunnerConfig

from ogc_testlib import ROOT

STEP = os.path.join(ROOT, "roles", "kolla_deploy", "files", "run-kolla-step.sh")
# What ansible-runner sets that changes nothing a kolla-ansible run relies on.
HARMLESS = {"ANSIBLE_HOST_KEY_CHECKING": "SSH host keys: kolla's own ansible.cfg decides for its runs",
            "ANSIBLE_RETRY_FILES_ENABLED": "no .retry files"}


def runner_env(private_data_dir, monkeypatch):
    """(the environment ansible-runner gives a job's ansible-playbook, what it added to ours)."""
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "yaml")  # an operator's choice, which ansible-runner keeps aside
    config = RunnerConfig(private_data_dir=str(private_data_dir), playbook="site.yml", project_dir=ROOT)
    config.prepare()
    added = {key for key, value in config.env.items() if os.environ.get(key) != value}
    return config.env, added


def test_kolla_ansible_runs_without_the_job_runners_settings(tmp_path, monkeypatch):
    env, added = runner_env(tmp_path / "job", monkeypatch)
    # The settings that broke the nested run are among them (else this test proves nothing).
    assert {"ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_CACHE_PLUGIN",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION"} <= added, added
    env = dict(env, ANSIBLE_CONFIG="/etc/kolla/ansible.cfg")  # what the role's task sets for kolla-ansible
    log = tmp_path / "logs" / "genconfig.log"
    proc = subprocess.run(["bash", STEP, str(log), "false", "30", "env"], env=env, capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = dict(line.split("=", 1) for line in log.read_text().splitlines()[2:] if "=" in line)
    leaked = sorted(key for key in added - set(HARMLESS) if key in seen)
    assert not leaked, f"run-kolla-step.sh passes ansible-runner's {leaked} on to kolla-ansible; unset them there"
    assert seen["ANSIBLE_CONFIG"] == "/etc/kolla/ansible.cfg"
    assert seen["PATH"] == env["PATH"]
