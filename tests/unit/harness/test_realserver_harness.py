"""Unit tests of the real-server harness's pure parts (no qemu, no mmdebstrap): where caches live and their keys,
the archive's versions, the virtual machine's command line and SSH configuration, what the report reads."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import qemu_harness  # noqa: E402
from realserver import image, vm  # noqa: E402

import cache_dir  # noqa: E402  (scripts/, put on the path by realserver.image)

REPO = TESTS.parent


# ---- scripts/cache_dir.py ----

@pytest.mark.parametrize("env, expected", [
    ({"OGC_CACHE_DIR": "/srv/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/srv/c"),
    ({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/open-gpu-cloud"),
    ({"HOME": "/h"}, "/h/.cache/open-gpu-cloud"),
])
def test_the_cache_root_follows_the_environment(monkeypatch, env, expected):
    for name in ("OGC_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert str(cache_dir.root()) == expected
    assert str(cache_dir.directory("debian-server", "0123abcd")) == expected + "/debian-server/0123abcd"


@pytest.mark.parametrize("what, key", [("../x", None), ("a/b", None), (".hidden", None), ("ok", "a/../b"), ("", None)])
def test_a_cache_name_is_a_plain_name(what, key):
    with pytest.raises(ValueError, match="use letters, digits"):
        cache_dir.directory(what, key)


def test_the_key_changes_with_any_input_and_only_then(tmp_path):
    builder = tmp_path / "build.sh"
    builder.write_text("echo one\n")
    key = cache_dir.input_key('{"linux-image-amd64": "6.1.192-2"}', builder)
    assert len(key) == cache_dir.KEY_LENGTH and key == cache_dir.input_key('{"linux-image-amd64": "6.1.192-2"}', builder)
    assert key != cache_dir.input_key('{"linux-image-amd64": "6.1.193-1"}', builder)
    builder.write_text("echo two\n")
    assert key != cache_dir.input_key('{"linux-image-amd64": "6.1.192-2"}', builder)
    # Inputs are delimited: moving bytes from one input to the next is another key.
    assert cache_dir.input_key("ab", "c") != cache_dir.input_key("a", "bc")


def test_the_cache_helper_answers_on_the_command_line_for_shell_builders(tmp_path):
    script = str(REPO / "scripts" / "cache_dir.py")
    env = {"OGC_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = lambda *args: subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env,  # noqa: E731
                                       check=False)
    assert run().stdout.strip() == str(tmp_path)
    assert run("guest-image", "abc").stdout.strip() == f"{tmp_path}/guest-image/abc"
    (tmp_path / "f").write_text("x")
    assert run("--key", str(tmp_path / "f")).stdout.strip() == cache_dir.input_key(tmp_path / "f")
    bad = run("../etc")
    assert bad.returncode == 2 and "use letters, digits" in bad.stderr


# ---- tests/realserver/image.py ----

APT_SIMULATION = """\
NOTE: This is only a simulation!
Inst gcc-12-base (12.2.0-14+deb12u1 Debian:12.15/oldstable [amd64])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst openssh-server (1:9.2p1-2+deb12u10 Debian-Security:12/oldstable-security [amd64])
Conf libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])
"""


def test_the_versions_are_what_apt_resolves_for_every_package(monkeypatch):
    calls = []

    def fake_run(cmd, timeout, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, APT_SIMULATION + "".join(
            f"Inst {p} (1.0 Debian:12 [amd64])\n" for p in image.PACKAGES if p != "openssh-server"), "")

    monkeypatch.setattr(image, "_run", fake_run)
    versions = image.resolve_versions()
    assert versions["libc6"] == "2.36-9+deb12u14" and versions["openssh-server"] == "1:9.2p1-2+deb12u10"
    # As the archive resolves them from nothing installed: the Essential set and apt come along.
    assert calls[0][:4] == ["apt-get", "-s", "-o", "Dir::State::Status=/dev/null"]
    assert {"apt", "?essential", *image.PACKAGES} <= set(calls[0])


def test_no_versions_when_apt_does_not_know_a_package(monkeypatch):
    monkeypatch.setattr(image, "_run", lambda cmd, timeout, **kw: subprocess.CompletedProcess(cmd, 0, APT_SIMULATION, ""))
    assert image.resolve_versions() == {}


def test_the_mirror_is_this_machines_apt_configuration_or_the_variable(monkeypatch, tmp_path):
    sources = tmp_path / "mine.sources"
    sources.write_text("Types: deb\n")
    monkeypatch.setenv("OGC_DEBIAN_SOURCES", str(sources))
    assert image.sources() == str(sources)
    monkeypatch.setenv("OGC_DEBIAN_SOURCES", str(tmp_path / "missing.sources"))
    with pytest.raises(image.ImageBuildError, match="OGC_DEBIAN_SOURCES=.* is not a file"):
        image.sources()
    monkeypatch.delenv("OGC_DEBIAN_SOURCES")
    monkeypatch.setattr(image, "SOURCES_FILES", [tmp_path / "none.sources", sources])
    assert image.sources() == str(sources)
    monkeypatch.setattr(image, "SOURCES_FILES", [tmp_path / "none.sources"])
    with pytest.raises(image.ImageBuildError, match="configure a mirror, or set OGC_DEBIAN_SOURCES"):
        image.sources()


def test_the_key_covers_the_versions_and_the_builders_files():
    key = image.image_key({"libc6": "2.36-9"})
    assert key == image.image_key({"libc6": "2.36-9"}) and key != image.image_key({"libc6": "2.36-10"})
    assert {f.name for f in image.BUILDER_FILES} == {"image.py", "customize.sh", "install-boot.sh"}


def test_downloads_of_other_versions_are_pruned(tmp_path):
    for name in ("openssh-server_1%3a9.2p1-2+deb12u10_amd64.deb", "openssh-server_1%3a9.2p1-2+deb12u9_amd64.deb",
                 "libc6_2.36-9+deb12u14_amd64.deb", "zstd_1.5.4+dfsg2-5_amd64.deb"):
        (tmp_path / name).write_bytes(b"")
    image._prune_debs(tmp_path, {"openssh-server": "1:9.2p1-2+deb12u10", "libc6": "2.36-9+deb12u14"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libc6_2.36-9+deb12u14_amd64.deb",
                                                          "openssh-server_1%3a9.2p1-2+deb12u10_amd64.deb"]


# ---- tests/realserver/vm.py ----

def test_the_machine_listens_on_127_0_0_1_only_and_boots_its_disk_through_ovmf(tmp_path, monkeypatch):
    monkeypatch.setattr(qemu_harness, "binary", lambda: "/usr/bin/qemu-system-x86_64")
    cmd = vm.qemu_command(tmp_path, 40022)
    netdevs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-netdev"]
    assert netdevs[0] == "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:40022-:22"
    assert all(not n.startswith("user") for n in netdevs[1:])  # the GPU host's own NICs reach nothing
    devices = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-device"]
    assert devices[0] == "amd-iommu"  # before the devices it translates for
    assert f"virtio-net-pci,netdev=mgmt,mac={image.MGMT_MAC},bus=pcie.0,addr=0x8,romfile=" in devices
    assert any(d.startswith("virtio-blk-pci,drive=disk0") and d.endswith("bootindex=0") for d in devices)
    assert [d for d in devices if d.startswith(("e1000e,", "e1000,"))] == [
        "e1000e,bus=rp3,netdev=nic0,romfile=", "e1000,bus=pb1,addr=0x2,netdev=nic1,romfile="]
    assert f"if=pflash,format=raw,unit=0,readonly=on,file={vm.OVMF_CODE}" in cmd
    assert cmd[cmd.index("-pidfile") + 1] == str(tmp_path / "qemu.pid")
    assert "-kernel" not in cmd  # GRUB on the disk boots the kernel update-grub configured


def test_the_ssh_configuration_checks_the_host_key_and_multiplexes(tmp_path):
    info = {"host": "127.0.0.1", "port": 40022, "user": "ogc", "ssh_key": "/k/id_ed25519",
            "known_hosts": str(tmp_path / "known_hosts")}
    text = vm.ssh_config(info, tmp_path)
    assert text.startswith(f"Host {vm.SSH_HOST}\n")
    for line in ("HostName 127.0.0.1", "Port 40022", "StrictHostKeyChecking yes", f"HostKeyAlias {vm.HOST_KEY_ALIAS}",
                 f"UserKnownHostsFile {tmp_path}/known_hosts", "BatchMode yes", f"ControlPath {tmp_path}/ssh-%p"):
        assert f"  {line}\n" in text


def test_stop_kills_only_a_process_started_for_that_state_directory(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "vm.json").write_text(json.dumps({"pid": other.pid, "limiter_pid": other.pid}))
        assert vm.stop(tmp_path) is False  # its command line does not name the state directory
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stop_ends_the_machine_by_its_pid(tmp_path):
    # A command line naming the state directory, as qemu's does.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(tmp_path)])
    # Until the child has exec'd (before, its command line is still this process's).
    for _ in range(200):
        if str(tmp_path) in Path(f"/proc/{proc.pid}/cmdline").read_text(errors="replace"):
            break
        time.sleep(0.05)
    (tmp_path / "vm.json").write_text(json.dumps({"pid": proc.pid}))
    (tmp_path / "qmp.sock").write_text("")
    assert vm.stop(tmp_path) is True
    assert proc.wait(timeout=20) != 0 and not (tmp_path / "qmp.sock").exists()
    assert vm.stop(tmp_path) is False
