"""plugins/module_utils/host/files.py and plugins/modules/host_files.py: the vfio phase's files in one module run. Written on
real directories under tmp_path; the marked block is compared with what ansible.builtin.blockinfile itself
writes; writing the same desired files twice changes nothing the second time (hypothesis)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.module_utils.testing import patch_module_args
from ogc_testlib import collection_module

module = collection_module("host_files")
hf = module.hf
MARKER = "# {mark} open-gpu-cloud passthrough_host: vfio before any GPU driver"


@pytest.fixture(autouse=True)
def not_the_controller(monkeypatch):
    """A module runs in its own process, never as the controller (see the other module tests)."""
    from ansible.module_utils import _internal  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(_internal, "is_controller", False)


def run_module(capsys, args, check_mode=False, diff=False):
    args = dict(args)
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = diff
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def converge(root, entries):
    actions = hf.plan(str(root), entries)
    for act in actions:
        hf.apply(str(root), act)
    return actions


def tree(root):
    """Every path under root: (kind, mode, content or link target)."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            st_ = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", None, os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st_.st_mode), None)
            else:
                with open(path, "rb") as handle:
                    out[rel] = ("file", stat.S_IMODE(st_.st_mode), handle.read())
    return out


VFIO = [
    {"path": "/etc/modprobe.d/vfio.conf", "content": "options vfio-pci ids=10de:1db4\n", "mode": "0644",
     "needs": ["initramfs"]},
    {"path": "/usr/local/sbin/vfio-pci-bind", "content": "#!/bin/sh\nexit 0\n", "mode": "0755", "needs": ["initramfs"]},
    {"path": "/etc/systemd/system/vfio-pci-bind.service", "content": "[Unit]\n", "mode": "0644"},
    {"path": "/etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service", "state": "link",
     "src": "/etc/systemd/system/vfio-pci-bind.service"},
    {"path": "/etc/initramfs-tools/modules", "state": "block", "block": "vfio\nvfio_iommu_type1\nvfio_pci",
     "marker": MARKER, "needs": ["initramfs"]},
    {"path": "/etc/modprobe.d/blacklist-passthrough.conf", "state": "absent", "needs": ["initramfs"]},
]


# --- writing, then nothing to do ----------------------------------------------------------------

def test_first_write_creates_files_directories_and_link_then_nothing_changes(tmp_path):
    actions = converge(tmp_path, VFIO)
    assert [a["action"] for a in actions] == ["create", "create", "create", "link", "create", "none"]
    assert (tmp_path / "etc/modprobe.d/vfio.conf").read_text() == "options vfio-pci ids=10de:1db4\n"
    assert stat.S_IMODE((tmp_path / "usr/local/sbin/vfio-pci-bind").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "usr/local/sbin").stat().st_mode) == 0o755
    assert os.readlink(tmp_path / "etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service") == \
        "/etc/systemd/system/vfio-pci-bind.service"
    assert (tmp_path / "etc/initramfs-tools/modules").read_text() == (
        "# BEGIN open-gpu-cloud passthrough_host: vfio before any GPU driver\nvfio\nvfio_iommu_type1\nvfio_pci\n"
        "# END open-gpu-cloud passthrough_host: vfio before any GPU driver\n")
    assert stat.S_IMODE((tmp_path / "etc/initramfs-tools/modules").stat().st_mode) == 0o644
    before = tree(tmp_path)
    again = hf.plan(str(tmp_path), VFIO)
    assert [a["changed"] for a in again] == [False] * len(VFIO)
    assert tree(tmp_path) == before


def test_a_directory_shared_by_two_entries_is_created_once(tmp_path):
    entries = [{"path": "/etc/modprobe.d/a.conf", "content": "a\n"}, {"path": "/etc/modprobe.d/b.conf", "content": "b\n"}]
    actions = hf.plan(str(tmp_path), entries)
    assert actions[0]["mkdirs"] == ["/etc", "/etc/modprobe.d"] and actions[1]["mkdirs"] == []
    for act in actions:
        hf.apply(str(tmp_path), act)
    assert sorted(os.listdir(tmp_path / "etc/modprobe.d")) == ["a.conf", "b.conf"]


def test_existing_directory_mode_and_file_owner_mode_are_kept(tmp_path):
    (tmp_path / "usr/local/sbin").mkdir(parents=True)
    os.chmod(tmp_path / "usr/local/sbin", 0o2775)                     # Debian's /usr/local/sbin
    os.chown(tmp_path / "usr/local/sbin", 0, 50)
    modules = tmp_path / "etc/initramfs-tools/modules"
    modules.parent.mkdir(parents=True)
    modules.write_text("# operator's\nbochs\n")
    os.chmod(modules, 0o600)
    os.chown(modules, 1234, 4321)
    converge(tmp_path, [{"path": "/usr/local/sbin/x", "content": "x\n", "mode": "0755"},
                        {"path": "/etc/initramfs-tools/modules", "state": "block", "block": "vfio", "marker": MARKER}])
    assert stat.S_IMODE((tmp_path / "usr/local/sbin").stat().st_mode) == 0o2775
    assert stat.S_IMODE(modules.stat().st_mode) == 0o600                 # no mode given: the operator's kept
    assert (modules.stat().st_uid, modules.stat().st_gid) == (1234, 4321)
    assert modules.read_text().startswith("# operator's\nbochs\n# BEGIN ")


def test_declared_mode_is_set_on_an_existing_file(tmp_path):
    target = tmp_path / "etc/modules-load.d/vfio.conf"
    target.parent.mkdir(parents=True)
    target.write_text("vfio\n")
    os.chmod(target, 0o600)
    actions = converge(tmp_path, [{"path": "/etc/modules-load.d/vfio.conf", "content": "vfio\n", "mode": "0644"}])
    assert actions[0]["action"] == "chmod"
    assert actions[0]["diff"][0]["before"] == {"path": str(target), "mode": "0600"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_absent_removes_a_file_and_a_link_but_not_its_target(tmp_path):
    (tmp_path / "etc/systemd/system/sysinit.target.wants").mkdir(parents=True)
    unit = tmp_path / "etc/systemd/system/vfio-pci-bind.service"
    unit.write_text("[Unit]\n")
    link = tmp_path / "etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service"
    os.symlink("../vfio-pci-bind.service", link)
    actions = converge(tmp_path, [
        {"path": "/etc/systemd/system/sysinit.target.wants/vfio-pci-bind.service", "state": "absent"},
        {"path": "/usr/local/sbin/vfio-pci-bind", "state": "absent", "needs": ["initramfs"]}])
    assert [a["action"] for a in actions] == ["remove", "none"]
    assert not os.path.lexists(link) and unit.read_text() == "[Unit]\n"
    assert actions[0]["diff"] == [{"before_header": str(link), "after_header": f"{link} (removed)",
                                   "before": "symlink to ../vfio-pci-bind.service\n", "after": ""}]


def test_a_wrong_link_is_replaced(tmp_path):
    wants = tmp_path / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True)
    os.symlink("/etc/elsewhere", wants / "vfio-pci-bind.service")
    actions = converge(tmp_path, [VFIO[3]])
    assert actions[0]["diff"][0]["before"]["src"] == "/etc/elsewhere"
    assert os.readlink(wants / "vfio-pci-bind.service") == "/etc/systemd/system/vfio-pci-bind.service"


# --- symlinks never lead out of the root -----------------------------------------------------------

def test_a_symlinked_file_is_replaced_never_written_through(tmp_path):
    outside = tmp_path / "outside.conf"
    outside.write_text("the controller's own file\n")
    root = tmp_path / "root"
    (root / "etc/modprobe.d").mkdir(parents=True)
    os.symlink(str(outside), root / "etc/modprobe.d/vfio.conf")
    actions = converge(root, [VFIO[0]])
    assert actions[0]["action"] == "replace-link"
    assert outside.read_text() == "the controller's own file\n"
    assert not (root / "etc/modprobe.d/vfio.conf").is_symlink()
    assert (root / "etc/modprobe.d/vfio.conf").read_text() == VFIO[0]["content"]


def test_absolute_symlinks_resolve_inside_the_root(tmp_path):
    """/etc/initramfs-tools -> /srv/initramfs on the host: in a sandbox that is <root>/srv/initramfs, and a
    symlinked modules file is edited at its target there (the link stays)."""
    root = tmp_path / "root"
    (root / "srv/initramfs").mkdir(parents=True)
    (root / "etc").mkdir()
    os.symlink("/srv/initramfs", root / "etc/initramfs-tools")
    (root / "srv/initramfs/modules.site").write_text("bochs\n")
    os.symlink("/srv/initramfs/modules.site", root / "srv/initramfs/modules")
    converge(root, [VFIO[4], {"path": "/etc/initramfs-tools/hooks/vfio-pci-bind", "content": "#!/bin/sh\n"}])
    assert (root / "srv/initramfs/modules").is_symlink()
    assert (root / "srv/initramfs/modules.site").read_text().startswith("bochs\n# BEGIN open-gpu-cloud")
    assert (root / "srv/initramfs/hooks/vfio-pci-bind").read_text() == "#!/bin/sh\n"
    assert sorted(os.listdir(tmp_path)) == ["root"]                    # nothing beside the root
    assert hf.plan(str(root), [VFIO[4]])[0]["changed"] is False


def test_dotdot_stops_at_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    converge(root, [{"path": "/../../etc/x.conf", "content": "x\n"}])
    assert (root / "etc/x.conf").read_text() == "x\n" and not (tmp_path / "etc").exists()


# --- the marked block is blockinfile's ----------------------------------------------------------------

def blockinfile(capsys, tmp_path, text, block):
    import ansible.modules.blockinfile as bi  # pylint: disable=import-outside-toplevel

    path = tmp_path / "bi.txt"
    if text is None:
        if path.exists():
            path.unlink()
    else:
        path.write_bytes(text.encode())
    with patch_module_args({"path": str(path), "block": block, "marker": MARKER, "create": True}):
        with pytest.raises(SystemExit):
            bi.main()
    capsys.readouterr()
    return path.read_bytes().decode() if path.exists() else None


LINE = st.text(alphabet="abc #\t", max_size=6)
TEXTS = st.one_of(st.none(), st.lists(st.one_of(LINE, st.sampled_from([
    "# BEGIN open-gpu-cloud passthrough_host: vfio before any GPU driver",
    "# END open-gpu-cloud passthrough_host: vfio before any GPU driver"])), max_size=6).map(
        lambda lines: "\n".join(lines)), st.lists(LINE, max_size=4).map(lambda lines: "".join(x + "\n" for x in lines)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, block=st.sampled_from(["vfio\nvfio_pci", "vfio\n", "vfio_pci"]))
def test_block_edit_writes_what_blockinfile_writes(capsys, tmp_path, text, block):
    expected = blockinfile(capsys, tmp_path, text, block)
    assert hf.block_edit(text, block, MARKER) == (expected if expected is not None else "")
    assert hf.block_edit(hf.block_edit(text, block, MARKER), block, MARKER) == hf.block_edit(text, block, MARKER)


# --- writing the same desired files twice changes nothing the second time (property) -----------------------

PATHS = ["/etc/modprobe.d/vfio.conf", "/etc/modprobe.d/blacklist.conf", "/usr/local/sbin/bind",
         "/etc/systemd/system/wants/bind.service", "/etc/initramfs-tools/modules"]
EXISTING = st.sampled_from(["none", "file", "link-in", "link-out", "dangling"])
CONTENT = st.text(alphabet="ab\n é", max_size=12)


@st.composite
def desired(draw):
    entries = []
    for path in draw(st.lists(st.sampled_from(PATHS), unique=True, min_size=1)):
        state = draw(st.sampled_from(["file", "block", "link", "absent"]))
        entry = {"path": path, "state": state}
        if state == "file":
            entry["content"] = draw(CONTENT)
        elif state == "block":
            entry.update(block=draw(st.sampled_from(["vfio", "vfio\nvfio_pci", ""])), marker=MARKER)
        elif state == "link":
            entry["src"] = draw(st.sampled_from(["/etc/x", "../x"]))
        if state in ("file", "block") and draw(st.booleans()):
            entry["mode"] = draw(st.sampled_from(["0644", "0755", "0600"]))
        entries.append(entry)
    return entries


def lay_out(tmp_path, existing):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside\n")
    for path, kind in existing.items():
        real = root / path.lstrip("/")
        real.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            real.write_text("old\n")
        elif kind == "link-in":
            (real.parent / "target").write_text("target\n")
            os.symlink("target", real)
        elif kind == "link-out":
            os.symlink(str(outside / "f"), real)
        elif kind == "dangling":
            os.symlink("missing", real)
    root.mkdir(exist_ok=True)
    return root, outside


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=desired(), existing=st.dictionaries(st.sampled_from(PATHS), EXISTING, max_size=5), data=st.data())
def test_writing_the_same_files_twice_changes_nothing_the_second_time(tmp_path_factory, entries, existing, data):
    tmp_path = tmp_path_factory.mktemp("prop")
    root, outside = lay_out(tmp_path, existing)
    try:
        converge(root, entries)
    except hf.HostFilesError as exc:  # two block edits through links to one file: refused, nothing written
        assert "are the same file on this host" in str(exc)
        # Through symlinks: two that lead to one file, or two dangling ones naming the same missing target.
        assert sum(existing.get(e["path"], "").startswith("link-") or existing.get(e["path"]) == "dangling"
                   for e in entries if e["state"] == "block") >= 2
        assert (outside / "f").read_text() == "outside\n" and not (root / outside.relative_to("/")).exists()
        return
    first = tree(root)
    second = hf.plan(str(root), entries)
    assert [a["path"] for a in second if a["changed"]] == []
    for act in second:
        hf.apply(str(root), act)
    assert tree(root) == first
    assert (outside / "f").read_text() == "outside\n"              # nothing written outside the root
    for entry in entries:
        real = root / entry["path"].lstrip("/")
        if entry["state"] == "file":
            assert not real.is_symlink() and real.read_text() == entry["content"]
        elif entry["state"] == "absent":
            assert not os.path.lexists(real)
        elif entry["state"] == "link":
            assert os.readlink(real) == entry["src"]
    data.draw(st.just(None))


# --- refused input and files -------------------------------------------------------------------------------

@pytest.mark.parametrize("entries, message", [
    ({"path": "/x"}, "files must be a list of entries, not dict"),
    (["/etc/x"], "files[0] must be a dict"),
    ([{"path": "etc/x", "content": ""}], "files[0] (etc/x): the path is not absolute"),
    ([{"path": "/", "content": ""}], "files[0] (/): the path names the root directory"),
    ([{"path": "/etc/x", "content": "", "mode": 420}], "files[0] (/etc/x): mode must be a string, not int (420)"),
    ([{"path": "/etc/x", "content": "", "mode": "rw-r--r--"}], "mode 'rw-r--r--' is not an octal mode"),
    ([{"path": "/etc/x", "state": "absent", "mode": "0644"}], "mode is not used with state absent"),
    ([{"path": "/etc/x", "state": "present"}], "state 'present' is not one of file, block, link, absent"),
    ([{"path": "/etc/x"}], "files[0] (/etc/x): content is required for state file"),
    ([{"path": "/etc/x", "content": 3}], "content must be a string, not int (3)"),
    ([{"path": "/etc/x", "state": "link"}], "src is required for state link"),
    ([{"path": "/etc/x", "state": "absent", "content": "x"}], "content is only used with state file"),
    ([{"path": "/etc/x", "state": "block", "block": "v", "marker": "# no mark"}], "must be one line holding {mark}"),
    ([{"path": "/etc/x", "content": "", "owner": "root"}], "unknown key(s) owner"),
    ([{"path": "/etc/x", "content": "", "needs": "initramfs"}], "needs must be a list of strings"),
    ([{"path": "/etc/x", "content": ""}, {"path": "/etc//x", "content": ""}], "files[1] (/etc//x): the same file as files[0] (/etc/x); give each path once"),
])
def test_bad_entries_are_refused(tmp_path, entries, message):
    with pytest.raises(hf.HostFilesError) as err:
        hf.plan(str(tmp_path), entries)
    assert message in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_where_a_file_belongs_is_refused(tmp_path):
    (tmp_path / "etc/modprobe.d/vfio.conf").mkdir(parents=True)
    with pytest.raises(hf.HostFilesError, match=r"vfio.conf is a directory; the role expects a file there"):
        hf.plan(str(tmp_path), [VFIO[0]])
    with pytest.raises(hf.HostFilesError, match=r"is a directory; the role expects nothing there"):
        hf.plan(str(tmp_path), [{"path": "/etc/modprobe.d/vfio.conf", "state": "absent"}])


def test_a_file_where_a_directory_belongs_is_refused(tmp_path):
    (tmp_path / "etc").write_text("not a directory\n")
    with pytest.raises(hf.HostFilesError, match=r"/etc/modprobe.d/vfio.conf: /etc is not a directory"):
        hf.plan(str(tmp_path), [VFIO[0]])


def test_a_binary_operator_file_is_refused(tmp_path):
    (tmp_path / "etc/initramfs-tools").mkdir(parents=True)
    (tmp_path / "etc/initramfs-tools/modules").write_bytes(b"\xff\xfe\n")
    with pytest.raises(hf.HostFilesError, match=r"modules is not UTF-8 text; it was not changed"):
        hf.plan(str(tmp_path), [VFIO[4]])


def test_a_missing_root_is_refused(tmp_path):
    with pytest.raises(hf.HostFilesError, match=r"root .*/nowhere is not a directory on this machine"):
        hf.plan(str(tmp_path / "nowhere"), VFIO)
    with pytest.raises(hf.HostFilesError, match=r"root 'sandbox' is not an absolute path"):
        hf.plan("sandbox", VFIO)


# --- the module: check mode, diff, needs, errors --------------------------------------------------------------

def test_module_check_mode_writes_nothing_and_reports_what_a_real_run_does(capsys, tmp_path):
    args = {"root": str(tmp_path), "files": VFIO}
    checked = run_module(capsys, args, check_mode=True, diff=True)
    assert list(tmp_path.iterdir()) == []
    real = run_module(capsys, args, diff=True)
    for key in ("changed", "files", "changed_paths", "needs", "diff"):
        assert checked[key] == real[key], key
    assert real["changed"] is True and real["needs"] == ["initramfs"]
    assert real["changed_paths"] == [e["path"] for e in VFIO[:5]]
    headers = [d["before_header"] for d in real["diff"]]
    assert headers[:3] == [str(tmp_path / "etc"), str(tmp_path / "etc/modprobe.d"), str(tmp_path / "etc/modprobe.d/vfio.conf")]
    assert real["diff"][2]["after"] == VFIO[0]["content"]
    again = run_module(capsys, args, diff=True)
    assert again["changed"] is False and again["needs"] == [] and again["diff"] == []


def test_module_needs_only_from_changed_entries(capsys, tmp_path):
    run_module(capsys, {"root": str(tmp_path), "files": VFIO})
    (tmp_path / "etc/systemd/system/vfio-pci-bind.service").write_text("[Unit]\n# edited\n")
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO})
    assert result["changed_paths"] == ["/etc/systemd/system/vfio-pci-bind.service"] and result["needs"] == []
    (tmp_path / "etc/modprobe.d/blacklist-passthrough.conf").write_text("blacklist nouveau\n")
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO})
    assert result["changed_paths"] == ["/etc/modprobe.d/blacklist-passthrough.conf"]
    assert result["needs"] == ["initramfs"] and not (tmp_path / "etc/modprobe.d/blacklist-passthrough.conf").exists()


STATE_FILE = "/var/lib/open-gpu-cloud/passthrough_host.json"


def test_module_reports_the_state_file_and_writes_the_step_ahead(capsys, tmp_path):
    state = tmp_path / STATE_FILE.lstrip("/")
    check = run_module(capsys, {"root": str(tmp_path), "files": VFIO, "state_file": STATE_FILE}, check_mode=True)
    assert check["needs"] == ["initramfs"] and not state.exists()             # check mode writes nothing
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO, "state_file": STATE_FILE})
    # As read before the run; the rebuild the new files need was marked pending before the first was written.
    assert result["host_state"] == {"version": 2, "machine": "", "pending": [], "reboot": None, "generated_from": None,
                                    "inputs": {}}
    assert json.loads(state.read_text())["pending"] == ["initramfs"]
    state.write_text(json.dumps({"pending": ["initramfs"], "reboot": {"boot_id": "b", "fingerprint": "f"}}))
    before = state.read_bytes()
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO, "state_file": STATE_FILE})
    assert result["changed"] is False and result["host_state"]["pending"] == ["initramfs"]
    assert result["host_state"]["reboot"] == {"boot_id": "b", "fingerprint": "f"} and state.read_bytes() == before
    assert "host_state" not in run_module(capsys, {"root": str(tmp_path), "files": VFIO})


def test_module_refuses_a_corrupt_state_file_before_writing_anything(capsys, tmp_path):
    state = tmp_path / STATE_FILE.lstrip("/")
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO, "state_file": STATE_FILE})
    assert result["failed"] is True
    assert result["msg"].startswith("nothing written: " + STATE_FILE + " is not valid JSON")
    assert f"remove {STATE_FILE} to start afresh" in result["msg"]
    assert [p.name for p in tmp_path.iterdir()] == ["var"]


def test_two_entries_on_one_file_through_a_symlink_are_refused(capsys, tmp_path):
    (tmp_path / "etc/modprobe.d").mkdir(parents=True)
    (tmp_path / "etc/modprobe.d/blacklist.conf").write_text("blacklist nouveau\n")
    os.symlink("/etc/modprobe.d/blacklist.conf", tmp_path / "etc/modprobe.d/vfio.conf")
    entries = [{"path": "/etc/modprobe.d/blacklist.conf", "state": "block", "block": "blacklist nvidiafb", "marker": MARKER},
               {"path": "/etc/modprobe.d/vfio.conf", "state": "block", "block": "softdep nvidia pre: vfio-pci",
                "marker": MARKER}]
    result = run_module(capsys, {"root": str(tmp_path), "files": entries})
    assert result["failed"] is True
    assert result["msg"].startswith("nothing written: files[0] (/etc/modprobe.d/blacklist.conf) and files[1] "
                                    "(/etc/modprobe.d/vfio.conf) are the same file on this host")
    assert (tmp_path / "etc/modprobe.d/blacklist.conf").read_text() == "blacklist nouveau\n"


def test_module_refuses_a_bad_entry_before_writing_anything(capsys, tmp_path):
    result = run_module(capsys, {"root": str(tmp_path), "files": [VFIO[0], {"path": "/etc/x", "content": "", "mode": 644}]})
    assert result["failed"] is True
    assert result["msg"] == "nothing written: files[1] (/etc/x): mode must be a string, not int (644)"
    assert list(tmp_path.iterdir()) == []


def test_module_refuses_a_numeric_directory_mode(capsys, tmp_path):
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO, "directory_mode": 493})
    assert result["failed"] is True and "directory_mode 493 is not an octal mode string" in result["msg"]
    assert list(tmp_path.iterdir()) == []


def test_module_stops_on_a_directory_that_is_a_file_before_writing(capsys, tmp_path):
    (tmp_path / "usr/local").mkdir(parents=True)
    (tmp_path / "usr/local/sbin").write_text("")
    result = run_module(capsys, {"root": str(tmp_path), "files": VFIO[:2]})
    assert result["failed"] is True
    assert result["msg"] == "nothing written: /usr/local/sbin/vfio-pci-bind: /usr/local/sbin is not a directory"
    assert not (tmp_path / "etc").exists()


def test_module_names_the_file_it_could_not_write_and_what_it_wrote_before(capsys, tmp_path):
    too_long = "/etc/modprobe.d/" + "x" * 300
    result = run_module(capsys, {"root": str(tmp_path), "files": [VFIO[0], {"path": too_long, "content": "x\n"}]})
    assert result["failed"] is True
    assert result["msg"].startswith(f"cannot create {too_long}: ") and "File name too long" in result["msg"]
    assert result["msg"].endswith("changed before it: /etc/modprobe.d/vfio.conf. Fix the cause and run again.")
    assert (tmp_path / "etc/modprobe.d/vfio.conf").read_text() == VFIO[0]["content"]
    assert os.listdir(tmp_path / "etc/modprobe.d") == ["vfio.conf"]          # no temporary file left
