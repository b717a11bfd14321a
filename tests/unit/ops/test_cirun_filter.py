"""plugins/filter/cirun.py: runner definitions for cirun's .cirun.yml, every branch incl. errors."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ogc_testlib import load_source, collection_plugin

cirun = collection_plugin("filter", "cirun")

FLAVORS = [{"name": "gpu_tiny", "vcpus": 4, "ram": 2048}, {"name": "ci_medium", "vcpus": 4, "ram": 8192}]
IMAGES = [{"name": "ubuntu-2204-nvidia"}, {"name": "ubuntu-2204"}]
GPU = {"name": "gpu-runner", "flavor": "gpu_tiny", "image": "ubuntu-2204-nvidia", "labels": ["cirun-openstack-gpu"]}
CPU = {"name": "cpu-runner", "flavor": "ci_medium", "image": "ubuntu-2204", "labels": ["cirun-openstack-cpu"]}


def errors_of(*args, **kwargs):
    with pytest.raises(AnsibleFilterError) as info:
        cirun.cirun_runners(*args, **kwargs)
    return str(info.value)


def test_runner_in_cirun_shape():
    out = cirun.cirun_runners([GPU, CPU], FLAVORS, IMAGES, region="RegionOne")
    assert out == [
        {"name": "gpu-runner", "cloud": "openstack", "instance_type": "gpu_tiny",
         "machine_image": "ubuntu-2204-nvidia", "region": "RegionOne", "labels": ["cirun-openstack-gpu"]},
        {"name": "cpu-runner", "cloud": "openstack", "instance_type": "ci_medium",
         "machine_image": "ubuntu-2204", "region": "RegionOne", "labels": ["cirun-openstack-cpu"]},
    ]


def test_optional_keys_and_region_override():
    runner = dict(GPU, region="RegionTwo", workflow=".github/workflows/gpu.yml", count=2)
    out = cirun.cirun_runners([runner], FLAVORS, IMAGES)
    assert out[0]["region"] == "RegionTwo"
    assert out[0]["workflow"] == ".github/workflows/gpu.yml"
    assert out[0]["count"] == 2


def test_declared_names_may_be_plain_strings():
    out = cirun.cirun_runners([GPU], ["gpu_tiny"], ["ubuntu-2204-nvidia"])
    assert out[0]["instance_type"] == "gpu_tiny"


def test_input_not_modified():
    runner = dict(GPU)
    cirun.cirun_runners([runner], FLAVORS, IMAGES)
    assert runner == GPU


def test_undeclared_flavor_names_runner_and_fix():
    msg = errors_of([dict(GPU, flavor="gpu_huge")], FLAVORS, IMAGES)
    assert "runner 'gpu-runner'" in msg
    assert "flavor 'gpu_huge' is not declared" in msg
    assert "declare it in cloud_flavors or use one of: ci_medium, gpu_tiny" in msg


def test_undeclared_image_names_runner_and_fix():
    msg = errors_of([dict(GPU, image="ubuntu-2404-nvidia")], FLAVORS, IMAGES)
    assert "runner 'gpu-runner': image 'ubuntu-2404-nvidia' is not declared; declare it in cloud_images" in msg


def test_nothing_declared_says_so():
    msg = errors_of([GPU], [], None)
    assert "use one of: none declared" in msg


def test_label_without_prefix_names_the_fix():
    msg = errors_of([dict(GPU, labels=["openstack-gpu"])], FLAVORS, IMAGES)
    assert "runner 'gpu-runner': label 'openstack-gpu' does not start with 'cirun-'" in msg
    assert "rename it to 'cirun-openstack-gpu'" in msg


def test_bare_prefix_and_non_string_labels_rejected():
    assert "label 'cirun-' does not start" in errors_of([dict(GPU, labels=["cirun-"])], FLAVORS, IMAGES)
    assert "label 5 does not start" in errors_of([dict(GPU, labels=[5])], FLAVORS, IMAGES)


def test_missing_or_empty_labels():
    assert "'labels' must be a non-empty list" in errors_of([dict(GPU, labels=[])], FLAVORS, IMAGES)
    runner = dict(GPU)
    del runner["labels"]
    assert "'labels' must be a non-empty list" in errors_of([runner], FLAVORS, IMAGES)


def test_repeated_label_within_runner():
    msg = errors_of([dict(GPU, labels=["cirun-a", "cirun-a"])], FLAVORS, IMAGES)
    assert "labels repeat" in msg


def test_label_shared_between_runners():
    msg = errors_of([GPU, dict(CPU, labels=["cirun-openstack-gpu"])], FLAVORS, IMAGES)
    assert "runner 'cpu-runner': label 'cirun-openstack-gpu' is also used by runner 'gpu-runner'" in msg


def test_missing_flavor_and_image():
    msg = errors_of([{"name": "x", "labels": ["cirun-x"]}], FLAVORS, IMAGES)
    assert "runner 'x': 'flavor' is required" in msg
    assert "runner 'x': 'image' is required" in msg


def test_every_problem_reported_at_once():
    msg = errors_of([dict(GPU, flavor="nope", image="nope2", labels=["bad"])], FLAVORS, IMAGES)
    assert "flavor 'nope'" in msg and "image 'nope2'" in msg and "label 'bad'" in msg


def test_bad_names_and_shapes():
    assert "ci_runners[0] must be a dict" in errors_of(["gpu-runner"], FLAVORS, IMAGES)
    assert "ci_runners[0]: 'name' must be" in errors_of([dict(GPU, name="")], FLAVORS, IMAGES)
    assert "ci_runners[0]: 'name' must be" in errors_of([dict(GPU, name="a b")], FLAVORS, IMAGES)
    assert "ci_runners must be a list" in errors_of({"gpu-runner": GPU}, FLAVORS, IMAGES)
    assert "unknown key(s) flavour" in errors_of([dict(GPU, flavour="gpu_tiny")], FLAVORS, IMAGES)


def test_duplicate_runner_name():
    assert "runner 'gpu-runner' is declared twice" in errors_of([GPU, dict(GPU, labels=["cirun-b"])], FLAVORS, IMAGES)


def test_region_count_workflow_checks():
    assert "default region must be a non-empty string" in errors_of([GPU], FLAVORS, IMAGES, region="")
    assert "'region' must be a non-empty string" in errors_of([dict(GPU, region="")], FLAVORS, IMAGES)
    assert "'count' must be a positive integer, got 0" in errors_of([dict(GPU, count=0)], FLAVORS, IMAGES)
    assert "'count' must be a positive integer, got True" in errors_of([dict(GPU, count=True)], FLAVORS, IMAGES)
    assert "'workflow' must be a path under .github/workflows/" in errors_of(
        [dict(GPU, workflow="ci.yml")], FLAVORS, IMAGES)


def test_bad_declared_flavors_or_images():
    assert "cloud_flavors must be a list" in errors_of([GPU], {"gpu_tiny": {}}, IMAGES)
    assert "cloud_images: every item needs a non-empty 'name'" in errors_of([GPU], FLAVORS, [{"file": "x"}])


# ------------------------------------------------------------------ per repository

def test_repo_configs_subset_and_default_all():
    repos = [{"repo": "conda-forge/pytorch-cpu-feedstock", "runners": ["gpu-runner"]},
             {"repo": "open-gpu-cloud/demo"}]
    out = cirun.cirun_repo_configs([GPU, CPU], FLAVORS, IMAGES, repos)
    assert [o["repo"] for o in out] == ["conda-forge/pytorch-cpu-feedstock", "open-gpu-cloud/demo"]
    assert out[0]["path"] == "conda-forge/pytorch-cpu-feedstock/.cirun.yml"
    assert [r["name"] for r in out[0]["config"]["runners"]] == ["gpu-runner"]
    assert [r["name"] for r in out[1]["config"]["runners"]] == ["gpu-runner", "cpu-runner"]


def test_repo_asking_for_undeclared_runner():
    with pytest.raises(AnsibleFilterError) as info:
        cirun.cirun_repo_configs([GPU], FLAVORS, IMAGES, [{"repo": "a/b", "runners": ["gpu-runner", "tpu"]}])
    assert "repository a/b asks for runner(s) tpu that ci_runners does not declare (declared: gpu-runner)" in str(
        info.value)


@pytest.mark.parametrize("repos, expected", [
    ([{"repo": "no-slash"}], "ci_runner_repos[0]: 'repo' must be a GitHub repository as owner/name"),
    ([{"repo": "../etc/x"}], "ci_runner_repos[0]: 'repo' must be a GitHub repository"),
    (["a/b"], "ci_runner_repos[0]: 'repo' must be a GitHub repository"),
    ([{"repo": "a/b"}, {"repo": "A/B"}], "repository A/B is listed twice"),
    ([{"repo": "a/b", "runners": []}], "repository a/b: 'runners' must be a non-empty list"),
    ([{"repo": "a/b", "labels": []}], "repository a/b: unknown key(s) labels"),
    ({"repo": "a/b"}, "ci_runner_repos must be a list"),
])
def test_repo_errors(repos, expected):
    with pytest.raises(AnsibleFilterError) as info:
        cirun.cirun_repo_configs([GPU], FLAVORS, IMAGES, repos)
    assert expected in str(info.value)


def test_filter_module_exports():
    assert set(cirun.FilterModule().filters()) == {"cirun_runners", "cirun_repo_configs"}
