"""Every external program a test, harness, script or role runs comes from somewhere a clean machine has:
the Debian base system, the toolkit's virtualenv, or a package in requirements/debian-packages.txt
(installed by scripts/setup-system.sh, which scripts/test.sh calls first)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ogc_testlib import ROOT

PACKAGE_LIST = os.path.join(ROOT, "requirements", "debian-packages.txt")
SCANNED = ("tests", "scripts", "bench", "library", "module_utils", "filter_plugins", "callback_plugins", "roles",
           "playbooks", "molecule")
# Programs of Debian's base system, with the package that gives each: every one must be of priority
# required or important (on any Debian 12 install, minimal images included).
BASE = {"apt-get": "apt", "apt-cache": "apt", "dpkg-deb": "dpkg", "bash": "bash", "sh": "dash",
        "timeout": "coreutils", "nohup": "coreutils", "head": "coreutils", "unshare": "util-linux",
        "dpkg-query": "dpkg", "update-grub": "grub2-common"}
SHELL_WORDS = {"if", "for", "while", "set", "test", "[", "exec", "cd"}
# update-grub is the host role's default command on a real GPU host; the tests always replace it with a recorder.
NOT_RUN_IN_TESTS = {"update-grub"}
# Programs the toolkit's virtualenv provides (pyproject.toml), found beside the running Python.
VENV = {"ansible-playbook"}

PY_CALL = re.compile(r'(?:subprocess\.(?:run|Popen|check_output|check_call|call)|\b_run)\(\s*\[\s*"([^"/{][^"]*)"')
PY_ARGV = re.compile(r'\b(?:argv|cmd|command)\s*=\s*\[\s*"([^"/{][^"]*)"')
PY_WHICH = re.compile(r'shutil\.which\(\s*"([^"]+)"')
PY_PATH = re.compile(r'"/usr/(?:s?bin|lib/[\w.-]+/bin)/([\w.+-]+)"')


def package_list():
    """[(package, programs, files, comment)] from the list file."""
    entries = []
    with open(PACKAGE_LIST, encoding="utf-8") as handle:
        for line in handle:
            body, _, comment = line.partition("#")
            if not body.strip():
                continue
            programs = re.search(r"programs:\s*([^;]+)", comment)
            files = re.search(r"files:\s*([^;]+)", comment)
            entries.append((body.split()[0],
                            [p.strip() for p in programs.group(1).split(",")] if programs else [],
                            [f.strip() for f in files.group(1).split(",")] if files else [], comment.strip()))
    return entries


def _yaml_programs(node, out):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "argv" and isinstance(value, list) and value and isinstance(value[0], str):
                out.append(value[0])
            elif key == "cmd" and isinstance(value, str) and value.split() and value.split()[0] not in SHELL_WORDS:
                out.append(value.split()[0])  # a shell line: its first program (a keyword is skipped)
            else:
                _yaml_programs(value, out)
    elif isinstance(node, list):
        for item in node:
            _yaml_programs(item, out)


def scan(root=ROOT):
    """{program: [files]} for every literal program name the Python and YAML under SCANNED run."""
    found = {}
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            # Mocked sysfs trees hold symlink loops and no code.
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "sys", "proc")]
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if rel == "tests/unit/test_system_packages.py":
                    continue  # the scanner itself: its sample calls below are data
                programs = []
                if name.endswith(".py"):
                    with open(path, encoding="utf-8") as handle:
                        text = handle.read()
                    for pattern in (PY_CALL, PY_ARGV, PY_WHICH, PY_PATH):
                        programs += pattern.findall(text)
                elif name.endswith((".yml", ".yaml")):
                    with open(path, encoding="utf-8") as handle:
                        try:
                            docs = list(yaml.safe_load_all(handle))
                        except yaml.YAMLError:
                            continue  # Jinja-templated YAML (kolla overrides) runs nothing
                    _yaml_programs(docs, programs)
                for program in programs:
                    if "{{" in program or program.startswith(("-", "$")):
                        continue  # a variable: its default is scanned where it is defined
                    found.setdefault(os.path.basename(program), []).append(rel)
    return found


def test_the_scan_sees_the_programs_known_to_be_run():
    """A scan that found nothing would pass the next test vacuously."""
    found = scan()
    for program in ("qemu-img", "qemu-system-x86_64", "shellcheck", "unshare", "openssl", "rabbitmq-server",
                    "ansible-playbook", "timeout"):
        assert program in found, program
    assert "tests/integration/ops/test_images.py" in found["qemu-img"]


def test_every_program_run_is_installed_by_the_setup_or_in_the_base_system():
    listed = {program for _package, programs, _files, _comment in package_list() for program in programs}
    unaccounted = {program: files for program, files in scan().items()
                   if program not in listed and program not in BASE and program not in VENV}
    assert not unaccounted, (
        "programs run by these files come from no package in requirements/debian-packages.txt, the Debian base "
        "system or the virtualenv; add their Debian package to the list: %s" % unaccounted)


def test_the_base_programs_come_from_required_or_important_packages():
    if shutil.which("dpkg-query") is None:
        pytest.fail("dpkg-query is missing: the tests run on Debian 12 (see README, Tests)")
    for program, package in BASE.items():
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Priority}", package], capture_output=True, text=True,
                              check=False)
        if program in NOT_RUN_IN_TESTS:
            continue
        assert proc.returncode == 0 and proc.stdout in ("required", "important"), (program, package, proc.stdout)


def test_the_virtualenv_gives_its_programs():
    for program in VENV:
        assert os.access(os.path.join(os.path.dirname(sys.executable), program), os.X_OK), program


def test_the_list_names_what_each_package_is_for():
    entries = package_list()
    assert {"qemu-utils", "qemu-system-x86", "shellcheck", "rabbitmq-server", "chromium",
            "prometheus-node-exporter", "pci.ids"} <= {package for package, *_ in entries}
    for package, programs, files, comment in entries:
        assert programs or files, "%s: say which programs (programs: ...) or files (files: ...) it gives" % package
        assert re.search(r"tests?\b|tests/|scripts/", comment), "%s: say which test needs it" % package


def test_setup_system_installed_every_listed_program_and_file():
    """scripts/test.sh runs scripts/setup-system.sh first: after it, each listed program and file is there."""
    proc = subprocess.run([os.path.join(ROOT, "scripts", "setup-system.sh"), "--check"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for package, programs, files, _comment in package_list():
        for program in programs:
            assert shutil.which(program) or any(
                os.access(os.path.join(d, program), os.X_OK) for d in ("/usr/sbin", "/usr/lib/rabbitmq/bin",
                                                                        "/usr/lib/erlang/bin")), (package, program)
        for path in files:
            assert os.path.exists(path), (package, path)


def test_the_scan_reads_yaml_argv_and_python_calls(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text('subprocess.run(["frobnicate", "-x"])\nargv = ["zap", "1"]\n'
                                            'shutil.which("qux")\nX = "/usr/lib/foo/bin/quux"\n'
                                            'subprocess.run([sys.executable, "-m", "venv"])\n')
    (tmp_path / "molecule").mkdir()
    (tmp_path / "molecule" / "d.yml").write_text(yaml.safe_dump([{"ansible.builtin.shell": {"cmd": "if [ -f x ]; then :; fi"}}]))
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "t.yml").write_text(yaml.safe_dump([{"ansible.builtin.command": {"argv": ["blorp", "a"]}},
                                                              {"ansible.builtin.command": {"cmd": "glorp -v"}},
                                                              {"ansible.builtin.command": {"argv": ["{{ x }}"]}}]))
    assert sorted(scan(str(tmp_path))) == ["blorp", "frobnicate", "glorp", "quux", "qux", "zap"]
