# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The one model of the Linux kernel command line: what it says, and how to edit it.

Every part of the project that reads or writes kernel arguments (the GRUB editor, the facts module
reading /proc/cmdline, the planner deciding what is pending) goes through these functions, so they
cannot disagree about what a line means.

The rules, from the kernel's own code and documentation:

* Tokens (``lib/cmdline.c`` ``next_arg``): arguments are separated by white space; a double quote
  toggles quoting, so ``key="a b"`` and ``"key=a b"`` are one argument, and the quotes around the value
  (or around the whole argument) are not part of it. There is no backslash escape. Quotes anywhere
  else are kept by the kernel as characters, which nothing downstream expects: such a token is refused.
* Names (``kernel/params.c`` ``parameq``): ``-`` and ``_`` are the same character in a parameter name
  (``vfio-pci.ids`` is ``vfio_pci.ids``), not in its value.
* ``--``: what follows goes to init, not to the kernel; it is kept as it is and never edited.
* Last one wins for an ordinary key (a module parameter set twice keeps the second value).
* List keys accumulate: every occurrence adds its comma-separated items (dracut's ``getargs`` for
  ``rd.driver.pre``/``rd.driver.post``/``rd.driver.blacklist``, kmod for ``modprobe.blacklist``,
  systemd for ``modules-load``/``rd.modules-load`` and ``module_blacklist``). The kernel itself keeps
  only the last ``module_blacklist=``; the editor puts planned items into the last occurrence, which
  satisfies both readings.
* Option keys take a comma-separated list of options, every one of them applied
  (``intel_iommu=on,sm_on`` means on, with scalable mode): ``intel_iommu``, ``amd_iommu``, ``iommu``.
  They are modelled like list keys whose options exclude their opposite (``on``/``off``,
  ``pt``/``nopt``): planning ``intel_iommu=on`` removes an ``off`` option wherever it is.
* ``vfio-pci.ids`` is an ordinary key whose value is a set of IDs: the order does not matter.

A plan is two lists of plain arguments: ``present`` (``key=value`` sets a key, or adds items to a list
or option key; a bare ``flag`` must be there) and ``absent`` (``key`` forbids the key with any value,
``key=value`` forbids that value, or those items of a list or option key).
"""

from __future__ import annotations

__all__ = ["CmdlineError", "IOMMU_OFF", "LIST_KEYS", "OPTION_KEYS", "SET_KEYS", "split", "join", "param_key",
           "parts", "effective", "edit", "check", "satisfies"]

SPACES = " \t\n\v\f\r"
# Normalised names (see param_key) of keys whose comma-separated items accumulate over occurrences.
LIST_KEYS = frozenset({"modprobe.blacklist", "module_blacklist", "rd.driver.pre", "rd.driver.post",
                       "rd.driver.blacklist", "modules_load", "rd.modules_load"})
# Keys whose value is a list of options, each applied; an option excludes its opposite.
OPTION_KEYS = frozenset({"intel_iommu", "amd_iommu", "iommu"})
OPPOSITE = {"on": "off", "off": "on", "pt": "nopt", "nopt": "pt"}
# Ordinary keys whose value is a comma-separated set (order does not matter).
SET_KEYS = frozenset({"vfio_pci.ids"})
# The arguments that keep the IOMMU off whatever the firmware says (an ``off`` option of any IOMMU key).
IOMMU_OFF = ("iommu=off", "intel_iommu=off", "amd_iommu=off")
END_OF_KERNEL_ARGS = "--"


def vendor_iommu_args(cpu_vendor, amd_iommu_on=False):
    """The argument a CPU vendor's IOMMU needs on the kernel line to be on: Intel's VT-d stays off unless the line
    says ``intel_iommu=on``; AMD-Vi is switched on by the firmware, and ``amd_iommu=on`` is asked for only when the
    policy says so (``amd_iommu_on``). An unknown vendor gets none. The planner plans these arguments, and the host
    checks ask whether the running line has them (one rule for both)."""
    if cpu_vendor == "intel":
        return ["intel_iommu=on"]
    if cpu_vendor == "amd" and amd_iommu_on:
        return ["amd_iommu=on"]
    return []


class CmdlineError(ValueError):
    """A command line or a plan this model cannot represent, worded for the operator."""


def split(text):
    """Split a kernel command line into arguments the way ``next_arg`` does.

    Each argument is returned as written (quotes included) so that ``join`` gives the line back.
    Raises CmdlineError for an unclosed quote or a quote inside a name or a value.
    """
    if not isinstance(text, str):
        raise CmdlineError(f"a kernel command line must be a string, got {type(text).__name__}")
    args = []
    i, size = 0, len(text)
    while i < size:
        if text[i] in SPACES:
            i += 1
            continue
        start, in_quote = i, False
        while i < size and (in_quote or text[i] not in SPACES):
            if text[i] == '"':
                in_quote = not in_quote
            i += 1
        token = text[start:i]
        if in_quote:
            raise CmdlineError(f"the double quote in {token!r} is never closed")
        parts(token)  # refuses quotes the model cannot represent
        args.append(token)
    return args


def join(args):
    """Write arguments back as one command line (the inverse of ``split``)."""
    return " ".join(args)


def parts(arg):
    """Return ``(name as written, value or None)`` of one argument, its quotes removed.

    Accepted shapes: ``flag``, ``key=value``, ``key="value with spaces"``, ``"key=value with spaces"``.
    """
    body = arg
    if not isinstance(body, str) or not body:
        raise CmdlineError(f"{arg!r} is not a kernel argument (empty or not a string)")
    if body.startswith('"'):
        if len(body) < 2 or not body.endswith('"'):
            raise CmdlineError(f"{arg!r}: a quote around a whole argument must close at its end")
        body = body[1:-1]
        if '"' in body:
            raise CmdlineError(f"{arg!r} has a double quote inside a quoted argument")
        key, sep, value = body.partition("=")
    else:
        key, sep, value = body.partition("=")
        if value.startswith('"'):
            if len(value) < 2 or not value.endswith('"'):
                raise CmdlineError(f"{arg!r}: a quoted value must end with its closing quote")
            value = value[1:-1]
        if '"' in key or '"' in value:
            raise CmdlineError(f"{arg!r} has a double quote inside its name or value, which the kernel keeps "
                               "as a character: quote the whole value (key=\"...\") or nothing")
    if not key or any(c in SPACES for c in key):
        raise CmdlineError(f"{arg!r} has no parameter name before '='")
    return key, (value if sep else None)


def param_key(arg):
    """The normalised parameter name of an argument: ``-`` and ``_`` compare alike (``parameq``)."""
    return parts(arg)[0].replace("-", "_")


def _items(value):
    return [item for item in (value or "").split(",") if item]


def _render(name, value):
    if value is None:
        return name
    if any(c in SPACES for c in value):
        return f'{name}="{value}"'
    return f"{name}={value}"


def _kernel_part(args):
    args = list(args)
    if END_OF_KERNEL_ARGS in args:
        index = args.index(END_OF_KERNEL_ARGS)
        return args[:index], args[index:]
    return args, []


def _merged(list_keys):
    return frozenset(param_key(k) for k in list_keys) | OPTION_KEYS


def effective(args, list_keys=LIST_KEYS):
    """What the kernel (and the early userspace reading /proc/cmdline) ends up with.

    Returns ``{normalised name: value}``: the last value for an ordinary key (None for a bare flag);
    for a list or option key, the items of every occurrence in order of first appearance, joined with
    commas. Arguments after ``--`` belong to init and are left out.
    """
    merged = _merged(list_keys)
    result = {}
    for arg in _kernel_part(args)[0]:
        name, value = parts(arg)
        key = name.replace("-", "_")
        if key in merged:
            if value is None:
                result.setdefault(key, None)
                continue
            items = _items(result.get(key))
            items += [i for i in _items(value) if i not in items]
            result[key] = ",".join(items)
        else:
            result[key] = value
    return result


def _same_value(key, a, b):
    if a is None or b is None:
        return a is b
    if key in SET_KEYS:
        return set(_items(a)) == set(_items(b))
    return a == b


def _plain(arg, where):
    if not isinstance(arg, str):
        raise CmdlineError(f"{where} entry {arg!r} is a {type(arg).__name__}, not a kernel argument string")
    if not arg or arg.startswith("=") or any(c in SPACES + "\"'\\$`" for c in arg):
        raise CmdlineError(f"{where} entry {arg!r} is not one plain kernel argument (empty, no name, or with a "
                           "space, quote, backslash, $ or backtick): give each argument as its own item, "
                           "key=value or flag")
    return parts(arg)


class _Plan:
    """present/absent validated and indexed by normalised name."""

    def __init__(self, present, absent, list_keys):
        self.merged = _merged(list_keys)
        self.values = {}          # ordinary key -> (name as planned, value or None)
        self.items = {}           # list/option key -> (name as planned, [items])
        self.order = []           # planned keys, in plan order
        self.no_keys = set()      # keys forbidden with any value
        self.no_values = {}       # ordinary key -> [forbidden values]
        self.no_items = {}        # list/option key -> {forbidden items}
        for arg in present or []:
            name, value = _plain(arg, "present")
            key = name.replace("-", "_")
            if key in self.merged:
                if value is None or not _items(value):
                    raise CmdlineError(f"present entry {arg!r}: {name} takes a comma-separated list; give it "
                                       "at least one item")
                if key not in self.items:
                    self.items[key] = (name, [])
                    self.order.append(key)
                wanted = self.items[key][1]
                for item in _items(value):
                    opposite = OPPOSITE.get(item) if key in OPTION_KEYS else None
                    if opposite and opposite in wanted:
                        raise CmdlineError(f"present asks for both {name}={opposite} and {name}={item}")
                    if item not in wanted:
                        wanted.append(item)
            else:
                if key in self.values and not _same_value(key, self.values[key][1], value):
                    first = _render(*self.values[key])
                    raise CmdlineError(f"present asks for both {first!r} and {arg!r}")
                if key not in self.values:
                    self.values[key] = (name, value)
                    self.order.append(key)
        for arg in absent or []:
            name, value = _plain(arg, "absent")
            key = name.replace("-", "_")
            if value is None:
                if key in self.values or key in self.items:
                    raise CmdlineError(f"{name!r} is both present and absent")
                self.no_keys.add(key)
            elif key in self.merged:
                for item in _items(value):
                    if item in self.items.get(key, ("", []))[1]:
                        raise CmdlineError(f"{name}={item} is both present and absent")
                    self.no_items.setdefault(key, set()).add(item)
            else:
                if key in self.values and _same_value(key, self.values[key][1], value):
                    raise CmdlineError(f"{arg!r} is both present and absent")
                self.no_values.setdefault(key, []).append(value)
        for key in OPTION_KEYS & set(self.items):
            for item in self.items[key][1]:
                if item in OPPOSITE:
                    self.no_items.setdefault(key, set()).add(OPPOSITE[item])

    def forbids(self, key, value):
        """Whether an argument (key, value) is forbidden as a whole."""
        if key in self.no_keys:
            return True
        return any(_same_value(key, value, v) for v in self.no_values.get(key, ()) if value is not None)


def satisfies(args, arg, list_keys=LIST_KEYS):
    """Whether the line carries one planned argument (``key=value``, items of a list key, or a flag)."""
    return not check(args, [arg], [], list_keys)


def check(args, present, absent, list_keys=LIST_KEYS):
    """What the line lacks or has against the plan, in plain words; empty when it satisfies the plan."""
    plan = _Plan(present, absent, list_keys)
    kernel = _kernel_part(args)[0]
    eff = effective(kernel, list_keys)
    problems = []
    for key in plan.order:
        if key in plan.values:
            name, value = plan.values[key]
            want = _render(name, value)
            if key not in eff:
                problems.append(f"lacks {want}")
            elif not _same_value(key, eff[key], value):
                last = [arg for arg in kernel if param_key(arg) == key][-1]
                problems.append(f"lacks {want} (it has {last})")
        else:
            name, wanted = plan.items[key]
            missing = [i for i in wanted if i not in _items(eff.get(key))]
            if missing:
                problems.append(f"lacks {name}={','.join(missing)}")
    seen = set()
    for arg in kernel:
        name, value = parts(arg)
        key = name.replace("-", "_")
        if plan.forbids(key, value):
            bad = [arg]
        elif key in plan.merged and value is not None:
            bad = [f"{name}={i}" for i in _items(value) if i in plan.no_items.get(key, ())]
        else:
            bad = []
        for item in bad:
            if item not in seen:
                seen.add(item)
                problems.append(f"still has {item}")
    return problems


def edit(args, present, absent, list_keys=LIST_KEYS):
    """Return the edited argument list. Pure: check mode and real runs both call it.

    * Forbidden arguments go wherever they are; forbidden items leave their list, the rest stays.
    * A key the plan sets ends up exactly once, where the line first had it, in the operator's
      spelling of its name: an ordinary key with the planned value, a list or option key with every
      item its occurrences had (forbidden ones aside) plus the planned ones. New keys go at the end
      (before ``--``). A key already as planned, once, is left exactly as written.
    * Every argument whose key the plan does not name stays as written, in its place.

    The result satisfies the plan (``check`` finds nothing) and ``edit(edit(x)) == edit(x)``.
    """
    plan = _Plan(present, absent, list_keys)
    kernel, tail = _kernel_part(args)
    planned = set(plan.values) | set(plan.items)
    out = []
    for arg in kernel:
        name, value = parts(arg)
        key = name.replace("-", "_")
        if plan.forbids(key, value):
            if key in planned:
                out.append(_render(name, ""))  # keeps the place where the planned value goes
            continue
        if key in plan.merged and value is not None and plan.no_items.get(key):
            items = _items(value)
            kept = [i for i in items if i not in plan.no_items[key]]
            if kept != items:
                if not kept and key not in planned:
                    continue
                arg = _render(name, ",".join(kept))
        out.append(arg)

    for key in plan.order:
        positions = [n for n, arg in enumerate(out) if arg is not None and param_key(arg) == key]
        first = parts(out[positions[0]])[0] if positions else None
        if key in plan.values:
            pname, value = plan.values[key]
            if len(positions) == 1 and _same_value(key, parts(out[positions[0]])[1], value):
                continue
            new = _render(first or pname, value)
        else:
            pname, wanted = plan.items[key]
            have = []
            for n in positions:
                have += [i for i in _items(parts(out[n])[1]) if i not in have]
            missing = [i for i in wanted if i not in have]
            if len(positions) == 1 and not missing:
                continue
            new = _render(first or pname, ",".join(have + missing))
        if positions:
            out[positions[0]] = new
            for n in positions[1:]:
                out[n] = None
        else:
            out.append(new)
    return [arg for arg in out if arg is not None] + tail
