"""Role nova_pci_config on bad ground: something else where a host's override file goes, and GPU host names that would
leave kolla's config directory. Each is refused before anything is written."""

import pytest

from nova_helpers import alias, device, plan, run_playbook, write_inventory

pytestmark = pytest.mark.integration


def test_a_directory_where_a_host_file_goes_is_refused_before_the_global_file_is_written(tmp_path, inventory):
    cfg = tmp_path / "config"
    (cfg / "nova" / "gpu1" / "nova.conf").mkdir(parents=True)
    plans = {"gpu1": plan("gpu1", [device("0000:27:00.0")], [alias()]), "gpu2": plan("gpu2", [], []),
             "gpu3": plan("gpu3", [], [])}
    rc, out, _recap = run_playbook("nova.yml", inventory, {"nova_pci_config_node_custom_config": str(cfg),
                                                            "nova_pci_config_plans": plans})
    assert rc != 0
    assert f"nova_pci_config: {cfg}/nova/gpu1/nova.conf is not a regular file: this role writes nova.conf and placement.conf " \
           "overrides there" in out and "nothing was written" in out, out[-3000:]
    assert not (cfg / "nova.conf").exists()


def test_host_names_that_leave_the_config_directory_are_refused(tmp_path):
    inventory = write_inventory(tmp_path / "inventory.json", ["../../escape", "rack1/h1"])
    cfg = tmp_path / "a" / "b" / "config"
    plans = {name: plan(name, [device("0000:27:00.0")], [alias()]) for name in ("../../escape", "rack1/h1")}
    rc, out, _recap = run_playbook("nova.yml", inventory, {"nova_pci_config_node_custom_config": str(cfg),
                                                            "nova_pci_config_plans": plans})
    assert rc != 0
    assert "nova_pci_config: Host '../../escape': the inventory host name '../../escape' holds a '/'" in out, out[-3000:]
    assert "Host 'rack1/h1': the inventory host name 'rack1/h1' holds a '/'" in out
    assert not (tmp_path / "a" / "escape").exists() and not cfg.exists()


def test_the_operators_own_placement_setting_wins(tmp_path, inventory):
    """gpu1 offers two V100 in Placement, so the role would write Placement's candidate bounds; the operator already
    sets one of those options in kolla's placement.conf: the role leaves the file as it is and says so. Without that
    line it writes its block, and a second run changes nothing."""
    cfg = tmp_path / "config"
    cfg.mkdir()
    own = "[placement]\nmax_allocation_candidates = 50\n"
    (cfg / "placement.conf").write_text(own)
    plans = {"gpu1": plan("gpu1", [device("0000:27:00.0"), device("0000:28:00.0")], [alias()]),
             "gpu2": plan("gpu2", [], []), "gpu3": plan("gpu3", [], [])}
    extra = {"nova_pci_config_node_custom_config": str(cfg), "nova_pci_config_plans": plans}
    rc, out, _recap = run_playbook("nova.yml", inventory, extra)
    assert rc == 0, out[-3000:]
    assert "allocation candidates: the operator sets placement.conf: [placement] max_allocation_candidates: " \
           "open-gpu-cloud leaves them to it" in out, out[-3000:]  # (the YAML callback doubles the quote before)
    assert (cfg / "placement.conf").read_text() == own
    (cfg / "placement.conf").unlink()
    rc, out, _recap = run_playbook("nova.yml", inventory, extra)
    assert rc == 0, out[-3000:]
    written = (cfg / "placement.conf").read_text()
    assert "allocation_candidates_generation_strategy = breadth-first\nmax_allocation_candidates = 100000\n" in written
    rc, out, recap = run_playbook("nova.yml", inventory, extra)
    assert rc == 0 and recap["changed"] == 0 and (cfg / "placement.conf").read_text() == written, out[-3000:]
