"""os_flavors, os_quotas and playbooks/cloud.yml against the real test cloud (Keystone + Nova API).

One test cloud per session (conftest). No test relies on another: each makes the flavors, projects and images it
reads, under names of its own, and one of them wipes the databases on its way.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import socket
import sys
import threading

import pytest

from ogc_testlib import fixture_inventory, project_playbook

pytestmark = pytest.mark.integration

GPU1 = {"pci_passthrough:alias": "tesla-v100:1"}
FLAVORS = [
    {"name": "it_gpu_tiny", "vcpus": 4, "ram": 2048, "disk": 20, "extra_specs": GPU1},
    {"name": "it_ci_medium", "id": "it_ci_medium", "vcpus": 4, "ram": 8192, "disk": 60},
    {"name": "it_team", "vcpus": 2, "ram": 4096, "disk": 10, "is_public": False, "projects": ["it-research"]},
]


def own(flavors, tag):
    """FLAVORS under names (and declared IDs) of one test's own: it_gpu_tiny -> it_<tag>_gpu_tiny."""
    return [dict(f, name=f"it_{tag}_{f['name'][3:]}", **({"id": f"it_{tag}_{f['id'][3:]}"} if "id" in f else {}))
            for f in flavors]


def flavors_task(name, flavors, check=False, **options):
    task = {"name": name, "open_gpu_cloud.toolkit.os_flavors": dict(cloud="ogc-test", flavors=flavors, known_aliases=["tesla-v100"],
                                             **options)}
    if check:
        task["check_mode"] = True
    return task


def quotas_task(name, default_class=None, projects=None, check=False, **options):
    args = dict(cloud="ogc-test", **options)
    if default_class is not None:
        args["default_class"] = default_class
    if projects is not None:
        args["projects"] = projects
    task = {"name": name, "open_gpu_cloud.toolkit.os_quotas": args}
    if check:
        task["check_mode"] = True
    return task


def failing(task):
    task["ignore_errors"] = True
    return task


def server_flavors(conn, prefix="it_"):
    return {f.name: f for f in conn.compute.flavors(details=True, is_public=None) if f.name.startswith(prefix)}


@pytest.fixture
def conn(testcloud):
    """An admin connection, and project it-research (the flavors' access and the quotas name it)."""
    connection = testcloud.connect()
    if connection.identity.find_project("it-research") is None:
        connection.identity.create_project(name="it-research", domain_id="default")
    yield connection
    connection.close()


def test_create_again_check_mode(testcloud, conn, tmp_path):
    changed_spec = [dict(FLAVORS[0], extra_specs={"pci_passthrough:alias": "tesla-v100:2"})] + FLAVORS[1:] + [
        {"name": "it_ci_large", "vcpus": 4, "ram": 12288, "disk": 60}]
    rc, res, out = testcloud.tasks(tmp_path, [
        flavors_task("create", FLAVORS),
        flavors_task("again", FLAVORS),
        flavors_task("check", changed_spec, check=True),
        quotas_task("quotas", {"instances": 15}, [{"project": "it-research", "instances": 20, "cores": -1}]),
        quotas_task("quotas again", {"instances": 15}, [{"project": "it-research", "instances": 20, "cores": -1}]),
        quotas_task("quotas check", {"instances": 16}, [{"project": "it-research", "instances": 21}], check=True),
    ], "--diff")
    assert rc == 0, out
    assert res["create"]["changed"] is True
    assert res["create"]["created"] == ["it_gpu_tiny", "it_ci_medium", "it_team"]
    assert res["again"]["changed"] is False
    assert res["again"]["unchanged"] == ["it_gpu_tiny", "it_ci_medium", "it_team"]
    assert res["check"]["changed"] is True
    assert res["check"]["updated"] == ["it_gpu_tiny"] and res["check"]["created"] == ["it_ci_large"]
    assert res["check"]["diff"]["after"]["it_gpu_tiny"]["extra_specs"] == {"pci_passthrough:alias": "tesla-v100:2"}
    assert res["quotas"]["changed"] is True
    assert res["quotas again"]["changed"] is False
    assert res["quotas check"]["changed"] is True
    assert res["quotas check"]["changes"] == {"class default": ["instances: 15 -> 16"],
                                              "project it-research": ["instances: 20 -> 21"]}

    # What the server holds: the first declaration; check mode wrote nothing.
    found = server_flavors(conn)
    assert {"it_ci_medium", "it_gpu_tiny", "it_team"} <= set(found) and "it_ci_large" not in found
    assert found["it_gpu_tiny"].extra_specs == GPU1
    assert found["it_ci_medium"].id == "it_ci_medium"
    assert found["it_team"].is_public is False
    research = conn.identity.find_project("it-research")
    assert [a["tenant_id"] for a in conn.compute.get_flavor_access(found["it_team"])] == [research.id]
    assert conn.compute.get_quota_class_set("default").instances == 15
    quota = conn.compute.get_quota_set(research.id)
    assert (quota.instances, quota.cores) == (20, -1)


def test_change_in_place_and_recreate(testcloud, conn, tmp_path):
    flavors = own(FLAVORS, "chg")
    rc, res, out = testcloud.tasks(tmp_path, [
        flavors_task("create", flavors),
        quotas_task("quotas", None, [{"project": "it-research", "instances": 24}]),
    ], name="create.yml")
    assert rc == 0 and res["create"]["created"] == [f["name"] for f in flavors], out
    before = server_flavors(conn, "it_chg_")
    changed = [dict(flavors[0], extra_specs={"pci_passthrough:alias": "tesla-v100:2", "hw:hide_hypervisor_id": True}),
               dict(flavors[1], ram=16384), flavors[2]]
    rc, res, out = testcloud.tasks(tmp_path, [
        flavors_task("change", changed, recreate_on_change=True),
        quotas_task("quotas change", None, [{"project": "it-research", "instances": 25}]),
    ])
    assert rc == 0, out
    assert res["change"]["changed"] is True
    assert res["change"]["updated"] == ["it_chg_gpu_tiny"] and res["change"]["recreated"] == ["it_chg_ci_medium"]
    assert res["change"]["changes"]["it_chg_ci_medium"] == ["recreate: ram: 8192 -> 16384"]
    assert res["quotas change"]["updated"] == ["project it-research"]
    after = server_flavors(conn, "it_chg_")
    assert after["it_chg_gpu_tiny"].id == before["it_chg_gpu_tiny"].id  # extra specs changed in place
    assert after["it_chg_gpu_tiny"].extra_specs == {"pci_passthrough:alias": "tesla-v100:2",
                                                    "hw:hide_hypervisor_id": "true"}
    assert after["it_chg_ci_medium"].ram == 16384 and after["it_chg_ci_medium"].id == "it_chg_ci_medium"  # declared id
    assert conn.compute.get_quota_set(conn.identity.find_project("it-research").id).instances == 25


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_bad_input_fails_clearly_and_writes_nothing(testcloud, conn, tmp_path):
    tiny = own(FLAVORS[:1], "bad")[0]
    rc, res, out = testcloud.tasks(tmp_path, [flavors_task("create", [tiny])], name="create.yml")
    assert rc == 0 and not res["create"].get("failed"), out
    state = {n: (f.id, f.ram, dict(f.extra_specs)) for n, f in server_flavors(conn).items()}
    default_instances = conn.compute.get_quota_class_set("default").instances
    wrong_password = {"auth_url": conn.auth["auth_url"], "username": "admin", "password": "not-the-password",
                      "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"}
    unreachable = dict(wrong_password, auth_url=f"http://127.0.0.1:{closed_port()}/v3")
    rc, res, out = testcloud.tasks(tmp_path, [
        failing(flavors_task("malformed", [dict(tiny, extra_specs={"pci_passthrough:alias": "tesla-v100:abc"})])),
        failing(flavors_task("unknown alias", [dict(tiny, extra_specs={"pci_passthrough:alias": "a100:1"})])),
        failing(flavors_task("immutable", [dict(tiny, vcpus=8, extra_specs={"pci_passthrough:alias": "tesla-v100:2",
                                                                            "hw:hide_hypervisor_id": True})])),
        failing(quotas_task("negative", {"instances": -5})),
        failing({"name": "wrong password", "open_gpu_cloud.toolkit.os_quotas": {"auth": wrong_password, "default_class": {"instances": 3}}}),
        failing({"name": "unreachable", "open_gpu_cloud.toolkit.os_quotas": {"auth": unreachable, "default_class": {"instances": 3}}}),
        failing({"name": "unknown cloud", "open_gpu_cloud.toolkit.os_quotas": {"cloud": "nope", "default_class": {"instances": 3}}}),
    ])
    assert rc == 0, out  # every failure was ignored, none crashed
    msgs = {name: r["msg"] for name, r in res.items()}
    assert all(r.get("failed") for r in res.values()), msgs
    assert msgs["malformed"].startswith("invalid flavor declaration, nothing was written: flavors[0] (it_bad_gpu_tiny): "
                                        "extra spec pci_passthrough:alias='tesla-v100:abc' is malformed")
    assert "asks for PCI alias 'a100', which no GPU host provides (aliases in the passthrough plans: tesla-v100)" \
        in msgs["unknown alias"]
    assert msgs["immutable"].startswith("nothing was written: flavor it_bad_gpu_tiny: vcpus: 4 -> 8 cannot change "
                                        "in place")
    assert msgs["negative"] == ("invalid quota declaration, nothing was written: default_class: instances=-5 is "
                                "negative; use -1 for unlimited or a value >= 0")
    assert msgs["wrong password"].startswith(f"authentication to auth_url {conn.auth['auth_url']} failed (wrong user, "
                                             "password or project?)")
    assert "not-the-password" not in out  # the secret is no_log
    assert msgs["unreachable"].startswith(f"cannot reach the identity endpoint of auth_url {unreachable['auth_url']}")
    assert msgs["unknown cloud"].startswith("cannot configure the connection to cloud 'nope': Cloud nope was not found")
    assert "Traceback" not in out
    assert {n: (f.id, f.ram, dict(f.extra_specs)) for n, f in server_flavors(conn).items()} == state
    assert conn.compute.get_quota_class_set("default").instances == default_instances


def test_server_error_halfway_then_rerun_finishes(testcloud, conn, tmp_path):
    # The second flavor asks for an ID another flavor already has: Nova answers 409 halfway through the list.
    taken = {"name": "it_half_taken", "id": "it_half_taken", "vcpus": 1, "ram": 512}
    clash = [{"name": "it_half_a", "vcpus": 1, "ram": 512},
             {"name": "it_half_b", "id": "it_half_taken", "vcpus": 1, "ram": 512},
             {"name": "it_half_c", "vcpus": 1, "ram": 512}]
    fixed = [clash[0], dict(clash[1], id="it_half_b"), clash[2]]
    rc, res, out = testcloud.tasks(tmp_path, [flavors_task("taken", [taken]), failing(flavors_task("clash", clash)),
                                              flavors_task("fixed", fixed)])
    assert rc == 0, out
    assert res["taken"]["created"] == ["it_half_taken"]
    failed = res["clash"]
    assert failed["failed"] is True and failed["changed"] is True
    assert failed["msg"].startswith("creating flavor it_half_b failed: ")
    assert "409" in failed["msg"] or "already exists" in failed["msg"]
    assert failed["msg"].endswith("Already done in this run: created it_half_a; a re-run finishes the job")
    assert failed["created"] == ["it_half_a"]
    assert res["fixed"]["created"] == ["it_half_b", "it_half_c"] and res["fixed"]["unchanged"] == ["it_half_a"]


def test_prune_removes_only_matching_undeclared(testcloud, conn, tmp_path):
    kept = {"name": "it_pr_kept", "vcpus": 1, "ram": 512}  # undeclared below, but no pattern matches it
    made = [{"name": f"it_pr_{x}", "vcpus": 1, "ram": 512} for x in "abc"]
    rc, res, out = testcloud.tasks(tmp_path, [
        flavors_task("create", [kept] + made),
        flavors_task("prune check", made[:1], check=True, prune=True, prune_patterns=["it_pr_?"]),
        flavors_task("prune", made[:1], prune=True, prune_patterns=["it_pr_?"]),
    ])
    assert rc == 0, out
    assert res["create"]["created"] == ["it_pr_kept", "it_pr_a", "it_pr_b", "it_pr_c"]
    assert res["prune check"]["deleted"] == ["it_pr_b", "it_pr_c"]
    assert res["prune"]["deleted"] == ["it_pr_b", "it_pr_c"]
    left = server_flavors(conn, "it_pr_")
    assert sorted(left) == ["it_pr_a", "it_pr_kept"]


MARK = "managed by open-gpu-cloud allow-list"


def access_task(name, allow_list_file, check=False, **options):
    task = {"name": name, "open_gpu_cloud.toolkit.os_access": dict(cloud="ogc-test", projects=[{"name": "it-ci", "description": "CI"}],
                                            allow_list_file=str(allow_list_file), user_projects=["it-ci"],
                                            **options)}
    if check:
        task["check_mode"] = True
    return task


def test_access_allow_list_disables_dropped_users(testcloud, conn, tmp_path):
    first = tmp_path / "users.json"
    first.write_text('["it-alice", "it-bob", "it-carol"]')
    second = tmp_path / "users2.json"
    second.write_text('["it-alice", "it-carol", "it-dave"]')
    broken = tmp_path / "broken.json"
    broken.write_text('{"it-alice": true}')
    rc, res, out = testcloud.tasks(tmp_path, [
        access_task("create", first),
        access_task("again", first),
        access_task("drop check", second, check=True),
        access_task("drop", second),
        failing(access_task("broken", broken)),
        failing(access_task("bad role", first, user_role="no-such-role")),
    ], "--diff")
    assert rc == 0, out
    assert res["create"]["created"] == ["project it-ci", "user it-alice", "user it-bob", "user it-carol"]
    assert res["create"]["assigned"] == ["member to it-alice on it-ci", "member to it-bob on it-ci",
                                         "member to it-carol on it-ci"]
    assert res["again"]["changed"] is False
    assert res["drop check"]["changed"] is True and res["drop check"]["disabled"] == ["user it-bob"]
    assert res["drop"]["created"] == ["user it-dave"] and res["drop"]["disabled"] == ["user it-bob"]
    assert res["broken"]["msg"] == (f"the allow-list file {broken} must hold a JSON list of logins (strings), e.g. "
                                    "[\"alice\", \"bob\"]; nothing was written")
    assert res["bad role"]["msg"] == "role 'no-such-role' does not exist (user_role); nothing was written"

    users = {u.name: u for u in conn.identity.users(domain_id="default") if u.name.startswith("it-")}
    assert sorted(users) == ["it-alice", "it-bob", "it-carol", "it-dave"]  # dropped: disabled, never deleted
    assert users["it-bob"].is_enabled is False and users["it-dave"].is_enabled is True
    assert users["it-alice"].description == MARK
    assert conn.identity.find_user("admin").is_enabled is True  # unmanaged users are never touched
    project = conn.identity.find_project("it-ci")
    member = conn.identity.find_role("member")
    holders = {a.user["id"] for a in conn.identity.role_assignments(scope_project_id=project.id, role_id=member.id)}
    assert holders == {users[n].id for n in ("it-alice", "it-bob", "it-carol", "it-dave")}

    rc, res, out = testcloud.tasks(tmp_path, [access_task("back", first)], name="back.yml")
    assert rc == 0, out
    assert res["back"]["enabled"] == ["user it-bob"] and res["back"]["disabled"] == ["user it-dave"]


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).requests += 1
        super().do_GET()

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def http_dir(tmp_path):
    """A local HTTP server (127.0.0.1) serving tmp_path/www; yields (base url, directory, handler class)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = type("Handler", (_CountingHandler,), {"requests": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(www)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", www, handler
    server.shutdown()
    server.server_close()


def images_task(name, images, check=False):
    task = {"name": name, "open_gpu_cloud.toolkit.os_images": {"cloud": "ogc-test", "images": images, "timeout": 120}}
    if check:
        task["check_mode"] = True
    return task


def visible_images(conn, prefix="it-"):
    return {i.name: i for i in conn.image.images() if i.name.startswith(prefix)}


def test_images_upload_update_replace_and_retire(testcloud, conn, tmp_path, http_dir):
    base_url, www, handler = http_dir
    v1, v2 = tmp_path / "v1.raw", tmp_path / "v2.raw"
    v1.write_bytes(os.urandom(256 * 1024))
    v2.write_bytes(os.urandom(256 * 1024))
    (www / "remote.raw").write_bytes(v1.read_bytes())
    sha1 = hashlib.sha256(v1.read_bytes()).hexdigest()
    local = {"name": "it-ubuntu", "file": str(v1), "disk_format": "raw", "checksum": "sha256:" + sha1,
             "properties": {"hw_machine_type": "q35"}}
    remote = {"name": "it-remote", "url": base_url + "/remote.raw", "disk_format": "raw", "checksum": "sha256:" + sha1}
    rc, res, out = testcloud.tasks(tmp_path, [
        images_task("create", [local, remote]),
        images_task("again", [local, remote]),
        images_task("property", [dict(local, properties={"hw_machine_type": "q35", "img_hide_hypervisor_id": True})]),
        images_task("replace check", [dict(local, file=str(v2), checksum=None)], check=True),
        failing(images_task("mismatch", [dict(local, file=str(v2))])),
    ], "--diff")
    assert rc == 0, out
    assert res["create"]["created"] == ["it-ubuntu", "it-remote"]
    assert res["again"]["changed"] is False and res["again"]["unchanged"] == ["it-ubuntu", "it-remote"]
    assert handler.requests == 1  # the unchanged URL image was not downloaded again
    assert res["property"]["updated"] == ["it-ubuntu"]
    assert res["replace check"]["replaced"] == ["it-ubuntu"]
    assert res["mismatch"]["msg"] == (f"image it-ubuntu: checksum mismatch for {v2}: the data has sha256 "
                                      f"{hashlib.sha256(v2.read_bytes()).hexdigest()}, the declared checksum is "
                                      f"{sha1}; nothing was uploaded")
    found = visible_images(conn)
    assert sorted(found) == ["it-remote", "it-ubuntu"]
    first_id = found["it-ubuntu"].id
    assert found["it-ubuntu"].status == "active" and found["it-ubuntu"].hw_machine_type == "q35"

    rc, res, out = testcloud.tasks(tmp_path, [images_task("replace", [dict(local, file=str(v2), checksum=None)])],
                                   name="replace.yml")
    assert rc == 0, out
    assert res["replace"]["replaced"] == ["it-ubuntu"]
    retired_name = res["replace"]["retired"][0]
    found = visible_images(conn)
    assert found["it-ubuntu"].id != first_id and found["it-ubuntu"].status == "active"
    old = conn.image.get_image(first_id)  # retired: renamed and hidden, never deleted
    assert old.name == retired_name and old.is_hidden is True and old.status == "active"


def cloud_task(name, check=False, **sections):
    task = {"name": name, "open_gpu_cloud.toolkit.os_cloud": dict(cloud="ogc-test", **sections)}
    if check:
        task["check_mode"] = True
    return task


def test_os_cloud_converges_access_flavors_and_quotas_in_one_run(testcloud, conn, tmp_path):
    access = {"projects": [{"name": "it-oc-team", "description": "os_cloud"}]}
    tiny = {"name": "it_oc_gpu", "vcpus": 2, "ram": 1024, "disk": 10, "extra_specs": GPU1}
    team = {"name": "it_oc_team", "vcpus": 1, "ram": 512, "is_public": False, "projects": ["it-oc-team"]}
    flavors = {"flavors": [tiny, team], "known_aliases": ["tesla-v100"]}
    quotas = {"projects": [{"project": "it-oc-team", "instances": 4, "cores": 16}]}
    changed_flavors = dict(flavors, flavors=[dict(tiny, extra_specs={"pci_passthrough:alias": "tesla-v100:2"}), team])
    changed_quotas = {"projects": [{"project": "it-oc-team", "instances": 5, "cores": 16}]}
    bad_flavors = dict(flavors, flavors=[dict(tiny, extra_specs={"pci_passthrough:alias": "tesla-v100:x"})])
    rc, res, out = testcloud.tasks(tmp_path, [
        cloud_task("check on an empty cloud", check=True, access=access, flavors=flavors, quotas=quotas),
        cloud_task("create", access=access, flavors=flavors, quotas=quotas),
        cloud_task("again", access=access, flavors=flavors, quotas=quotas),
        cloud_task("change check", check=True, access=access, flavors=changed_flavors, quotas=changed_quotas),
        failing(cloud_task("bad", access=access, flavors=bad_flavors, quotas={"default_class": {"instances": -4}})),
        cloud_task("change", access=access, flavors=changed_flavors, quotas=changed_quotas),
    ], "--diff")
    assert rc == 0, out
    check = res["check on an empty cloud"]
    assert check["changed"] is True and check["sections"] == ["access", "flavors", "quotas"]
    assert check["access"]["created"] == ["project it-oc-team"]
    assert check["flavors"]["changes"]["it_oc_team"][1] == "give access to projects (new project it-oc-team)"
    assert check["quotas"]["changes"] == {"project it-oc-team": ["cores: None -> 16", "instances: None -> 4"]}
    create = res["create"]
    assert create["changed"] is True and create["access"]["created"] == ["project it-oc-team"]  # check wrote nothing
    assert create["flavors"]["created"] == ["it_oc_gpu", "it_oc_team"]
    assert create["quotas"]["updated"] == ["project it-oc-team"]
    assert res["again"]["changed"] is False
    assert res["again"]["flavors"]["unchanged"] == ["it_oc_gpu", "it_oc_team"]
    assert res["change check"]["flavors"]["updated"] == ["it_oc_gpu"]
    assert res["change check"]["quotas"]["changes"] == {"project it-oc-team": ["instances: 4 -> 5"]}
    bad = res["bad"]
    assert bad["failed"] is True and bad["msg"].startswith(
        "flavors: invalid flavor declaration, nothing was written: flavors[0] (it_oc_gpu): extra spec "
        "pci_passthrough:alias='tesla-v100:x' is malformed")
    assert "; quotas: invalid quota declaration, nothing was written: default_class: instances=-4" in bad["msg"]
    assert res["change"]["changed"] is True and res["change"]["flavors"]["updated"] == ["it_oc_gpu"]
    assert res["change"]["access"]["unchanged"] == ["project it-oc-team"]

    found = server_flavors(conn, prefix="it_oc_")
    assert found["it_oc_gpu"].extra_specs == {"pci_passthrough:alias": "tesla-v100:2"}
    project = conn.identity.find_project("it-oc-team")
    assert [a["tenant_id"] for a in conn.compute.get_flavor_access(found["it_oc_team"])] == [project.id]
    quota = conn.compute.get_quota_set(project.id)
    assert (quota.instances, quota.cores) == (5, 16)
    assert conn.compute.get_quota_class_set("default").instances != -4



RECOVERY_INVENTORY = """\
all:
  hosts:
    localhost:
      ansible_connection: local
      ansible_python_interpreter: {python}
      cloud_clouds_yaml: {clouds_yaml}
      cloud_name: ogc-test
      cloud_resources_known_aliases: [tesla-v100]
      cloud_flavors:
        - {{name: gpu_tiny, id: gpu_tiny, vcpus: 4, ram: 2048, disk: 20, extra_specs: {{"pci_passthrough:alias": "tesla-v100:1"}}}}
        - {{name: gpu_4xlarge, id: gpu_4xlarge, vcpus: 8, ram: 65536, disk: 60, extra_specs: {{"pci_passthrough:alias": "tesla-v100:1"}}}}
        - {{name: ci_medium, id: ci_medium, vcpus: 4, ram: 8192, disk: 60}}
      cloud_quota_class_default: {{instances: 15}}
      cloud_projects: [{{name: ci, description: CI runners}}]
      cloud_allow_list_file: {allow_list}
      cloud_user_projects: [ci]
      cloud_project_quotas: [{{project: ci, instances: 12, cores: 48}}]
      cloud_images: [{{name: ci-image, file: {image}, disk_format: raw, properties: {{hw_machine_type: q35}}}}]
"""


def test_recovery_after_wiping_the_databases(testcloud, tmp_path):
    inventory = tmp_path / "inventory.yml"
    allow_list = tmp_path / "allow-list.json"
    allow_list.write_text('["octocat", "hubot"]')
    image = tmp_path / "ci-image.raw"
    image.write_bytes(os.urandom(128 * 1024))
    inventory.write_text(RECOVERY_INVENTORY.format(python=sys.executable, clouds_yaml=testcloud.clouds_yaml,
                                                   allow_list=allow_list, image=image))
    rc, res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory))
    assert rc == 0, out
    testcloud.script("wipe")
    testcloud.script("start", "--lifetime", "1800")
    conn = testcloud.connect()
    assert [f.name for f in conn.compute.flavors(is_public=None)] == []
    assert conn.compute.get_quota_class_set("default").instances == 10  # Nova's default again

    rc, res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory))
    assert rc == 0, out
    converged = res["open_gpu_cloud.toolkit.cloud_resources : Converge projects and users, flavors, and quotas (one module run, one login)"]
    assert converged["sections"] == ["access", "flavors", "quotas"]
    assert converged["flavors"]["created"] == ["gpu_tiny", "gpu_4xlarge", "ci_medium"]
    found = {f.name: f for f in conn.compute.flavors(is_public=None)}
    assert sorted(found) == ["ci_medium", "gpu_4xlarge", "gpu_tiny"]
    assert found["gpu_4xlarge"].extra_specs == GPU1 and found["gpu_4xlarge"].ram == 65536
    assert conn.compute.get_quota_class_set("default").instances == 15
    ci = conn.identity.find_project("ci")
    assert ci is not None and conn.compute.get_quota_set(ci.id).instances == 12
    users = {u.name: u for u in conn.identity.users(domain_id="default")}
    assert users["octocat"].is_enabled and users["hubot"].is_enabled
    member = conn.identity.find_role("member")
    holders = {a.user["id"] for a in conn.identity.role_assignments(scope_project_id=ci.id, role_id=member.id)}
    assert holders == {users["octocat"].id, users["hubot"].id}
    images = {i.name: i for i in conn.image.images()}
    assert images["ci-image"].status == "active" and images["ci-image"].hw_machine_type == "q35"
    rc, res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory))
    assert rc == 0 and '"changed": true' not in out, out
    # A section's tag limits os_cloud to that section (the checks still run).
    rc, res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "--tags", "cloud_resources_flavors")
    assert rc == 0, out
    converged = res["open_gpu_cloud.toolkit.cloud_resources : Converge projects and users, flavors, and quotas (one module run, one login)"]
    assert converged["sections"] == ["flavors"] and converged["changed"] is False
    assert "open_gpu_cloud.toolkit.cloud_resources : Decide the PCI aliases flavors may ask for" in res
    conn.close()


def test_a_gpu_flavor_no_host_could_serve_under_its_numa_policy_is_refused_before_anything(testcloud, tmp_path,
                                                                                          fixture_host):
    """playbooks/cloud.yml on the seed host's real plan (plan.yml over its fixture tree): a flavor asking for all four
    V100 with 'required' on a one-node guest, where the plan puts them on two NUMA nodes, is refused before any API
    call writes (plugins/module_utils/nova/numa.py, the arithmetic in the message); its advice followed (a guest of
    as many nodes as the GPUs span), the flavor is declared."""
    inventory = fixture_inventory(tmp_path, fixture_host, fixtures={"seed": "seed-v100"})
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={tmp_path}/plans")
    assert rc == 0, out
    selected = json.loads((tmp_path / "plans" / "seed.json").read_text())["plan"]["selected"]
    nodes = sorted({d["numa_node"] for d in selected})
    assert len(selected) == 4 and len(nodes) == 2, selected  # two GPUs on each of the two nodes
    specs = {"pci_passthrough:alias": "tesla-v100:4", "hw:cpu_policy": "dedicated",
             "hw:pci_numa_affinity_policy": "required"}
    cloud = {"cloud_clouds_yaml": testcloud.clouds_yaml, "cloud_name": "ogc-test",
             "ansible_python_interpreter": sys.executable, "passthrough_plan_dir": f"{tmp_path}/plans",
             "cloud_flavors": [{"name": "it_numa_x4", "vcpus": 8, "ram": 4096, "disk": 10, "extra_specs": specs}]}
    rc, _res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "-e", json.dumps(cloud))
    said = " ".join(out.split())
    assert rc != 0 and "Traceback" not in out, out
    assert ("flavors[0] (it_numa_x4): asks for 4 x tesla-v100 with PCI NUMA affinity policy 'required' (its "
            "hw:pci_numa_affinity_policy) on a guest of 1 NUMA node(s) (hw:cpu_policy=dedicated)") in said, said
    assert f"no GPU host holds that: seed has tesla-v100 node {nodes[0]} x2, node {nodes[1]} x2" in said, said
    conn = testcloud.connect()
    assert conn.compute.find_flavor("it_numa_x4") is None
    # The advice: hw:numa_nodes with as many nodes as the GPUs span.
    cloud["cloud_flavors"][0]["extra_specs"] = dict(specs, **{"hw:numa_nodes": "2"})
    rc, _res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "-e", json.dumps(cloud))
    assert rc == 0, out
    assert conn.compute.find_flavor("it_numa_x4", ignore_missing=False).extra_specs["hw:numa_nodes"] == "2"
    conn.compute.delete_flavor(conn.compute.find_flavor("it_numa_x4"))


def test_each_gpu_flavor_s_address_space_reaches_every_image_or_the_flavor_is_refused(testcloud, tmp_path,
                                                                                     fixture_host):
    """playbooks/cloud.yml on the real plan of a host with two A100 (a 64 GiB BAR1 and a 32 MiB BAR3 each: a 128 GiB
    window behind each root port), and two images the cloud phase declares, one booting SeaBIOS (Nova's default), one
    OVMF (plugins/module_utils/nova/address_space.py). Both A100 in a 16 GiB guest fit SeaBIOS's defaults but not
    OVMF's 32 GiB aperture: the UEFI image alone gets hw_maxphysaddr_*. In an 800 GiB guest they end above QEMU's
    default 40 bits under either firmware: on 2023.2, which cannot be told so, the flavor is refused naming the
    release that can, before anything is written; on this release both images get the bits."""
    inventory = fixture_inventory(tmp_path, fixture_host, fixtures={"a100": "a100-t4"})
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={tmp_path}/plans")
    assert rc == 0, out
    plan = json.loads((tmp_path / "plans" / "a100.json").read_text())["plan"]
    (alias,) = {d["alias"] for d in plan["selected"] if d["product_id"] == "20f1"}
    files = {name: tmp_path / f"{name}.raw" for name in ("bios", "uefi")}
    for path in files.values():
        path.write_bytes(os.urandom(64 * 1024))
    images = [{"name": "it_space_bios", "file": str(files["bios"]), "disk_format": "raw"},
              {"name": "it_space_uefi", "file": str(files["uefi"]), "disk_format": "raw",
               "properties": {"hw_firmware_type": "uefi"}}]
    small = {"name": "it_a100_x2", "vcpus": 8, "ram": 16384, "disk": 10,
             "extra_specs": {"pci_passthrough:alias": f"{alias}:2"}}
    big = dict(small, name="it_a100_x2_800g", ram=800 * 1024)
    cloud = {"cloud_clouds_yaml": testcloud.clouds_yaml, "cloud_name": "ogc-test",
             "ansible_python_interpreter": sys.executable, "passthrough_plan_dir": f"{tmp_path}/plans",
             "cloud_flavors": [small], "cloud_images": images}
    conn = testcloud.connect()

    def properties(name):
        image = conn.image.find_image(name, ignore_missing=False)
        return {key: image.properties.get(key) for key in ("hw_maxphysaddr_mode", "hw_maxphysaddr_bits")}

    rc, _res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "-e", json.dumps(cloud))
    assert rc == 0, out
    assert properties("it_space_bios") == {"hw_maxphysaddr_mode": None, "hw_maxphysaddr_bits": None}
    assert properties("it_space_uefi") == {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": "41"}

    cloud["cloud_flavors"] = [small, big]
    rc, _res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "-e", json.dumps(
        dict(cloud, nova_pci_config_openstack_release="2023.2")))
    said = " ".join(out.split())
    assert rc != 0 and "Traceback" not in out, out
    assert (f"flavors[1] (it_a100_x2_800g): 819200 MiB of RAM and 2 x {alias}, whose 64-bit windows take 256G on a100 "
            "(each GPU behind a root port of its own, its windows aligned to the largest), need 41 guest physical "
            "address bits under SeaBIOS (hw_firmware_type bios, Nova's default), more than QEMU's default 40, and Nova "
            "2023.2 cannot be told so: hw_maxphysaddr_mode and hw_maxphysaddr_bits arrive in 2024.1") in said, said
    assert conn.compute.find_flavor("it_a100_x2_800g") is None
    assert properties("it_space_bios")["hw_maxphysaddr_bits"] is None

    rc, _res, out = testcloud.playbook("playbooks/cloud.yml", "-i", str(inventory), "-e", json.dumps(cloud))
    assert rc == 0, out
    assert properties("it_space_bios") == {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": "41"}
    assert properties("it_space_uefi") == {"hw_maxphysaddr_mode": "emulate", "hw_maxphysaddr_bits": "41"}
    for name in ("it_a100_x2", "it_a100_x2_800g"):
        conn.compute.delete_flavor(conn.compute.find_flavor(name, ignore_missing=False))
    for name in ("it_space_bios", "it_space_uefi"):
        conn.image.delete_image(conn.image.find_image(name, ignore_missing=False))
