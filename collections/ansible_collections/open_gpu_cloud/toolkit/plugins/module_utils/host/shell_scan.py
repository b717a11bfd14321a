# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The commands of a sourced shell file, as far as an editor can prove what they do to some variables.

``/etc/default/grub`` and its drop-ins are shell that ``grub-mkconfig`` sources. The GRUB editor
(``boot_config``) models plain assignments of the kernel command-line variables; ``scan`` splits a file into
its simple commands the way the shell's grammar does (quotes, ``$(...)`` and backquotes, ``${...}``,
comments, line continuations, ``;``/``&&``/``||``/``|``, compound commands) and says, for the variables
the caller watches (``watched``):

* which lines are plain, unconditional assignments of them (``Scan.assignment_lines``), for the editor to read;
* the first construct whose effect on them cannot be proven (``Scan.refusal``: line, text, why), or None:

  - another file sourced (``.``/``source``), ``eval``, ``exec``, ``return``/``exit`` (sourcing stops early) or a
    here-document, anywhere (a sourced file may assign anything; the rest may or may not run);
  - a watched variable assigned or used inside ``if``/``case``/a loop/a function/a ``{ }`` or ``( )`` group, in an
    ``&&``/``||`` list or a pipeline (it may or may not run, or runs in a subshell);
  - a watched variable used by a command, or assigned by ``${NAME:=...}``, or an assignment of it that shares its line
    with another command or spans several lines;
  - a quote, ``$(`` or backquote never closed.

Commands that cannot change the shell's variables stay unremarked: other variables' assignments (their values may
run commands, e.g. Debian's ``GRUB_DISTRIBUTOR=`lsb_release -i -s ...```: a command substitution runs in a subshell),
plain commands, conditionals and loops that do not touch the watched variables.
"""

from __future__ import annotations

import re

__all__ = ["Scan", "scan", "RESERVED_OPENERS", "STOPPERS"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGNMENT_WORD = re.compile(r"^(" + _NAME + r")(\+?)=")
# Reserved words that open a compound command, and those that close one.
RESERVED_OPENERS = ("if", "case", "for", "while", "until", "select", "{", "function")
_CLOSERS = ("fi", "esac", "done", "}")
# Reserved words that continue a compound command: what follows them is a command inside it.
_CONTINUERS = ("then", "else", "elif", "do", "!")
# Commands whose effect on the shell's variables (or on what of the file runs) cannot be followed.
_FIX_MOVE = ("move what it sets into /etc/default/grub or a drop-in of /etc/default/grub.d (files the editor reads), "
             "or remove it, then run again")
_FIX_PLAIN = ("make it a plain assignment on a line of its own at the top level of the file (decide the condition "
              "by hand), then run again")
_FIX_USE = "keep only plain assignments of the variable (NAME=\"...\" on a line of its own), then run again"
_FIX_CLOSE = "close it (grub-mkconfig cannot source this file either), then run again"
STOPPERS = {".": "sources another file, whose assignments the editor cannot follow",
            "source": "sources another file, whose assignments the editor cannot follow",
            "eval": "runs eval, which may assign anything",
            "exec": "runs exec, which replaces the shell reading the file",
            "return": "stops sourcing the file early",
            "exit": "stops sourcing the file early"}


class _Word:
    __slots__ = ("text", "line", "end_line")

    def __init__(self, text, line, end_line):
        self.text, self.line, self.end_line = text, line, end_line


class _Command:
    __slots__ = ("words", "line", "end_line", "depth", "conditional", "first_on_line", "alone_on_line")

    def __init__(self, words, depth, conditional):
        self.words, self.depth, self.conditional = words, depth, conditional
        self.line, self.end_line = words[0].line, max(w.end_line for w in words)
        self.first_on_line = self.alone_on_line = True


class Scan:
    """What ``scan`` found: ``assignment_lines`` (line numbers of the plain assignments of watched variables) and
    ``refusal`` (``(line, text, why, fix)`` of the first construct it cannot prove, or None)."""

    def __init__(self, assignment_lines, refusal):
        self.assignment_lines, self.refusal = assignment_lines, refusal


class _Tokens:
    """The words and operators of a shell text, with their line numbers (1-based)."""

    def __init__(self, text):
        self.text, self.pos, self.line = text, 0, 1
        self.items = []          # ("word", _Word) | ("op", text, line) | ("newline", line)
        self.unclosed = None     # (line, what) of a quote or substitution never closed
        self.heredoc = None      # line of the first here-document

    def _skip_nested(self, char):
        """Step over what starts at ``pos`` and is part of the current word whatever it holds - a backslash escape,
        a quoted string, a ``$((...))``, ``$(...)`` or ``${...}``; True when something was stepped over."""
        text = self.text
        if char == "\\":
            if text[self.pos + 1:self.pos + 2] == "\n":
                self.line += 1
            self.pos += 2
        elif char in "'\"`":
            self.pos += 1
            self._skip_quoted(char, self.line)
        elif text.startswith("$((", self.pos):
            self.pos += 3
            self._skip_group(")", self.line, "a $((...))")
            if text[self.pos - 1:self.pos] == ")" and text[self.pos:self.pos + 1] == ")":
                self.pos += 1
        elif text.startswith("$(", self.pos) or text.startswith("${", self.pos):
            self.pos += 2
            self._skip_group(")" if text[self.pos - 1] == "(" else "}", self.line, "a $(...) or ${...}")
        else:
            return False
        return True

    def _skip_group(self, close, start_line, what):
        """Skip to the matching ``close`` of a ``$(``, ``${`` or ``$((`` (quotes and nesting inside)."""
        depth, text = 1, self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char == "\n":
                self.line += 1
            if self._skip_nested(char):
                continue
            if char == close:
                depth -= 1
                self.pos += 1
                if depth == 0:
                    return
                continue
            if close == ")" and char == "(":
                depth += 1
            self.pos += 1
        self.unclosed = self.unclosed or (start_line, what)

    def _skip_quoted(self, quote, start_line):
        """Skip a quoted string (the opening quote already passed)."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char == "\n":
                self.line += 1
            if quote != "'" and char == "\\":
                if text[self.pos + 1:self.pos + 2] == "\n":
                    self.line += 1
                self.pos += 2
                continue
            if char == quote:
                self.pos += 1
                return
            if quote == '"' and (text.startswith("$(", self.pos) or text.startswith("${", self.pos)):
                self.pos += 2
                self._skip_group(")" if text[self.pos - 1] == "(" else "}", self.line, "a $(...) or ${...}")
                continue
            self.pos += 1
        self.unclosed = self.unclosed or (start_line, {"'": "a single quote", '"': "a double quote",
                                                       "`": "a backquote"}[quote])

    def run(self):
        text = self.text
        start = None
        start_line = 0
        while self.pos <= len(text):
            char = text[self.pos] if self.pos < len(text) else "\n"
            at_end = self.pos >= len(text)
            if char in " \t\n;&|()" or (char == "#" and start is None):
                if start is not None:
                    self.items.append(("word", _Word(text[start:self.pos], start_line, self.line)))
                    start = None
                if at_end:
                    break
                if char == "#":
                    end = text.find("\n", self.pos)
                    self.pos = len(text) if end < 0 else end
                    continue
                if char == "\n":
                    self.items.append(("newline", self.line))
                    self.line += 1
                    self.pos += 1
                    continue
                if char in " \t":
                    self.pos += 1
                    continue
                two = text[self.pos:self.pos + 2]
                op = two if two in (";;", "&&", "||", ";&", "|&") else char
                self.items.append(("op", op, self.line))
                self.pos += len(op)
                continue
            if start is None:
                start, start_line = self.pos, self.line
            if self._skip_nested(char):
                continue
            if text.startswith("<<", self.pos) and self.heredoc is None:
                self.heredoc = self.line
            self.pos += 1
        return self


def _commands(tokens):
    """Simple commands with their compound depth and whether they run on a condition (``&&``/``||`` list,
    pipeline)."""
    commands, words = [], []
    depth, in_case = 0, 0
    conditional = False       # the current and-or list / pipeline has more than one element
    last_line_cmd = {}

    def flush(next_op):
        nonlocal words, depth, in_case
        if not words:
            return
        first = words[0].text
        while first in _CONTINUERS and words:
            words = words[1:]
            first = words[0].text if words else ""
        if not words:
            return
        opener = first in RESERVED_OPENERS or (len(words) >= 1 and first.endswith("()"))
        if first in _CLOSERS:
            depth = max(0, depth - 1)
            if first == "esac":
                in_case = max(0, in_case - 1)
            rest = words[1:]
            words = []
            if rest:
                words = rest
                flush(next_op)
            return
        cmd = _Command(words, depth + (1 if opener else 0), conditional or next_op in ("&&", "||", "|", "|&", "&"))
        previous = last_line_cmd.get(cmd.line)
        if previous is not None:
            cmd.first_on_line = False
            previous.alone_on_line = cmd.alone_on_line = False
        last_line_cmd[cmd.line] = cmd
        commands.append(cmd)
        if opener:
            depth += 1
            if first == "case":
                in_case += 1
        words = []

    for item in tokens.items:
        kind = item[0]
        if kind == "word":
            words.append(item[1])
            continue
        if kind == "newline":
            flush(None)
            conditional = False
            continue
        op = item[1]
        if op in ("(", ")") and in_case:
            continue  # a case pattern's parenthesis
        if op == "(" and words and _NAME_RE.match(words[-1].text) and len(words) == 1:
            words[-1] = _Word(words[-1].text + "()", words[-1].line, words[-1].end_line)
            continue  # name() of a function definition
        if op == ")" and words and words[-1].text.endswith("()"):
            continue
        flush(op)
        if op == "(":
            depth += 1
        elif op == ")":
            depth = max(0, depth - 1)
        conditional = op in ("&&", "||", "|", "|&", "&")
    flush(None)
    return commands


_NAME_RE = re.compile("^" + _NAME + "$")


def _mentions(watched):
    names = "|".join(re.escape(v) for v in watched)
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + names + r")(?![A-Za-z0-9_])")


def scan(text, watched):
    """Scan a sourced shell file for what it does to the variables of ``watched`` (see the module docstring)."""
    tokens = _Tokens(text).run()
    lines = text.splitlines()
    mention = _mentions(watched)
    assigns_in_value = re.compile(r"\$\{(?:" + "|".join(re.escape(v) for v in watched) + r"):?[=]")
    assignment_lines = []

    def refuse(line, why, fix):
        return Scan(assignment_lines, (line, lines[line - 1] if 0 < line <= len(lines) else "", why, fix))

    for cmd in _commands(tokens):
        words = [w.text for w in cmd.words]
        if words[0] == "export":
            words = words[1:] or ["export"]
        assigned = []
        index = 0
        while index < len(words) and _ASSIGNMENT_WORD.match(words[index]):
            assigned.append(_ASSIGNMENT_WORD.match(words[index]).group(1))
            index += 1
        command_word = words[index] if index < len(words) else None
        if command_word in STOPPERS:
            return refuse(cmd.line, STOPPERS[command_word], _FIX_MOVE)
        touched = [w for w in words if mention.search(w)]
        if not touched:
            continue
        name = mention.search(touched[0]).group(0)
        ours = [n for n in assigned if n in watched]
        if command_word is not None:
            return refuse(cmd.line, f"this line uses {name} in a way the editor does not model (only plain assignments "
                                    "are)", _FIX_USE)
        if ours and cmd.depth > 0:
            return refuse(cmd.line, f"{ours[0]} is assigned inside a compound command (if, case, a loop, a function or "
                                    "a group), which may or may not run: the editor does not model it", _FIX_PLAIN)
        if ours and cmd.conditional:
            return refuse(cmd.line, f"{ours[0]} is assigned in an && / || list, a pipeline or in the background, which "
                                    "runs on a condition or in a subshell: the editor does not model it", _FIX_PLAIN)
        if any(assigns_in_value.search(w) for w in words):
            return refuse(cmd.line, f"${{{name}:=...}} assigns {name} inside another value: the editor does not model "
                                    "it", _FIX_USE)
        if not ours:
            continue  # another variable's value refers to ours: read, not assigned
        if any(_ASSIGNMENT_WORD.match(w).group(2) for w in words[:len(assigned)]):
            return refuse(cmd.line, f"{ours[0]}+= (appending, a bash extension) is not modelled",
                          "write NAME=\"$NAME ...\" instead, then run again")
        if len(assigned) > 1:
            return refuse(cmd.line, f"more than one assignment in one command ({' '.join(words)}) is not "
                                    "modelled", _FIX_PLAIN)
        if not cmd.first_on_line:
            return refuse(cmd.line, f"an assignment of {ours[0]} that does not start its line is not modelled (more "
                                    "than one command on the line)", _FIX_PLAIN)
        # The line's own parser (boot_config) reads it, and names what it cannot model there (a value over several
        # lines, another command after it).
        assignment_lines.append(cmd.line)
    if tokens.unclosed:
        return refuse(tokens.unclosed[0], f"{tokens.unclosed[1]} opened on this line is never closed", _FIX_CLOSE)
    if tokens.heredoc is not None:
        return refuse(tokens.heredoc, "a here-document is not modelled", _FIX_MOVE)
    return Scan(assignment_lines, None)
