"""playbooks/lifetimes.yml, timer phase: systemd units written under a root prefix, idempotent, check mode."""

from __future__ import annotations

import os

import pytest

from ogc_testlib import ROOT, output, run_playbook

pytestmark = pytest.mark.integration
UNITS = "etc/systemd/system"


def run(root, *args):
    proc = run_playbook(os.path.join(ROOT, "playbooks", "lifetimes.yml"),
                        # Timer phase only: no test cloud, no policy run.
                        "-e", "cloud_testcloud_dir=", "-e", "server_lifetimes_enforce=false", "-e", "lifetime_timer=true",
                        "-e", f"lifetime_timer_root={root}", "-e", "cloud_clouds_yaml=/etc/openstack/clouds.yaml", *args,
                        timeout=300)
    return proc.returncode, output(proc)


def test_units_written_then_unchanged_and_check_mode(tmp_path):
    root = tmp_path / "control"
    rc, out = run(root, "--check")
    assert rc == 0, out
    assert not root.exists(), "check mode wrote something"

    rc, out = run(root, "-e", '{"lifetime_timer_on_calendar": "*-*-* *:00/30:00"}')
    assert rc == 0, out
    service = (root / UNITS / "ogc-server-lifetimes.service").read_text()
    timer = (root / UNITS / "ogc-server-lifetimes.timer").read_text()
    assert service.startswith("#\n# Ansible managed\n#\n")
    exec_line = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert exec_line.endswith(f"{ROOT}/playbooks/lifetimes.yml -i {ROOT}/inventory/demo -e server_lifetimes_timer=false")
    assert exec_line.split()[0].endswith("/ansible-playbook")
    # The timer's run reads the cloud from the inventory, as every run does (the play's cloud_connection): the
    # unit exports no clouds.yaml of its own.
    assert "OS_CLIENT_CONFIG_FILE" not in service
    assert "Type=oneshot" in service
    assert "OnCalendar=*-*-* *:00/30:00" in timer and "Unit=ogc-server-lifetimes.service" in timer
    assert "WantedBy=timers.target" in timer
    # Nothing was enabled: systemd is only touched when writing to the real root.
    assert "Enable and start the timer (real root only)" in out and "skipping: [localhost]" in out

    rc, out = run(root, "-e", '{"lifetime_timer_on_calendar": "*-*-* *:00/30:00"}')
    assert rc == 0 and "changed=0" in out, out


def test_bad_timer_settings_named(tmp_path):
    rc, out = run("relative/dir")
    assert rc != 0
    assert "server_lifetimes_timer_root empty or an absolute path (got 'relative/dir')" in " ".join(out.split()), out
