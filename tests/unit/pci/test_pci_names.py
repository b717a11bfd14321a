"""Model names from the PCI ID database (plugins/module_utils/pci/ids.py) and Nova alias names
(plugins/module_utils/pci/alias.py): the real Debian pci.ids, Nova's own code as the judge of alias names,
and property tests for the pure logic."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ogc_testlib import PCI_IDS, ROOT, openstack_python

import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.alias as pci_alias  # noqa: E402  (module_utils is on the path: tests/unit/conftest.py)
import ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.pci.ids as pci_ids  # noqa: E402


# --- the real database -------------------------------------------------------------------------

def test_names_from_the_real_database(pci_ids_db):
    assert pci_ids_db.vendor("10de") == "NVIDIA Corporation"
    assert pci_ids_db.device("10de", "24b0") == "GA104GL [RTX A4000]"
    assert pci_ids_db.device("1a03", "2000") == "ASPEED Graphics Family"
    assert pci_ids_db.device("10de", "1db4") == "GV100GL [Tesla V100 PCIe 16GB]"
    # A subsystem line (two tabs) under its device.
    assert pci_ids_db.subsystem("10de", "1db8", "10de", "131d") == "Tesla V100-SXM3-32GB-H"
    assert pci_ids_db.names("1002", "740f") == {"vendor_name": "Advanced Micro Devices, Inc. [AMD/ATI]",
                                                "device_name": "Aldebaran/MI200 [Instinct MI210]",
                                                "subsystem_name": None}


def test_unknown_ids_have_no_name(pci_ids_db):
    assert pci_ids_db.vendor("0c0c") is None
    assert pci_ids_db.device("10de", "fffe") is None
    assert pci_ids_db.device("0c0c", "0001") is None
    assert pci_ids_db.subsystem("10de", "1db4", "0c0c", "0c0c") is None


def test_class_section_is_not_read_as_vendors(pci_ids_db):
    """The device classes ("C 03  Display controller", then "\\t00  VGA compatible controller") end the vendors."""
    vendors = pci_ids_db._index()  # pylint: disable=protected-access
    assert "ffff" in vendors  # the last vendor ("Illegal Vendor ID") is kept
    assert pci_ids_db.device("ffff", "00") is None
    # Every vendor line of the file, counted independently, and none more.
    with open(PCI_IDS, encoding="utf-8") as handle:
        text = handle.read()
    expected = len(re.findall(r"^[0-9a-f]{4}  ", text.split("\nC 00  ")[0], re.M))
    assert len(vendors) == expected > 2000


def _device_lines(vendors=None):
    """(vendor, device, name) of every device line of the real file, read independently of pci_ids."""
    found, vendor = [], None
    with open(PCI_IDS, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("C "):
                break
            if re.match(r"^[0-9a-f]{4}  ", line):
                vendor = line[:4]
            elif re.match(r"^\t[0-9a-f]{4}  ", line) and (vendors is None or vendor in vendors):
                found.append((vendor, line[1:5], line[7:].rstrip("\n").strip()))
    return found


def test_every_device_line_of_the_file_is_found(pci_ids_db):
    """Walk the file independently (vendor, device lines) and look every device up."""
    lines = _device_lines()
    for vendor, device, name in lines:
        assert pci_ids_db.device(vendor, device) == name
    assert len(lines) > 15000


def test_loading_is_fast():
    """The whole file is read once; only the devices looked up are parsed (measured: ~10 ms here)."""
    started = time.perf_counter()
    database = pci_ids.load(PCI_IDS)
    for vendor, product in (("10de", "1db4"), ("1a03", "2000"), ("8086", "1572"), ("1002", "740f")):
        assert database.device(vendor, product)
    assert time.perf_counter() - started < 1.0


def test_find_takes_the_first_existing_file(tmp_path):
    second = tmp_path / "b.ids"
    second.write_text("10de  NVIDIA Corporation\n")
    (tmp_path / "dir.ids").mkdir()
    assert pci_ids.find([str(tmp_path / "a.ids"), str(tmp_path / "dir.ids"), str(second)]) == str(second)
    assert pci_ids.find([str(tmp_path / "none")]) is None
    assert pci_ids.find() in pci_ids.DEFAULT_PATHS


@pytest.mark.parametrize("make, needle", [
    (lambda p: p / "missing", "does not exist: install the pci.ids (Debian) or hwdata"),
    (lambda p: p, "is a directory, not the pci.ids file"),
])
def test_load_errors_name_the_path_and_the_fix(tmp_path, make, needle):
    path = make(tmp_path)
    with pytest.raises(pci_ids.PciIdsError, match=re.escape(f"{path} ") + ".*" + re.escape(needle)):
        pci_ids.load(str(path))


def test_a_file_that_is_not_a_database_is_refused_at_first_lookup():
    database = pci_ids.load(os.path.join(ROOT, "README.md"))
    with pytest.raises(pci_ids.PciIdsError, match=r"README.md holds no vendors: it is not a pci.ids file"):
        database.vendor("10de")


def test_a_wrong_type_is_refused():
    with pytest.raises(pci_ids.PciIdsError, match="expected the text of a pci.ids file, got bytes"):
        pci_ids.PciIds(b"10de  NVIDIA Corporation\n")


def test_stray_bytes_do_not_stop_discovery(tmp_path):
    path = tmp_path / "pci.ids"
    path.write_bytes(b"# old Latin-1 copy\n10de  NVIDIA Corporation\n\t1db4  V100 \xe9\n")
    assert pci_ids.load(str(path)).device("10de", "1db4") == "V100 \ufffd"


@pytest.mark.parametrize("name, expected", [
    ("GA104GL [RTX A4000]", "RTX A4000"),
    ("GV100GL [Tesla V100 PCIe 16GB]", "Tesla V100 PCIe 16GB"),
    ("ASPEED Graphics Family", "ASPEED Graphics Family"),
    ("Odd [ ] name", "Odd [ ] name"),
    ("GA100 [ ]", "GA100 [ ]"),
    ("FCH SATA Controller [AHCI mode]", "FCH SATA Controller [AHCI mode]"),
    ("Starship/Matisse Internal PCIe GPP Bridge 0 to bus[E:B]", "Starship/Matisse Internal PCIe GPP Bridge 0 to bus[E:B]"),
    ("Aldebaran/MI200 [Instinct MI210]", "Instinct MI210"),
    ("TU102 [GeForce RTX 2080 Ti Rev. A]", "GeForce RTX 2080 Ti Rev. A"),
    (None, None),
    ("", None),
])
def test_marketing_name(name, expected):
    assert pci_ids.marketing_name(name) == expected


# Text of a database built from generated entries, in the file's syntax.
IDS = st.text(alphabet="0123456789abcdef", min_size=4, max_size=4)
NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1,
                max_size=30).map(str.strip).filter(lambda n: n and "  " not in n)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(IDS, st.tuples(NAMES, st.dictionaries(IDS, st.tuples(NAMES, st.dictionaries(
    st.tuples(IDS, IDS), NAMES, max_size=3)), max_size=4)), min_size=1, max_size=6))
def test_property_every_entry_written_is_read_back(db):
    lines = ["# comment", ""]
    for vendor, (vname, devices) in db.items():
        lines.append(f"{vendor}  {vname}")
        for device, (dname, subs) in devices.items():
            lines.append(f"\t{device}  {dname}")
            lines.extend(f"\t\t{sv} {sd}  {sname}" for (sv, sd), sname in subs.items())
    lines += ["", "C 03  Display controller", "\t00  VGA compatible controller", "\t\t00  VGA controller"]
    parsed = pci_ids.PciIds("\n".join(lines) + "\n")
    for vendor, (vname, devices) in db.items():
        assert parsed.vendor(vendor) == vname
        for device, (dname, subs) in devices.items():
            assert parsed.device(vendor, device) == dname
            for (sv, sd), sname in subs.items():
                assert parsed.subsystem(vendor, device, sv, sd) == sname
    assert parsed.vendor("C 03") is None


# --- alias names: Nova's rule ------------------------------------------------------------------

TRICKY = ["tesla-v100", "rtx-a4000", "my gpu", "GPU_1.x", "a\tb", "é", "a" * 256, "a" * 257, "", " ", "a:b",
          "a,b", " x", "x ", "\tx", "x\n", ":", ",", "v100:2", "1", "-", "a/b", "a=b", "a;b"]


def test_alias_rule_is_novas_own(pci_ids_db):
    """Nova's code decides: every name the rule accepts works in Nova end to end, every name it refuses does not.

    The names: tricky ones, and the alias derived from every 20th NVIDIA and AMD device name of the real
    database (Nova validates each alias with jsonschema, ~60 ms a name here; all of them are checked below)."""
    derived = sorted({pci_alias.alias_from_model_name(pci_ids.marketing_name(pci_ids_db.device(v, p)))
                      for v, p, _name in _device_lines(("10de", "1002"))} - {None})
    assert len(derived) > 1000 and all(pci_alias.alias_name_error(d) is None for d in derived)
    derived = derived[::20]
    names = TRICKY + derived
    proc = subprocess.run([openstack_python(), os.path.join(ROOT, "tests", "helpers", "nova_alias_oracle.py")],
                          input=json.dumps(names), capture_output=True, text=True, check=True, cwd="/", timeout=300)
    nova = dict(zip(names, json.loads(proc.stdout.splitlines()[-1])))
    ours = {name: pci_alias.alias_name_error(name) is None for name in names}
    assert ours == nova
    assert all(nova[d] for d in derived)


@pytest.mark.parametrize("name, needle", [
    (None, "must be a string, got NoneType"),
    (5, "must be a string, got int"),
    ("", "must not be empty"),
    ("  ", "must not be empty"),
    ("a" * 257, "at most 256 characters (Nova's [pci] alias schema), this has 257"),
    ("v100:2", "cannot contain ':': in a flavor's pci_passthrough:alias it separates the name from the count"),
    ("a,b", "cannot contain ',': in a flavor's pci_passthrough:alias it separates two aliases"),
    (" v100", "cannot start or end with a space: Nova strips it"),
])
def test_alias_rule_says_why(name, needle):
    assert needle in pci_alias.alias_name_error(name)


@pytest.mark.parametrize("model, alias", [
    ("RTX A4000", "rtx-a4000"),
    ("GeForce RTX 2080 Ti Rev. A", "geforce-rtx-2080-ti-rev-a"),
    ("Instinct MI210", "instinct-mi210"),
    ("ASPEED Graphics Family", "aspeed-graphics-family"),
    ("TITAN X / TITAN Xp", "titan-x-titan-xp"),
    ("--", None),
    ("", None),
    (None, None),
    ("x" * 100, "x" * 64),
])
def test_alias_from_model_name(model, alias):
    assert pci_alias.alias_from_model_name(model) == alias


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_property_derived_alias_is_valid_and_stable(name):
    alias = pci_alias.alias_from_model_name(name)
    if alias is None:
        assert not re.search(r"[a-z0-9]", name.lower())
        return
    assert pci_alias.alias_name_error(alias) is None
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", alias) and len(alias) <= 64
    assert pci_alias.alias_from_model_name(alias) == alias  # a derived name derives itself


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_property_rule_accepts_exactly_nova_shaped_names(name):
    ok = pci_alias.alias_name_error(name) is None
    assert ok == (0 < len(name) <= 256 and ":" not in name and "," not in name and name == name.strip()
                  and bool(name.strip()))
