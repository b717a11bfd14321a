"""The kernel command-line model (plugins/module_utils/host/kernel_cmdline.py): examples from real lines, every
refusal, and the editing contract as properties over generated lines and plans."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline as kc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host.kernel_cmdline import CmdlineError

UBUNTU_PROC = ("BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0f4c1e2a-6f0e-4b8e-9d55-3c3a1f7b2c11 ro "
               "console=tty1 console=ttyS0")


# --- split / join ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, args", [
    ("", []),
    ("   ", []),
    (UBUNTU_PROC, UBUNTU_PROC.split()),
    ("quiet\tsplash\n", ["quiet", "splash"]),
    ('dyndbg="file drivers/vfio/* +p" quiet', ['dyndbg="file drivers/vfio/* +p"', "quiet"]),
    ('"acpi_osi=Windows 2015" ro', ['"acpi_osi=Windows 2015"', "ro"]),
    ("ro -- single init=/bin/sh", ["ro", "--", "single", "init=/bin/sh"]),
])
def test_split(text, args):
    assert kc.split(text) == args
    assert kc.split(kc.join(args)) == args


@pytest.mark.parametrize("arg, expected", [
    ("quiet", ("quiet", None)),
    ("vfio_pci.ids=", ("vfio_pci.ids", "")),
    ("root=UUID=abc", ("root", "UUID=abc")),
    ('dyndbg="a b"', ("dyndbg", "a b")),
    ('"dyndbg=a b"', ("dyndbg", "a b")),
    ('"quiet"', ("quiet", None)),
])
def test_parts(arg, expected):
    assert kc.parts(arg) == expected


@pytest.mark.parametrize("text, words", [
    ('quiet dyndbg="open', "never closed"),
    ('a"b c"d', "inside its name or value"),
    ('key=a"b"', "inside its name or value"),
    ('"key=a"b', "must close at its end"),
    ("=value", "no parameter name"),
    ('"=x"', "no parameter name"),
])
def test_split_refuses_what_it_cannot_model(text, words):
    with pytest.raises(CmdlineError, match=words):
        kc.split(text)


def test_split_refuses_non_string():
    with pytest.raises(CmdlineError, match="must be a string, got bytes"):
        kc.split(b"quiet")


@pytest.mark.parametrize("arg, key", [
    ("vfio-pci.ids=10de:1db4", "vfio_pci.ids"),
    ("vfio_pci.ids=10de:1db4", "vfio_pci.ids"),
    ("modules-load=vfio-pci", "modules_load"),
    ('"rd.driver.pre=a"', "rd.driver.pre"),
])
def test_param_key_dash_and_underscore_alike_in_names_only(arg, key):
    assert kc.param_key(arg) == key


# --- effective -----------------------------------------------------------------------------------

def test_effective_last_one_wins_lists_accumulate_and_init_args_left_out():
    args = kc.split("vfio-pci.ids=10de:1b80 rd.driver.pre=nvme quiet vfio_pci.ids=10de:1db4 "
                    "rd.driver.pre=vfio-pci,nvme modprobe.blacklist=nouveau -- vfio_pci.ids=x single")
    assert kc.effective(args) == {
        "vfio_pci.ids": "10de:1db4",
        "rd.driver.pre": "nvme,vfio-pci",
        "quiet": None,
        "modprobe.blacklist": "nouveau",
    }


def test_effective_bare_list_key_does_not_erase_items():
    assert kc.effective(["modprobe.blacklist=a", "modprobe.blacklist"]) == {"modprobe.blacklist": "a"}


# --- check: the examples from the issue ----------------------------------------------------------

@pytest.mark.parametrize("line, present, absent, problems", [
    # rd.driver.pre accumulates: the operator's nvme and the planned vfio-pci, in one or two arguments.
    ("rd.driver.pre=nvme,vfio-pci", ["rd.driver.pre=vfio-pci"], [], []),
    ("rd.driver.pre=nvme rd.driver.pre=vfio-pci", ["rd.driver.pre=vfio-pci"], [], []),
    ("rd.driver.pre=nvme", ["rd.driver.pre=vfio-pci"], [], ["lacks rd.driver.pre=vfio-pci"]),
    # vfio_pci.ids is vfio-pci.ids; the order of the IDs does not matter; last one wins.
    ("vfio_pci.ids=10de:1db4", ["vfio-pci.ids=10de:1db4"], [], []),
    ("vfio_pci.ids=10de:10f1,10de:1db4", ["vfio-pci.ids=10de:1db4,10de:10f1"], [], []),
    ("vfio-pci.ids=10de:1db4 vfio_pci.ids=10de:1b80", ["vfio-pci.ids=10de:1db4"], [],
     ["lacks vfio-pci.ids=10de:1db4 (it has vfio_pci.ids=10de:1b80)"]),
    ("vfio_pci.ids=", ["vfio-pci.ids=10de:1db4"], [], ["lacks vfio-pci.ids=10de:1db4 (it has vfio_pci.ids=)"]),
    # comma options: intel_iommu=on,sm_on means on.
    ("intel_iommu=on,sm_on", ["intel_iommu=on"], ["intel_iommu=off"], []),
    ("intel_iommu=sm_on,off", ["intel_iommu=on"], [], ["lacks intel_iommu=on", "still has intel_iommu=off"]),
    ("iommu=off", [], ["iommu=off"], ["still has iommu=off"]),
    ("quiet", ["quiet"], ["nomodeset"], []),
    ("quiet nomodeset=1", [], ["nomodeset"], ["still has nomodeset=1"]),
    ("ro -- iommu=off", [], ["iommu=off"], []),
])
def test_check_examples(line, present, absent, problems):
    assert kc.check(kc.split(line), present, absent) == problems


def test_satisfies_one_argument():
    args = kc.split("intel_iommu=on,sm_on rd.driver.pre=nvme,vfio-pci")
    assert kc.satisfies(args, "intel_iommu=on")
    assert kc.satisfies(args, "rd.driver.pre=vfio-pci")
    assert not kc.satisfies(args, "iommu=pt")


# --- edit: the examples --------------------------------------------------------------------------

@pytest.mark.parametrize("line, present, absent, edited", [
    ("quiet splash", ["intel_iommu=on", "iommu=pt"], ["iommu=off"], "quiet splash intel_iommu=on iommu=pt"),
    # The planned driver joins the operator's list; the operator's item stays.
    ("rd.driver.pre=nvme quiet", ["rd.driver.pre=vfio-pci"], [], "rd.driver.pre=nvme,vfio-pci quiet"),
    # A stale value is replaced in place, in the operator's spelling of the name.
    ("vfio_pci.ids=10de:1b80 quiet", ["vfio-pci.ids=10de:1db4"], [], "vfio_pci.ids=10de:1db4 quiet"),
    # A key the plan sets ends up once, where it first was.
    ("vfio_pci.ids=10de:1b80 quiet vfio-pci.ids=10de:10f0", ["vfio-pci.ids=10de:1db4"], [],
     "vfio_pci.ids=10de:1db4 quiet"),
    ("iommu=pt quiet iommu=pt", ["iommu=pt"], [], "iommu=pt quiet"),
    ("modprobe.blacklist=radeon quiet module_blacklist=x modprobe.blacklist=amdgpu,radeon",
     ["modprobe.blacklist=nouveau"], [], "modprobe.blacklist=radeon,amdgpu,nouveau quiet module_blacklist=x"),
    # An operator's argument written in the kernel's quoting stays as written when it is as planned.
    ('"iommu=pt" quiet', ["iommu=pt"], [], '"iommu=pt" quiet'),
    ("vfio_pci.ids=10de:1db4 quiet", ["vfio-pci.ids=10de:1db4"], [], "vfio_pci.ids=10de:1db4 quiet"),
    ("intel_iommu=on,sm_on", ["intel_iommu=on"], ["intel_iommu=off"], "intel_iommu=on,sm_on"),
    ("intel_iommu=sm_on,off quiet", ["intel_iommu=on"], [], "intel_iommu=sm_on,on quiet"),
    ("intel_iommu=off quiet", ["intel_iommu=on"], [], "intel_iommu=on quiet"),
    ("vfio-pci.ids=10de:1b80 quiet", ["vfio-pci.ids=10de:1db4"], ["vfio-pci.ids=10de:1b80"],
     "vfio-pci.ids=10de:1db4 quiet"),
    # iommu=off,pt is off and pt (x86 iommu_setup applies every option): pt alone does not remove off.
    ("iommu=off", ["iommu=pt"], [], "iommu=off,pt"),
    ("iommu=off quiet iommu=off,nopt", ["iommu=pt"], ["iommu=off"], "iommu=pt quiet"),
    ("modprobe.blacklist=nouveau,radeon", ["modprobe.blacklist=nouveau,nvidiafb"], ["modprobe.blacklist=radeon"],
     "modprobe.blacklist=nouveau,nvidiafb"),
    ("quiet nomodeset splash", [], ["nomodeset"], "quiet splash"),
    ('quiet dyndbg="file a +p"', ["iommu=pt"], [], 'quiet dyndbg="file a +p" iommu=pt'),
    ("ro -- single", ["iommu=pt"], [], "ro iommu=pt -- single"),
    ("allow_unsafe_interrupts=0 vfio_iommu_type1.allow_unsafe_interrupts=0", [],
     ["vfio_iommu_type1.allow_unsafe_interrupts=1"], "allow_unsafe_interrupts=0 vfio_iommu_type1.allow_unsafe_interrupts=0"),
])
def test_edit_examples(line, present, absent, edited):
    out = kc.edit(kc.split(line), present, absent)
    assert kc.join(out) == edited
    assert kc.check(out, present, absent) == []
    assert kc.edit(out, present, absent) == out


@pytest.mark.parametrize("present, absent, words", [
    (["intel_iommu=on", "intel_iommu=off"], [], "both intel_iommu=on and intel_iommu=off"),
    (["vfio-pci.ids=a", "vfio_pci.ids=b"], [], "present asks for both 'vfio-pci.ids=a' and 'vfio_pci.ids=b'"),
    (["quiet"], ["quiet"], "'quiet' is both present and absent"),
    (["iommu=pt"], ["iommu=pt"], "iommu=pt is both present and absent"),
    (["vfio-pci.ids=a,b"], ["vfio_pci.ids=b,a"], "both present and absent"),
    (["rd.driver.pre="], [], "takes a comma-separated list"),
    (["modprobe.blacklist"], [], "takes a comma-separated list"),
    (["a b"], [], "'a b' is not one plain kernel argument"),
    ([], ["x=$(reboot)"], "absent entry 'x=\\$\\(reboot\\)' is not one plain"),
    (["=on"], [], "not one plain kernel argument"),
    ([""], [], "not one plain kernel argument"),
    ([4318], [], "present entry 4318 is a int, not a kernel argument string"),
])
def test_edit_refuses_a_plan_it_cannot_satisfy(present, absent, words):
    with pytest.raises(CmdlineError, match=words):
        kc.edit(["quiet"], present, absent)
    with pytest.raises(CmdlineError, match=words):
        kc.check(["quiet"], present, absent)


def test_edit_with_custom_list_keys():
    out = kc.edit(["rd.driver.pre=nvme"], ["rd.driver.pre=vfio-pci"], [], list_keys=())
    assert out == ["rd.driver.pre=vfio-pci"]


# --- the contract, over generated lines and plans --------------------------------------------------

NAMES = ["quiet", "splash", "nomodeset", "iommu", "intel_iommu", "amd_iommu", "vfio-pci.ids", "vfio_pci.ids",
         "rd.driver.pre", "rd.driver_pre", "modprobe.blacklist", "module_blacklist", "modules-load", "root", "x-y"]
VALUES = ["on", "off", "pt", "nopt", "sm_on", "a", "b", "nvme", "vfio-pci", "10de:1db4", "UUID=1", ""]

value = st.lists(st.sampled_from(VALUES), min_size=0, max_size=3).map(",".join)
plain_arg = st.one_of(
    st.sampled_from(NAMES),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES), value),
)
operator_arg = st.one_of(
    plain_arg,
    st.builds(lambda n, v: f'{n}="{v} x"', st.sampled_from(NAMES), value),
    st.builds(lambda n, v: f'"{n}={v} y"', st.sampled_from(NAMES), value),
)
lines = st.lists(operator_arg, max_size=8)
plan_arg = st.one_of(
    st.sampled_from(NAMES),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES),
              st.lists(st.sampled_from(VALUES[:-1]), min_size=1, max_size=2).map(",".join)),
)


@st.composite
def line_and_raw_plan(draw):
    """An operator line and a plan that often names the line's own keys and values (contradictions included)."""
    line = draw(lines)
    own = [kc.parts(a) for a in line]
    own_plain = [n if v is None else f"{n}={v}" for n, v in own
                 if v is None or (v and all(c not in v for c in ' "'))]
    pick = st.one_of(plan_arg, st.sampled_from(own_plain)) if own_plain else plan_arg
    return line, (draw(st.lists(pick, max_size=4)), draw(st.lists(pick, max_size=3)))


# --- what makes a plan impossible, written from the model's documented rules (the module docstring), not from its
# code: a refusal of edit() is justified exactly when this finds a contradiction.
_MERGED = {"modprobe.blacklist", "module_blacklist", "rd.driver.pre", "rd.driver.post", "rd.driver.blacklist",
           "modules_load", "rd.modules_load", "intel_iommu", "amd_iommu", "iommu"}
_OPTIONS = {"intel_iommu", "amd_iommu", "iommu"}
_OPPOSITES = {("on", "off"), ("off", "on"), ("pt", "nopt"), ("nopt", "pt")}


def _name_value(arg):
    name, sep, value = arg.partition("=")
    return name.replace("-", "_"), (value if sep else None)


def contradiction(present, absent):
    """Why the plan (present, absent) cannot be satisfied or is not a plan, or None."""
    items, values = {}, {}
    for arg in present:
        key, value = _name_value(arg)
        if key in _MERGED:
            new = [i for i in (value or "").split(",") if i]
            if not new:
                return f"{arg}: a list key without items"
            for item in new:
                if key in _OPTIONS and any((item, other) in _OPPOSITES for other in items.get(key, [])):
                    return f"{key}: {item} and its opposite"
                items.setdefault(key, []).append(item)
        elif key in values and _differ(key, values[key], value):
            return f"{key}: two values"
        else:
            values.setdefault(key, value)
    for arg in absent:
        key, value = _name_value(arg)
        if value is None:
            if key in values or key in items:
                return f"{key}: present and absent"
        elif key in _MERGED:
            if any(item in items.get(key, []) for item in value.split(",") if item):
                return f"{key}: an item present and absent"
        elif key in values and not _differ(key, values[key], value):
            return f"{arg}: present and absent"
    return None


def _differ(key, a, b):
    if a is None or b is None:
        return a is not b
    if key == "vfio_pci.ids":
        return set(i for i in a.split(",") if i) != set(i for i in b.split(",") if i)
    return a != b


def consistent(present, absent):
    """The plan with every item that would contradict the ones before it left out: a plan edit() must accept."""
    kept_present, kept_absent = [], []
    for arg in present:
        if contradiction(kept_present + [arg], []) is None:
            kept_present.append(arg)
    for arg in absent:
        if contradiction(kept_present, kept_absent + [arg]) is None:
            kept_absent.append(arg)
    return kept_present, kept_absent


@st.composite
def line_and_plan(draw):
    """An operator line and a plan it is possible to satisfy: no example is discarded."""
    line, (present, absent) = draw(line_and_raw_plan())
    return line, consistent(present, absent)


def _edited(line, plan):
    present, absent = plan
    return kc.edit(line, present, absent)


PROPERTY = settings(max_examples=400, deadline=None)  # no example is discarded (line_and_plan is satisfiable)


@PROPERTY
@given(line_and_raw_plan())
def test_every_refusal_is_justified_and_every_possible_plan_is_accepted(case):
    """An editor that refuses too much fails here, and so does one that accepts an impossible plan."""
    line, (present, absent) = case
    why = contradiction(present, absent)
    try:
        out = kc.edit(line, present, absent)
    except CmdlineError as exc:
        assert why is not None, f"refused a possible plan {present} / {absent}: {exc}"
        return
    assert why is None, f"accepted an impossible plan ({why}): {out}"


@PROPERTY
@given(line_and_plan())
def test_edit_satisfies_the_plan_and_is_idempotent(case):
    line, plan = case
    out = _edited(line, plan)
    assert kc.check(out, *plan) == []
    assert kc.edit(out, *plan) == out
    assert kc.split(kc.join(out)) == out


@PROPERTY
@given(line_and_plan())
def test_edit_keeps_every_argument_the_plan_does_not_touch(case):
    line, plan = case
    out = _edited(line, plan)
    touched = {kc.param_key(a) for a in plan[0] + plan[1]}
    untouched_before = [a for a in line if kc.param_key(a) not in touched]
    untouched_after = [a for a in out if kc.param_key(a) not in touched]
    assert untouched_after == untouched_before


@PROPERTY
@given(line_and_plan())
def test_edit_keeps_list_items_not_forbidden_and_adds_nothing_twice(case):
    line, plan = case
    present, absent = plan
    out = _edited(line, plan)
    before, after = kc.effective(line), kc.effective(out)
    forbidden = kc.effective([a for a in absent if "=" in a])
    for key in kc.LIST_KEYS | kc.OPTION_KEYS:
        if before.get(key) is None or any(kc.param_key(a) == key and "=" not in a for a in absent):
            continue
        items_after = (after.get(key) or "").split(",")
        no = set((forbidden.get(key) or "").split(","))
        if key in kc.OPTION_KEYS:
            no |= {kc.OPPOSITE[i] for a in present if kc.param_key(a) == key
                   for i in kc.parts(a)[1].split(",") if i in kc.OPPOSITE}
        for item in before[key].split(","):
            if item and item not in no:
                assert item in items_after
    # Nothing is added that was there: a planned list item appears no more often than before (or once).
    for arg in present:
        key = kc.param_key(arg)
        if key in kc.LIST_KEYS and "=" in arg:
            for item in kc.parts(arg)[1].split(","):
                count = lambda args: sum(kc.parts(a)[1].split(",").count(item) for a in args  # noqa: E731
                                         if kc.param_key(a) == key and kc.parts(a)[1] is not None)
                assert count(out) <= max(1, count(line))
    assert len(out) <= len(line) + len(present)
    # A key the plan sets is there exactly once.
    for arg in present:
        assert sum(1 for a in out if kc.param_key(a) == kc.param_key(arg)) == 1


@PROPERTY
@given(lines)
def test_effective_matches_split_of_join(line):
    assert kc.effective(kc.split(kc.join(line))) == kc.effective(line)


@pytest.mark.parametrize("vendor, amd_iommu_on, expected", [
    ("intel", False, ["intel_iommu=on"]),
    ("intel", True, ["intel_iommu=on"]),
    ("amd", False, []),
    ("amd", True, ["amd_iommu=on"]),
    (None, True, []),
    ("arm", True, []),
])
def test_vendor_iommu_args(vendor, amd_iommu_on, expected):
    assert kc.vendor_iommu_args(vendor, amd_iommu_on) == expected


@given(st.sampled_from(["intel", "amd", None, "other"]), st.booleans())
def test_a_line_with_the_vendor_iommu_args_satisfies_them_and_has_no_iommu_off(vendor, amd_iommu_on):
    args = kc.vendor_iommu_args(vendor, amd_iommu_on)
    line = ["quiet", *args]
    assert all(kc.satisfies(line, arg) for arg in args)
    assert not kc.check(line, args, list(kc.IOMMU_OFF))
