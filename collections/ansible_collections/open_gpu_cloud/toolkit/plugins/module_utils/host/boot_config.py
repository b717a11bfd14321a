# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""How a distribution builds the kernel command line of its default boot entry, and where an edit of
it takes effect. Pure functions over file texts; every token-level operation goes through
``kernel_cmdline`` (the one model of a command line).

What the distributions do (fixtures/distros/README.md has the files as shipped):

* Debian/Ubuntu: ``grub-mkconfig`` (``update-grub``) sources ``/etc/default/grub``, then every
  ``/etc/default/grub.d/*.cfg`` in glob order, and ``10_linux`` gives the default entry
  ``${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}``. A drop-in that assigns a variable (the
  cloud images' ``50-cloudimg-settings.cfg`` sets ``GRUB_CMDLINE_LINUX_DEFAULT``) overrides
  ``/etc/default/grub``.
* RHEL 9 family: ``grub2-mkconfig --update-bls-cmdline`` sources ``/etc/default/grub`` only (the
  ``grub.d`` drop-ins are a Debian addition) and rewrites the ``options`` line of every BLS entry in
  ``/boot/loader/entries`` from ``root=... ro ${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}``.

The shell files are read, not run: an assignment of a command-line variable must be one line, its
value one double-quoted, single-quoted or plain word, with ``$NAME``/``${NAME}`` (an earlier value)
only as a whole word. Anything else (``$(...)``, backquotes, adjacent quoting such as
``"quiet "'splash'``, a line continuation, a conditional assignment) is refused with the file and
line, rather than guessed.
"""

from __future__ import annotations

import hashlib
import json
import re

# Ansible runs this as ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host.boot_config; the tests and plugins import it the same way.
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline as kc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import shell_scan

__all__ = ["BootConfigError", "CMDLINE_VARIABLES", "FAMILIES", "GRUB_FILE", "DROPIN_DIR", "default_variable",
           "source_order", "parse_file", "evaluate", "kernel_args", "plan_edit", "grub_cfg_default_args",
           "bls_entry", "readback_problems", "bls_dropped", "diagnose", "inputs_fingerprint"]

GRUB_FILE = "/etc/default/grub"
DROPIN_DIR = "/etc/default/grub.d"
CMDLINE_VARIABLES = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
FAMILIES = {
    # family: (default variable, sources grub.d drop-ins, what the boot-config tool generates)
    "Debian": ("GRUB_CMDLINE_LINUX_DEFAULT", True, "/boot/grub/grub.cfg"),
    "RedHat": ("GRUB_CMDLINE_LINUX", False, "/boot/loader/entries"),
}

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN_RE = re.compile(r"^(?P<lead>[ \t]*(?:export[ \t]+)?)(?P<name>" + _NAME + r")=(?P<rest>.*)$")
_REF_RE = re.compile(r"^\$(?:(?P<a>" + _NAME + r")|\{(?P<b>" + _NAME + r")\})$")


class BootConfigError(Exception):
    """A boot configuration this model cannot represent, worded for the operator (file and line)."""


class VariableNotAssigned(BootConfigError):
    """No file assigns the kernel command-line variable to edit: the caller says where to add it."""


def _check_family(family):
    if family not in FAMILIES:
        raise BootConfigError(f"OS family {family!r} is not supported (only {', '.join(sorted(FAMILIES))})")


def default_variable(family):
    """The GRUB variable an edit goes to by default: the one the family's installer fills."""
    _check_family(family)
    return FAMILIES[family][0]


def source_order(family, grub_path, dropins):
    """The files grub-mkconfig sources, in order: the GRUB file, then (Debian family) the ``*.cfg``
    drop-ins in the order the shell glob lists them (byte order under LC_ALL=C)."""
    _check_family(family)
    order = [grub_path]
    if FAMILIES[family][1]:
        order += sorted((d for d in dropins if d.endswith(".cfg")), key=lambda d: d.encode("utf-8"))
    return order


class Assignment:
    """One line assigning a command-line variable: where it is and the words of its value."""

    def __init__(self, path, lineno, name, lead, quote, words, suffix, eol):
        self.path, self.lineno, self.name = path, lineno, name
        self.lead, self.quote, self.words, self.suffix, self.eol = lead, quote, words, suffix, eol

    @property
    def where(self):
        return f"{self.path} line {self.lineno}"

    def args(self):
        """The literal kernel arguments (references left out)."""
        return [w for w in self.words if not isinstance(w, Ref)]

    def render(self, words):
        if self.quote == "'" and not any(isinstance(w, Ref) for w in words):
            return self.lead + self.name + "='" + " ".join(words) + "'" + self.suffix
        parts = []
        for word in words:
            if isinstance(word, Ref):
                parts.append("$" + str(word))
            else:
                parts.append(re.sub(r'(["\\$`])', r"\\\1", word))
        text = " ".join(parts)
        if self.quote == "" and len(words) == 1 and not isinstance(words[0], Ref) and text == words[0]:
            return self.lead + self.name + "=" + text + self.suffix
        return self.lead + self.name + '="' + text + '"' + self.suffix


class Ref(str):
    """A $NAME word of a value: the earlier value of that variable, expanded when sourced."""


_VALUE_FIX = ("write the value as one quoted string of kernel arguments on one line (e.g. "
              "GRUB_CMDLINE_LINUX=\"quiet iommu=pt\"), then run again")


def _refuse(path, lineno, line, why, fix=_VALUE_FIX):
    """Refuse a line: the file, the line number, its text (credentials masked), why, and the fix."""
    raise BootConfigError(f"{path} line {lineno} ({redact.redact(line.strip())}): {why}; {fix}")


def _unquote_double(path, lineno, line, body):
    """The text of a double-quoted shell string without its escapes; refuses what it cannot model."""
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            if i + 1 >= len(body):
                _refuse(path, lineno, line, "a line continuation (backslash at the end of the line) is not modelled")
            nxt = body[i + 1]
            if nxt in '"\\$`':
                out.append(nxt if nxt != "$" else "\0")  # an escaped $ is a literal dollar
            else:
                out.append("\\" + nxt)
            i += 2
            continue
        if char == "`":
            _refuse(path, lineno, line, "a backquoted command is not modelled")
        if char == "$" and body[i + 1:i + 2] == "(":
            _refuse(path, lineno, line, "a $(...) command substitution is not modelled")
        out.append(char)
        i += 1
    return "".join(out)


def _words(path, lineno, line, text):
    """Split an unquoted value into words: kernel arguments (through the model) and $NAME references."""
    words, literal = [], []
    try:
        for raw in text.split():
            if "$" in raw:
                match = _REF_RE.match(raw)
                if not match:
                    _refuse(path, lineno, line, f"{raw!r}: a $ is modelled only as a whole word $NAME or ${{NAME}} (an "
                                                "earlier value of a variable)")
                if literal:
                    words += kc.split(" ".join(literal))
                    literal = []
                words.append(Ref(match.group("a") or match.group("b")))
                continue
            literal.append(raw)
        if literal:
            words += kc.split(" ".join(literal))
    except kc.CmdlineError as exc:
        _refuse(path, lineno, line, str(exc))
    return [w if isinstance(w, Ref) else w.replace("\0", "$") for w in words]


def parse_file(path, text, variables=CMDLINE_VARIABLES):
    """Every assignment of ``variables`` in one sourced file, in order. The file's commands are split as the shell
    splits them (plugins/module_utils/host/shell_scan.py); other commands are left to the shell, except a construct whose effect on
    ``variables`` cannot be proven (another file sourced, an assignment inside a conditional, a loop or an && list,
    eval, a use the model does not follow): refused with the file, the line and its text, before anything is
    written."""
    found = []
    lines = text.splitlines(True)
    result = shell_scan.scan(text, variables)
    refusal_line = result.refusal[0] if result.refusal else None
    for lineno in result.assignment_lines:
        if refusal_line is not None and lineno > refusal_line:
            break
        raw = lines[lineno - 1]
        line = raw.rstrip("\r\n")
        eol = raw[len(line):]
        match = _ASSIGN_RE.match(line)
        if not match or match.group("name") not in variables:
            _refuse(path, lineno, line, "an assignment the editor does not model")
        rest = match.group("rest")
        if rest.startswith('"'):
            end = 1
            while end < len(rest):
                if rest[end] == "\\":
                    end += 2
                    continue
                if rest[end] == '"':
                    break
                end += 1
            if end >= len(rest):
                if rest.endswith("\\"):
                    _refuse(path, lineno, line, "a line continuation (backslash at the end of the line) is not "
                                                "modelled")
                _refuse(path, lineno, line, "the double quote is not closed on this line (a value over several "
                                            "lines is not modelled)")
            quote, body, suffix = '"', rest[1:end], rest[end + 1:]
            text_value = _unquote_double(path, lineno, line, body)
        elif rest.startswith("'"):
            end = rest.find("'", 1)
            if end < 0:
                _refuse(path, lineno, line, "the single quote is not closed on this line (a value over several "
                                            "lines is not modelled)")
            quote, body, suffix = "'", rest[1:end], rest[end + 1:]
            text_value = body.replace("$", "\0")
        else:
            plain = re.match(r"^([^\s;&|#]*)(.*)$", rest)
            quote, body, suffix = "", plain.group(1), plain.group(2)
            if any(c in body for c in "\"'\\`") or "$(" in body:
                _refuse(path, lineno, line, "an unquoted value with quotes, backslashes or commands is not modelled")
            text_value = body
        if suffix and not re.match(r"^[ \t]*(#.*)?$", suffix):
            if suffix[:1] in "\"'$" or not suffix[:1].isspace():
                _refuse(path, lineno, line, f"adjacent quoting or text after the closing quote ({suffix.strip()!r}) is "
                                            "not modelled")
            _refuse(path, lineno, line, f"more than one command on the line ({suffix.strip()!r}) is not modelled")
        words = _words(path, lineno, line, text_value)
        found.append(Assignment(path, lineno, match.group("name"), match.group("lead"), quote, words, suffix, eol))
    if result.refusal:
        _refuse(path, *result.refusal)
    return found


def evaluate(files, variables=CMDLINE_VARIABLES):
    """Source ``files`` (``[(path, text)]`` in order) the way the shell would for ``variables``.

    Returns ``(values, assignments)``: ``values`` maps each variable to its final argument list;
    ``assignments`` lists every Assignment in sourcing order."""
    values = {name: [] for name in variables}
    assignments = []
    for path, text in files:
        for assignment in parse_file(path, text, variables):
            expanded = []
            for word in assignment.words:
                if isinstance(word, Ref):
                    expanded += values.get(str(word), [])
                else:
                    expanded.append(word)
            values[assignment.name] = expanded
            assignments.append(assignment)
    return values, assignments


def kernel_args(values):
    """The arguments grub-mkconfig gives the default entry (after root= and ro)."""
    return list(values.get("GRUB_CMDLINE_LINUX", [])) + list(values.get("GRUB_CMDLINE_LINUX_DEFAULT", []))


def _edited_texts(files, changes):
    """Apply {(path, lineno): new line} to the file texts."""
    out = {}
    for path, text in files:
        lines = text.splitlines(True)
        touched = False
        for (cpath, lineno), new in changes.items():
            if cpath == path:
                old = lines[lineno - 1]
                lines[lineno - 1] = new + old[len(old.rstrip("\r\n")):]
                touched = True
        if touched:
            out[path] = "".join(lines)
    return out


def _apply(assignment, new_args):
    """New words for an assignment whose literal arguments become new_args; each reference keeps its
    place among the arguments that were before it."""
    new_args = list(new_args)
    if new_args == assignment.args():
        return list(assignment.words)
    # Rebuild: references go before the argument that followed them originally.
    out, count, literal_index = [], 0, []
    for word in assignment.words:
        if isinstance(word, Ref):
            literal_index.append((count, word))
        else:
            count += 1
    refs_at = {}
    for position, ref in literal_index:
        refs_at.setdefault(min(position, len(new_args)), []).append(ref)
    for index in range(len(new_args) + 1):
        out += refs_at.get(index, [])
        if index < len(new_args):
            out.append(new_args[index])
    return out


def plan_edit(files, variable, present, absent):
    """Where and how to edit so that the default entry gets ``present`` and loses ``absent``.

    ``files`` are ``[(path, text)]`` in sourcing order (source_order). The planned arguments go into
    the last assignment of ``variable`` (the one grub-mkconfig keeps); forbidden arguments are removed
    from every assignment of every command-line variable in every file; a planned key that a later
    part of the line would override is removed there too. Returns a dict: ``texts`` ({path: new
    text} of the files that change), ``changes`` ([{path, line, before, after}]), ``before``/``after``
    (the default entry's arguments), ``target`` ("path line N"). Raises BootConfigError (no
    assignment of ``variable``, a file it cannot model, a plan the line cannot satisfy)."""
    if variable not in CMDLINE_VARIABLES:
        raise BootConfigError(f"{variable} is not a kernel command-line variable of grub-mkconfig "
                              f"({', '.join(CMDLINE_VARIABLES)})")
    try:
        kc.check([], present, absent)  # validates the plan itself
    except kc.CmdlineError as exc:
        raise BootConfigError(f"the planned arguments: {exc}") from None
    values, assignments = evaluate(files)
    before = kernel_args(values)
    mine = [a for a in assignments if a.name == variable]
    if not mine:
        raise VariableNotAssigned(f"no line assigns {variable} in {', '.join((p for p, _text in files))}")
    target = mine[-1]
    new_args = {}
    for assignment in assignments:
        wanted = present if assignment is target else []
        new_args[id(assignment)] = kc.edit(assignment.args(), wanted, absent)

    def result_args():
        vals = {name: [] for name in CMDLINE_VARIABLES}
        for assignment in assignments:
            expanded = []
            for word in _apply(assignment, new_args[id(assignment)]):
                expanded += vals.get(str(word), []) if isinstance(word, Ref) else [word]
            vals[assignment.name] = expanded
        return kernel_args(vals)

    after = result_args()
    problems = kc.check(after, present, absent)
    if problems:
        # A planned key that another part of the line overrides (last one wins): take it out there.
        planned_keys = {kc.param_key(p) for p in present}
        for assignment in assignments:
            if assignment is target:
                continue
            args = new_args[id(assignment)]
            kept = [a for a in args if kc.param_key(a) not in planned_keys or a in present]
            if kept != args:
                new_args[id(assignment)] = kept
                after = result_args()
                problems = kc.check(after, present, absent)
                if not problems:
                    break
    if problems:
        raise BootConfigError(f"editing {target.where} cannot give the default boot entry the planned arguments: "
                              f"{'; '.join(problems)}")
    changes, texts = [], {}
    edits = {}
    for assignment in assignments:
        words = _apply(assignment, new_args[id(assignment)])
        if words == assignment.words:
            continue
        line_before = _line_of(files, assignment)
        line_after = assignment.render(words)
        edits[(assignment.path, assignment.lineno)] = line_after
        changes.append({"path": assignment.path, "line": assignment.lineno, "variable": assignment.name,
                        "before": line_before, "after": line_after})
    texts = _edited_texts(files, edits)
    overridden = [a.where for a in mine[:-1] if _overridden(a, mine)]
    return {"texts": texts, "changes": changes, "before": before, "after": after,
            "target": target.where, "overridden": overridden}


def _overridden(assignment, assignments):
    """Whether a later assignment of the same variable drops ``assignment``'s value: one that does not take the
    earlier value in (``NAME="$NAME more"`` appends to it, it does not override it)."""
    later = assignments[assignments.index(assignment) + 1:]
    return any(not any(isinstance(w, Ref) and str(w) == assignment.name for w in b.words) for b in later)


def _line_of(files, assignment):
    for path, text in files:
        if path == assignment.path:
            return text.splitlines()[assignment.lineno - 1]
    raise KeyError(assignment.path)  # pragma: no cover - assignments come from files


# --- what the boot-config tool generated ------------------------------------------------------

_MENUENTRY_RE = re.compile(r"^\s*menuentry\s")
_LINUX_RE = re.compile(r"^\s*(?:linux|linuxefi|linux16)\s+(\S+)(?:\s+(.*))?$")


def grub_cfg_default_args(text, path="/boot/grub/grub.cfg"):
    """The arguments of the first menu entry's ``linux`` line in a generated grub.cfg (GRUB_DEFAULT=0,
    the Debian/Ubuntu default), after the kernel image path. Raises BootConfigError when none."""
    in_entry = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if _MENUENTRY_RE.match(line):
            in_entry = True
            continue
        if in_entry:
            match = _LINUX_RE.match(line)
            if match:
                try:
                    return kc.split(match.group(2) or "")
                except kc.CmdlineError as exc:
                    raise BootConfigError(f"{path} line {lineno}: {exc}") from None
    raise BootConfigError(f"{path} has no menu entry with a linux line: the boot-config tool found no kernel")


def bls_entry(text, path):
    """A BLS entry's fields: {'title', 'version', 'linux', 'options': [args]} (grub variables such as
    $tuned_params kept as words)."""
    fields = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key and not key.startswith("#"):
            fields.setdefault(key, value.strip())
    try:
        fields["options"] = kc.split(fields.get("options", ""))
    except kc.CmdlineError as exc:
        raise BootConfigError(f"{path}, options line: {exc}") from None
    return fields


def readback_problems(entries, present, absent):
    """For each generated boot entry ``(where, args)``, what it lacks or still has against the plan.
    Words GRUB expands at boot ($vt_handoff, $tuned_params) are left out of the check."""
    out = []
    for where, args in entries:
        literal = [a for a in args if not a.startswith("$")]
        problems = kc.check(literal, present, absent)
        if problems:
            out.append(f"{where} {'; '.join(problems)}")
    return out


def bls_dropped(entries, files_args, present, absent):
    """What ``grub2-mkconfig --update-bls-cmdline`` would drop: it rewrites every BLS entry's ``options`` to
    ``root=... ro`` and the arguments the GRUB files give (``files_args``, after the edit), so an argument an
    entry has on its own (added with ``grubby --update-kernel=<one kernel> --args``) is lost. Returns
    ``[(where, [args])]``, leaving out ``root=``, ``ro``, the words GRUB expands at boot (``$tuned_params``), what
    the new line still carries, what the plan sets or forbids, and debug entries (they also get
    ``GRUB_CMDLINE_LINUX_DEBUG``, which is not modelled)."""
    planned = {kc.param_key(a) for a in present}
    kept = set(files_args)
    out = []
    for where, args in entries:
        if "debug" in where.rsplit("/", 1)[-1]:
            continue
        lost = [a for a in args if a not in kept and not a.startswith("$") and a != "ro"
                and kc.param_key(a) != "root" and kc.param_key(a) not in planned and not kc.check([a], [], absent)]
        if lost:
            out.append((where, lost))
    return out


def diagnose(problems, expected, sources, present, absent, output, state=None, tool="the boot-config tool"):
    """Why the generated configuration lacks the plan, and the fix: ``(cause, text)``.

    ``problems`` are readback_problems of the generated entries; ``expected`` the arguments the GRUB files give;
    ``sources`` {variable: where its last assignment is}; ``state`` the host state (pending steps, what the tool
    last generated from) or None when unknown. Causes: ``tool_pending`` (the tool failed or its run was
    interrupted), ``files`` (the files themselves lack the arguments), ``tool_not_run`` (the files give them, but
    the tool has not run since they changed), ``override`` (the tool ran on these files and its output still
    lacks them: something outside the files decides)."""
    where = ", ".join(f"{name} from {sources.get(name, 'not assigned')}" for name in CMDLINE_VARIABLES)
    head = (f"the boot configuration the tool generated does not carry the planned arguments: {'; '.join(problems)}. ")
    from_files = kc.check(expected, present, absent)
    state = state or {}
    if "boot_config" in (state.get("pending") or []):
        return "tool_pending", head + (
            "The boot-config tool has not completed since the GRUB files were changed (boot_config is pending in "
            "the state file: it failed, or the run was interrupted). A reboot would not apply the plan, so the host "
            f"is not rebooted. Run this play again (it repeats {tool}), after fixing the tool's error if it failed")
    if from_files:
        return "files", head + (
            f"The GRUB files themselves do not give them ({where}: {' '.join(expected) or 'nothing'}): "
            f"{'; '.join(from_files)}. A reboot would not apply the plan, so the host is not rebooted. Run this play "
            f"again (it puts them there), or add them to the variable's last assignment and run {tool}")
    if state.get("generated_from") != inputs_fingerprint(expected):
        return "tool_not_run", head + (
            f"The GRUB files give them ({where}: {' '.join(expected)}), but {tool} has not run since they changed "
            "(edited by hand or by another tool?). A reboot would not apply the plan, so the host is not rebooted. Run "
            f"{tool} (this play runs it when the generated configuration is older than the files), then run this play "
            "again")
    return "override", head + (
        f"The GRUB files give them ({where}: {' '.join(expected)}), and {tool} has run on them since they last "
        f"changed, yet {output} lacks them: something outside the files overrides them (a script in /etc/grub.d, "
        f"GRUB_DEFAULT choosing another entry, or the tool writing another file than {output}). A reboot would not "
        "apply the plan, so the host is not rebooted. Find what sets that entry's line (or point "
        f"passthrough_host_boot_config_output at what the tool writes), fix it, run {tool}, then run this play again")


def inputs_fingerprint(args):
    """What the boot-config tool generates from: the kernel arguments the GRUB files give, as a fingerprint (no
    argument - a credential among them - is stored). The host state records it when the tool succeeded
    (plugins/module_utils/host/state.py, ``generated_from``)."""
    data = json.dumps([str(a) for a in args])
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()[:32]
