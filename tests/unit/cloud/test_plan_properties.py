"""Property tests of the pure plan functions: once a plan is carried out, planning again finds nothing to do
(plan(read(apply(plan))) is empty), and the diff names exactly what the plan writes."""

from __future__ import annotations

import copy

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import access as cloud_access
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import flavors as cloud_flavors
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import images as cloud_images
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import quotas as cloud_quotas
from hypothesis import given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=100, deadline=None)

# ------------------------------------------------------------------ quotas

quota_values = st.dictionaries(st.sampled_from(cloud_quotas.QUOTA_KEYS), st.integers(-1, 50), max_size=4)


@st.composite
def quota_targets(draw):
    targets = []
    if draw(st.booleans()):
        targets.append(("class default", None, draw(quota_values.filter(bool)), draw(quota_values)))
    for index in range(draw(st.integers(0, 3))):
        targets.append((f"project p{index}", f"p{index}-id", draw(quota_values.filter(bool)), draw(quota_values)))
    return targets


def apply_quotas(targets, plan):
    """What Nova holds after the plan's writes: the written values replace the current ones."""
    written = dict((action.item, action.data["values"]) for action in plan.writes)
    return [(label, pid, want, dict(have, **written.get(label, {}))) for label, pid, want, have in targets]


@SETTINGS
@given(quota_targets())
def test_quotas_planned_again_after_apply_is_empty(targets):
    plan = cloud_quotas.make_plan(None, None, targets)
    assert plan.before.keys() == plan.after.keys() == set(a.item for a in plan.writes)
    for action in plan.writes:
        assert action.data["values"] == plan.after[action.item]
    again = cloud_quotas.make_plan(None, None, apply_quotas(targets, plan))
    assert again.writes == [] and again.diff == {"before": {}, "after": {}}


# ------------------------------------------------------------------ images

props = st.dictionaries(st.sampled_from(["hw_machine_type", "hw_disk_bus", "os_distro"]),
                        st.one_of(st.booleans(), st.sampled_from(["q35", "pc", "virtio", "1"])), max_size=3)
SHAS = ["a" * 64, "b" * 64]


@st.composite
def image_and_have(draw):
    image = dict(visibility=draw(st.sampled_from(["public", "private"])), min_disk=draw(st.integers(0, 3)),
                 min_ram=draw(st.integers(0, 3)), properties=draw(props))
    have = None
    if draw(st.booleans()):
        have = cloud_images.image_view(dict(
            {k: cloud_images.spec_value(v) for k, v in draw(props).items()}, id="old", name="x",
            visibility=draw(st.sampled_from(["public", "private", "shared"])), min_disk=draw(st.integers(0, 3)),
            min_ram=draw(st.integers(0, 3)), status="active", created_at="2026-01-01T00:00:00Z",
            **{cloud_images.SHA256_KEY: draw(st.sampled_from(SHAS))}))
    return image, have, draw(st.sampled_from(SHAS))


def apply_image(image, have, sha256, kind, changes):
    """The image Glance shows under the name afterwards (a new upload carries the declared properties)."""
    if kind in ("create", "replace"):
        raw = {k: cloud_images.spec_value(v) for k, v in image["properties"].items()}
        raw.update(id="new", name="x", visibility=image["visibility"], min_disk=image["min_disk"],
                   min_ram=image["min_ram"], status="active", created_at="2026-02-01T00:00:00Z")
        raw[cloud_images.SHA256_KEY] = sha256
        return cloud_images.image_view(raw)
    if kind == "update":
        view = copy.deepcopy(have)
        for key, value in changes.items():
            if key in ("visibility", "min_disk", "min_ram"):
                view[key] = value
            view["properties"][key] = str(value)
        return view
    return have


@SETTINGS
@given(image_and_have())
def test_image_planned_again_after_apply_is_unchanged(case):
    image, have, sha256 = case
    kind, changes = cloud_images.plan_image(image, have, sha256)
    assert (kind == "update") == bool(changes)
    after = apply_image(image, have, sha256, kind, changes)
    assert cloud_images.plan_image(image, after, sha256) == ("unchanged", {})


# ------------------------------------------------------------------ access

MARK = "managed by open-gpu-cloud allow-list"
LOGINS = ["alice", "bob", "carol", "dave", "erin"]


@st.composite
def access_case(draw):
    logins = draw(st.lists(st.sampled_from(LOGINS), unique=True, max_size=5))
    users = {}
    for login in draw(st.lists(st.sampled_from(LOGINS), unique=True, max_size=5)):
        users[login] = dict(id=login + "-id", description=draw(st.sampled_from([MARK, "", "by hand"])),
                            enabled=draw(st.booleans()))
    projects = [dict(name=name, description=draw(st.one_of(st.none(), st.sampled_from(["CI", "GPU"]))),
                     domain="default", enabled=draw(st.booleans()))
                for name in draw(st.lists(st.sampled_from(["ci", "research"]), unique=True, max_size=2))]
    existing = {}
    for name in draw(st.lists(st.sampled_from(["ci", "research", "admin"]), unique=True, max_size=3)):
        existing[name] = dict(id=name + "-id", description=draw(st.sampled_from(["", "CI", "old"])),
                              enabled=draw(st.booleans()))
    user_projects = draw(st.lists(st.sampled_from(["ci", "research"]), unique=True, max_size=2))
    assigned = set(draw(st.lists(st.tuples(st.sampled_from(LOGINS), st.sampled_from(["ci", "research"])),
                                 max_size=4)))
    return logins, projects, existing, users, assigned, user_projects, draw(st.booleans())


def apply_access(case, actions):
    logins, projects, existing, users, assigned, user_projects, disable = copy.deepcopy(case)
    for kind, _label, detail in actions:
        if kind == "create_project":
            existing[detail["name"]] = dict(id=detail["name"] + "-id", description=detail.get("description") or "",
                                            enabled=detail["enabled"])
        elif kind == "update_project":
            name = _label.split(" ", 1)[1]
            for key, value in detail["changes"].items():
                existing[name]["enabled" if key == "is_enabled" else key] = value
        elif kind == "create_user":
            users[detail] = dict(id=detail + "-id", description=MARK, enabled=True)
        elif kind in ("enable_user", "disable_user"):
            users[_label.split(" ", 1)[1]]["enabled"] = kind == "enable_user"
        elif kind == "assign":
            assigned.add(detail)
    return logins, projects, existing, users, assigned, user_projects, disable


def plan_access(case):
    logins, projects, existing, users, assigned, user_projects, disable = case
    return cloud_access.plan(logins, projects, existing, users, assigned, user_projects, MARK, disable)


@SETTINGS
@given(access_case())
def test_access_planned_again_after_apply_writes_nothing(case):
    actions = plan_access(case)
    again = plan_access(apply_access(case, actions))
    assert [kind for kind, _label, _detail in again if kind not in ("unchanged", "unmanaged")] == []
    # Unmanaged users are never disabled, whatever the allow-list says.
    disabled = [label for kind, label, _detail in actions if kind == "disable_user"]
    assert all(case[3][label.split(" ", 1)[1]]["description"] == MARK for label in disabled)


# ------------------------------------------------------------------ flavors

SPEC_KEYS = ["hw:cpu_policy", "pci_passthrough:alias", "hw:hide_hypervisor_id"]
spec_dicts = st.dictionaries(st.sampled_from(SPEC_KEYS), st.sampled_from(["a", "b", "true"]), max_size=3)


@st.composite
def flavor_case(draw):
    declared = []
    for name in draw(st.lists(st.sampled_from(["f1", "f2", "f3"]), unique=True, max_size=3)):
        public = draw(st.booleans())
        declared.append(cloud_flavors.normalise(dict(
            name=name, id=None, vcpus=draw(st.integers(1, 2)), ram=draw(st.sampled_from([512, 1024])), disk=0,
            ephemeral=0, swap=0, is_public=public, extra_specs=draw(spec_dicts),
            description=draw(st.one_of(st.none(), st.sampled_from(["x", "y"]))),
            projects=[] if public else draw(st.lists(st.sampled_from(["p1", "p2"]), unique=True)))))
    existing, access = {}, {}
    for name in draw(st.lists(st.sampled_from(["f1", "f2", "f3", "old1"]), unique=True, max_size=4)):
        public = draw(st.booleans())
        existing[name] = cloud_flavors.current_view(dict(
            name=name, id=name + "-id", vcpus=draw(st.integers(1, 2)), ram=draw(st.sampled_from([512, 1024])),
            disk=0, ephemeral=0, swap=0, is_public=public, description=draw(st.sampled_from([None, "x"])),
            extra_specs=draw(spec_dicts)))
        if not public:
            access[name] = draw(st.lists(st.sampled_from(["p1", "p2"]), unique=True))
    return declared, existing, access, draw(st.booleans())


def apply_flavors(existing, access, actions):
    existing, access = copy.deepcopy(existing), copy.deepcopy(access)
    for act in actions:
        name = act["name"]
        if act["action"] == "delete":
            existing.pop(name)
            access.pop(name, None)
        elif act["action"] in ("create", "recreate"):
            existing[name] = cloud_flavors.current_view(dict(act["want"], id=name + "-new"))
            access[name] = list(act["projects"])
        elif act["action"] == "update":
            view = existing[name]
            view["extra_specs"].update(act["set_specs"])
            for key in act["unset_specs"]:
                view["extra_specs"].pop(key)
            if act["description"] is not None:
                view["description"] = act["description"]
            access[name] = [p for p in access.get(name, []) if p not in act["remove_projects"]] + act["add_projects"]
    return existing, access


@SETTINGS
@given(flavor_case())
def test_flavors_planned_again_after_apply_are_unchanged(case):
    declared, existing, access, purge = case
    ids = {"p1": "p1", "p2": "p2"}
    options = dict(purge_extra_specs=purge, recreate_on_change=True, prune=True, prune_patterns=["old*"])
    actions, errors = cloud_flavors.plan(declared, existing, access, ids, **options)
    assert errors == []
    existing_after, access_after = apply_flavors(existing, access, actions)
    again, errors = cloud_flavors.plan(declared, existing_after, access_after, ids, **options)
    assert errors == [] and [a["action"] for a in again] == ["unchanged"] * len(declared)
    diff = cloud_flavors.diff_of(actions)
    assert set(diff["after"]) | set(diff["before"]) == set(a["name"] for a in actions if a["action"] != "unchanged")
