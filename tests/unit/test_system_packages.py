"""Every external program a test, harness, script or role runs comes from somewhere a clean machine has:
the Debian base system, the toolkit's virtualenv, or a package in requirements/debian-packages.txt
(installed by scripts/setup-system.sh, which scripts/test.sh calls first)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from ogc_testlib import ROOT

PACKAGE_LIST = os.path.join(ROOT, "requirements", "debian-packages.txt")
SCANNED = ("tests", "scripts", "bench", "collections", "filter_plugins", "callback_plugins", "roles",
           "playbooks", "molecule", ".config/molecule", ".ci")
# Shell scripts that do not run on this machine: their programs come from elsewhere.
ELSEWHERE = {
    "tests/realkernel/init.sh": "the real-kernel guest's /init: busybox applets inside the guest's initramfs",
    "tests/realserver/install-boot.sh": "the test server's first boot: programs of the server image's Debian packages",
    "tests/helpers/gpu-image-guest-report.sh": "the GPU guest image's report: runs inside the booted image, with "
                                               "the image's own programs",
}
# Programs of Debian's base system, with the package that gives each: every one must be of priority
# required or important (on any Debian 12 install, minimal images included).
BASE = {"apt-get": "apt", "apt-cache": "apt", "dpkg-deb": "dpkg", "bash": "bash", "sh": "dash",
        "timeout": "coreutils", "nohup": "coreutils", "head": "coreutils", "unshare": "util-linux",
        "dpkg-query": "dpkg", "update-grub": "grub2-common", "awk": "mawk", "flock": "util-linux",
        "setsid": "util-linux", "partx": "util-linux", "grep": "grep", "mount": "mount", "sed": "sed",
        **{program: "coreutils" for program in (
            "basename", "cat", "chmod", "chroot", "cut", "date", "dirname", "id", "install", "ln", "mkdir", "mktemp",
            "rm", "seq", "sha256sum", "sleep", "tail", "tee")}}
# Shell keywords and bash builtins: nothing to install. A segment starting with one of SKIP_SEGMENT runs no program
# (a loop header, a case head, a lookup); after one of PREFIXES the next word is the program.
SHELL_BUILTINS = {
    "!", "[", "[[", ".", ":", "alias", "break", "caller", "case", "cd", "continue", "declare", "done", "echo", "elif",
    "else", "esac", "eval", "exit", "export", "false", "fi", "for", "function", "getopts", "hash", "if", "in", "kill",
    "let", "local", "mapfile", "printf", "pwd", "read", "readarray", "return", "select", "set", "shift", "source",
    "test", "then", "trap", "true", "type", "typeset", "ulimit", "umask", "unset", "until", "wait", "while", "do",
    "{", "}",
}
SKIP_SEGMENT = {"for", "case", "select", "function"}
PREFIXES = {"exec", "time", "command", "builtin", "!"}
SEPARATORS = {";", ";;", "&", "&&", "|", "||", "|&", "(", ")", "()", "((", "))", "if", "then", "elif", "else", "do", "while",
              "until"}
REDIRECTS = {">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
FUNCTION = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)", re.M)
# Ansible modules whose free-form argument (or cmd) is a command line: a shell line for shell, a program and its
# arguments for command (read the same way: a command line is a shell line without operators).
# (FQCN only: ansible-lint's production profile refuses short names, and a module argument named `command`, as
# Redfish's, is no command line.)
COMMAND_MODULES = {"ansible.builtin.shell", "ansible.builtin.command"}
JINJA = re.compile(r"\{\{.*?\}\}", re.S)
# update-grub is the host role's default command on a real GPU host; the tests always replace it with a recorder.
NOT_RUN_IN_TESTS = {"update-grub"}
# Programs the toolkit's virtualenv provides (pyproject.toml), found beside the running Python.
VENV = {"ansible-playbook", "ansible-inventory", "ansible-builder", "ansible-test", "molecule", "python"}

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


def _substitutions(text):
    """TEXT with each command substitution, $(...) or `...`, replaced by a word, and the commands inside them;
    arithmetic, $((...)), becomes 0. Nothing in single quotes is a substitution."""
    out, inner, i, double = [], [], 0, False
    while i < len(text):
        char = text[i]
        if char == "'" and not double:
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end + 1
            out.append(text[i:end])
            i = end
        elif text.startswith("$((", i):
            end = text.find("))", i)
            out.append("0")
            i = len(text) if end < 0 else end + 2
        elif text.startswith("$(", i) or char == "`":
            depth, j = 1, i + (2 if char == "$" else 1)
            while j < len(text) and depth:
                if char == "`":
                    depth = 0 if text[j] == "`" else 1
                elif text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                j += 1
            inner.append(text[i + (2 if char == "$" else 1):j - 1])
            out.append("__substitution__")
            i = j
        else:
            double = not double if char == '"' else double
            out.append(char)
            i += 1
    return "".join(out), inner


def shell_programs(text):
    """The programs a shell script (or a shell line) runs, by their names as written: the first word of each
    simple command, past assignments, redirections and exec/command/time; not builtins, keywords, functions
    the script defines, words from variables, or the repository's own scripts (a relative path). Heredoc
    bodies are input, not commands; case patterns are not commands."""
    functions = set(FUNCTION.findall(text))
    lines, heredoc = [], None
    for line in text.replace("\\\n", " ").splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        found = HEREDOC.search(line)
        heredoc = found.group(2) if found else None
        lines.append(line)
    programs, in_case = [], 0
    for line in lines:
        line, inner = _substitutions(line)
        for nested in inner:
            programs += shell_programs(nested)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unterminated quote: a string that goes on on the next line
            tokens = line.split()
        tokens = _without_array_values(tokens)
        if in_case and ")" in tokens and tokens[0] not in ("esac", ";;"):
            tokens = tokens[tokens.index(")") + 1:]  # a case pattern: "start|stop)"
        segment = []
        for token in tokens + [";"]:
            if token in SEPARATORS:
                program = _segment_program(segment, functions)
                in_case += 1 if segment[:1] == ["case"] else 0
                if program:
                    programs.append(program)
                segment = []
            else:
                segment.append(token)
                in_case -= 1 if token == "esac" and in_case else 0
    return programs


def _without_array_values(tokens):
    """The tokens with an array assignment's values taken out (``name=(a b)``, ``name=()``): they are words, not a
    command. The lexer gives ``name=``, then ``(`` (or ``()``), its parentheses run together with the punctuation
    after them (``();``, ``);``)."""
    out, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if ASSIGNMENT.match(token) and token.endswith("=") and following.startswith("("):
            out.append(token)
            if following.startswith("()"):
                out += [following[2:]] if following[2:] else []
                i += 2
            else:  # up to the ")" that closes it, which may run together with what follows (");")
                close = next((j for j in range(i + 2, len(tokens)) if tokens[j].startswith(")")), len(tokens))
                out += [tokens[close][1:]] if close < len(tokens) and tokens[close][1:] else []
                i = close + 1
        else:
            out.append(token)
            i += 1
    return out


def _segment_program(words, functions):
    """The program one simple command runs (None when it runs none we can name)."""
    if not words or words[0] in SKIP_SEGMENT or (words[0] == "command" and words[1:2] in (["-v"], ["-V"])):
        return None
    i = 0
    while i < len(words):
        word = words[i]
        if word in REDIRECTS or (word.isdigit() and i + 1 < len(words) and words[i + 1] in REDIRECTS):
            i += 2 if word in REDIRECTS else 3
        elif ASSIGNMENT.match(word) or word in PREFIXES:
            i += 1
        else:
            break
    if i >= len(words):
        return None
    word = words[i]
    if word in SHELL_BUILTINS or word in functions or "$" in word or word == "__substitution__" or \
            ("/" in word and not word.startswith("/")):
        return None
    return os.path.basename(word)


def _yaml_programs(node, out):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "argv" and isinstance(value, list) and value and isinstance(value[0], str):
                out.append(value[0])
            elif isinstance(value, str) and (key == "cmd" or key in COMMAND_MODULES):
                out += shell_programs(JINJA.sub("$jinja", value))  # a command or shell line; Jinja is a variable
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
                if rel in ELSEWHERE:
                    continue
                if name.endswith(".sh") or _shebang_shell(path):
                    with open(path, encoding="utf-8") as handle:
                        programs += shell_programs(handle.read())
                elif name.endswith(".py"):
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


def _shebang_shell(path):
    """True for a file without an extension that starts with a bash or sh shebang (.ci/run)."""
    if "." in os.path.basename(path):
        return False
    try:
        with open(path, "rb") as handle:
            first = handle.readline(100)
    except OSError:
        return False
    return first.startswith(b"#!") and first.split(b"/")[-1].split()[-1] in (b"bash", b"sh")


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
        f"system or the virtualenv; add their Debian package to the list: {unaccounted}")


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
        assert programs or files, f"{package}: say which programs (programs: ...) or files (files: ...) it gives"
        assert re.search(r"tests?\b|tests/|scripts/", comment), f"{package}: say which test needs it"


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


def test_the_scan_reads_shell_scripts_and_shell_lines(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "t.sh").write_text("""#!/usr/bin/env bash
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # dirname, in a substitution in a substitution
case "${1:-}" in
  start|stop) ;;
  *) echo "usage" >&2; exit 2 ;;
esac
step() { printf '(%d s) $(notrun)\\n' "$((SECONDS - 1))"; }
LC_ALL=C frob --x 2>/dev/null | sort -u > "$root/out"
if ! command -v zap >/dev/null 2>&1; then exec 9>"$root/lock"; fi
exec quux "$@"
"$root/scripts/own.sh" && scripts/other.sh || "$python" -m venv x
python3 - <<'PY'
import os; os.system("heredoc-body")
PY
for f in a b; do wc -l "$f"; done
x=`blip -q` y=$(( 2 + 3 ))
case "$x" in
  a) parts=(); more=(words not commands); glorp ;;
esac
""")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text("#!/usr/bin/env bash\nexec scripts/test.sh\nsleepy 1\n")
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "t.yml").write_text(yaml.safe_dump([
        {"name": "a", "ansible.builtin.shell": {"cmd": "{{ python | quote }} x.py | gzap > {{ out | quote }}"}},
        {"name": "b", "ansible.builtin.shell": "test -f x && trundle"},
        {"name": "c", "community.general.redfish_command": {"category": "Systems", "command": "PowerForceRestart"}}]))
    assert sorted(set(scan(str(tmp_path)))) == ["blip", "dirname", "frob", "glorp", "gzap", "python3", "quux", "sleepy", "sort",
                                                "trundle", "wc"]
