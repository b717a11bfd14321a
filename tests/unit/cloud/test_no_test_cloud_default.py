"""No role or playbook reaches the local test cloud unless the environment names it: the cloud is the
inventory's cloud_name (the demo's is ogc-test), never a default of the code."""

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEST_CLOUD = "ogc-test"


def test_only_the_demo_inventory_names_the_test_cloud():
    code = [path for pattern in ("roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/tasks/*.yml",
                                 "roles/*/meta/argument_specs.yml", "playbooks/*.yml", "group_vars/*/*.yml",
                                 "inventory/example-*/**/*.yml", "site.yml")
            for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    assert len(code) > 50
    naming = sorted(os.path.relpath(path, ROOT) for path in code if TEST_CLOUD in open(path, encoding="utf-8").read())
    assert naming == [], f"{TEST_CLOUD} is named outside inventory/demo: {naming}"
    with open(os.path.join(ROOT, "inventory/demo/group_vars/all/cloud.yml"), encoding="utf-8") as handle:
        assert f"cloud_name: {TEST_CLOUD}" in handle.read()


def test_the_code_names_no_cloud_at_all():
    """Not the test cloud, nor any other: the site defaults leave cloud_name empty (each environment names its
    own) and the drain, the one role with a cloud of its own, is off until the environment names one."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "group_vars/all/main.yml"), encoding="utf-8") as handle:
        site = yaml.safe_load(handle)
    assert site["cloud_name"] == "" and site["cloud_auth"] == {} and site["cloud_clouds_yaml"] == ""
    with open(os.path.join(ROOT, "roles/passthrough_rollout/defaults/main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["passthrough_rollout_drain_cloud"] == ""
