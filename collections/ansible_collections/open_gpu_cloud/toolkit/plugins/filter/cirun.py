# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""cirun runner definitions (``.cirun.yml``) generated from the cloud's declared flavors and images.

cirun (cirun.io) starts GitHub Actions runners on demand in a cloud. A consumer repository lists them in
``.cirun.yml``::

    runners:
      - name: gpu-runner
        cloud: openstack
        instance_type: gpu_tiny          # a Nova flavor name
        machine_image: ubuntu-2204-nvidia  # a Glance image name
        region: RegionOne
        labels: [cirun-openstack-gpu]    # workflows say runs-on: "cirun-openstack-gpu--${{ github.run_id }}"

Filters (pure functions; every error names the runner or repository and the fix):

* ``ci_runners | open_gpu_cloud.toolkit.cirun_runners(cloud_flavors, cloud_images, region='RegionOne')`` -> the runners in
  cirun's shape, after checking each one against the declared flavors and images.
* ``ci_runners | open_gpu_cloud.toolkit.cirun_repo_configs(cloud_flavors, cloud_images, repos, region='RegionOne')`` ->
  ``[{repo, path, config: {runners: [...]}}]``: one ``.cirun.yml`` per consumer repository.

A declared runner (``ci_runners`` item): ``name`` (required), ``flavor`` (a declared flavor name), ``image``
(a declared image name), ``labels`` (non-empty, each starting with ``cirun-``), optional ``region``
(overrides the default), ``workflow`` (path of the workflow file that may use it) and ``count``.
A consumer repository (``repos`` item): ``repo`` (``owner/name``), optional ``runners`` (names; default:
every runner).
"""

from __future__ import annotations

import re

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - the unit tests run with ansible installed
    class AnsibleFilterError(Exception):
        """Stand-in when ansible is not importable."""

LABEL_PREFIX = "cirun-"
RUNNER_KEYS = ("name", "flavor", "image", "labels", "region", "workflow", "count")
REPO_KEYS = ("repo", "runners")
# GitHub's own rules for owner/name (letters, digits, '-', '_', '.'); no '..' path tricks.
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9_.-]+$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _names(items, what):
    """Names of the declared flavors or images (list of dicts with 'name', or of plain names)."""
    if items is None:
        return set()
    if not isinstance(items, (list, tuple)):
        raise AnsibleFilterError(f"{what} must be a list of {{name: ...}} items, got {type(items).__name__}")
    names = set()
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            names.add(item["name"])
        elif isinstance(item, str) and item:
            names.add(item)
        else:
            raise AnsibleFilterError(f"{what}: every item needs a non-empty 'name', got {item!r}")
    return names


def _one(runner, index, flavors, images, region):
    """Validate one declared runner; returns (cirun dict, [errors])."""
    errors = []
    if not isinstance(runner, dict):
        return None, [f"ci_runners[{index}] must be a dict {{name, flavor, image, labels}}, got {runner!r}"]
    name = runner.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        return None, [f"ci_runners[{index}]: 'name' must be a non-empty string of letters, digits, '-', '_' or '.' "
                      f"(got {name!r})"]
    label = f"runner '{name}'"
    unknown = sorted(set(runner) - set(RUNNER_KEYS))
    if unknown:
        errors.append(f"{label}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(RUNNER_KEYS)})")
    flavor = runner.get("flavor")
    if not isinstance(flavor, str) or not flavor:
        errors.append(f"{label}: 'flavor' is required (a flavor declared in cloud_flavors)")
    elif flavor not in flavors:
        errors.append(f"{label}: flavor '{flavor}' is not declared; declare it in cloud_flavors or use one of: "
                      f"{', '.join(sorted(flavors)) or 'none declared'}")
    image = runner.get("image")
    if not isinstance(image, str) or not image:
        errors.append(f"{label}: 'image' is required (an image declared in cloud_images)")
    elif image not in images:
        errors.append(f"{label}: image '{image}' is not declared; declare it in cloud_images (or image_builds) or use "
                      f"one of: {', '.join(sorted(images)) or 'none declared'}")
    labels = runner.get("labels")
    if not isinstance(labels, (list, tuple)) or not labels:
        errors.append(f"{label}: 'labels' must be a non-empty list of labels starting with '{LABEL_PREFIX}' (e.g. "
                      f"{LABEL_PREFIX}openstack-gpu)")
        labels = []
    for item in labels:
        if not isinstance(item, str) or not item.startswith(LABEL_PREFIX) or len(item) == len(LABEL_PREFIX):
            errors.append(f"{label}: label {item!r} does not start with '{LABEL_PREFIX}'; cirun only routes jobs whose "
                          f"runs-on label starts with it: rename it to '{LABEL_PREFIX}{str(item).strip() or 'gpu'}'")
    if len(set(labels)) != len(labels):
        errors.append(f"{label}: labels repeat ({', '.join(labels)})")
    the_region = runner.get("region", region)
    if not isinstance(the_region, str) or not the_region:
        errors.append(f"{label}: 'region' must be a non-empty string (the cloud's region, e.g. RegionOne)")
    count = runner.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        errors.append(f"{label}: 'count' must be a positive integer, got {count!r}")
    workflow = runner.get("workflow")
    if workflow is not None and (not isinstance(workflow, str) or not workflow.startswith(".github/workflows/")):
        errors.append(f"{label}: 'workflow' must be a path under .github/workflows/, got {workflow!r}")
    if errors:
        return None, errors
    out = dict(name=name, cloud="openstack", instance_type=flavor, machine_image=image, region=the_region,
               labels=list(labels))
    if workflow is not None:
        out["workflow"] = workflow
    if count is not None:
        out["count"] = count
    return out, []


def cirun_runners(ci_runners, flavors, images, region="RegionOne"):
    """Declared runners -> cirun runner dicts, checked against the declared flavors and images.

    Raises AnsibleFilterError listing every problem (each names the runner and the fix).
    """
    if not isinstance(ci_runners, (list, tuple)):
        raise AnsibleFilterError("ci_runners must be a list of {name, flavor, image, labels}, got "
                                 f"{type(ci_runners).__name__}")
    if not isinstance(region, str) or not region:
        raise AnsibleFilterError(f"the default region must be a non-empty string (e.g. RegionOne), got {region!r}")
    flavor_names = _names(flavors, "cloud_flavors")
    image_names = _names(images, "cloud_images")
    out, errors, seen, owners = [], [], set(), {}
    for index, runner in enumerate(ci_runners):
        done, problems = _one(runner, index, flavor_names, image_names, region)
        errors.extend(problems)
        if done is None:
            continue
        if done["name"] in seen:
            errors.append(f"runner '{done['name']}' is declared twice in ci_runners")
            continue
        seen.add(done["name"])
        for item in done["labels"]:
            if item in owners:
                errors.append(f"runner '{done['name']}': label '{item}' is also used by runner '{owners[item]}'; cirun "
                              "picks a runner by label, so each label must belong to one runner")
            owners[item] = done["name"]
        out.append(done)
    if errors:
        raise AnsibleFilterError("invalid CI runner declaration: " + "; ".join(errors))
    return out


def cirun_repo_configs(ci_runners, flavors, images, repos, region="RegionOne"):
    """One ``.cirun.yml`` content per consumer repository.

    Returns ``[{repo, path, config}]`` with ``path`` = ``owner/name/.cirun.yml`` (relative to the output
    directory) and ``config`` = ``{runners: [...]}`` holding the runners the repository asked for (all when
    it names none), in ci_runners order.
    """
    runners = cirun_runners(ci_runners, flavors, images, region)
    by_name = dict((r["name"], r) for r in runners)
    if not isinstance(repos, (list, tuple)):
        raise AnsibleFilterError("ci_runner_repos must be a list of {repo: owner/name, runners: [...]}, got "
                                 f"{type(repos).__name__}")
    out, errors, seen = [], [], set()
    for index, entry in enumerate(repos):
        if not isinstance(entry, dict) or not isinstance(entry.get("repo"), str) or not REPO_RE.match(entry["repo"]):
            errors.append(f"ci_runner_repos[{index}]: 'repo' must be a GitHub repository as owner/name, got "
                          f"{entry.get('repo') if isinstance(entry, dict) else entry!r}")
            continue
        repo = entry["repo"]
        unknown = sorted(set(entry) - set(REPO_KEYS))
        if unknown:
            errors.append(f"repository {repo}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(REPO_KEYS)})")
        if repo.lower() in seen:
            errors.append(f"repository {repo} is listed twice in ci_runner_repos")
            continue
        seen.add(repo.lower())
        wanted = entry.get("runners")
        if wanted is None:
            wanted = [r["name"] for r in runners]
        if not isinstance(wanted, (list, tuple)) or not wanted:
            errors.append(f"repository {repo}: 'runners' must be a non-empty list of runner names (or left out for "
                          "all)")
            continue
        missing = [w for w in wanted if w not in by_name]
        if missing:
            errors.append(f"repository {repo} asks for runner(s) {', '.join(map(str, missing))} that ci_runners does "
                          f"not declare (declared: {', '.join(sorted(by_name)) or 'none'})")
            continue
        chosen = [r for r in runners if r["name"] in set(wanted)]
        out.append(dict(repo=repo, path=f"{repo}/.cirun.yml", config=dict(runners=chosen)))
    if errors:
        raise AnsibleFilterError("invalid CI runner repositories: " + "; ".join(errors))
    return out


class FilterModule:
    """cirun runner definitions from the declared cloud."""

    def filters(self):
        return {
            "cirun_runners": cirun_runners,
            "cirun_repo_configs": cirun_repo_configs,
        }
