"""The real server as a virtual machine whose hypervisor offers no IOMMU (prepare.yml, before the vIOMMU is given).

create.yml boots the server without its vIOMMU: Debian's kernel shows the CPU's hypervisor flag, no IVRS table
and no IOMMU. No kernel argument can give it one, so plan.yml and host.yml (reboots allowed) must end green having
written nothing on the server and without a reboot, naming the cause and the fix; the same machine with the vIOMMU
(the fix) is what the converge then configures (test_converged.py).
"""

from __future__ import annotations

from conftest import GPU_A, HOST, STATE_FILE, kept, recap, words


def test_without_a_viommu_the_host_phase_leaves_the_server_alone():
    run = kept("no-viommu-run.json")
    said = words(run["output"])
    assert run["rc"] == 0, said[-3000:]
    assert f"{HOST} (GPU {GPU_A}" in said and \
        "left alone - nothing is written on this host and it is not rebooted" in said, said[-3000:]
    assert "[vm_without_iommu] This host is a virtual machine" in said and "no DMAR or IVRS table" in said
    assert "give the virtual machine a virtual IOMMU" in said
    assert recap(run["output"])["failed"] == 0
    # Its only changes: the plan role's, on the control host (the plan directory and the plan file).
    changed, task = [], None
    for line in run["output"].splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]", 1)[0]
        elif line.startswith(f"changed: [{HOST}"):
            changed.append((task, line))
    assert changed and all(line == f"changed: [{HOST} -> localhost]" and task.startswith(
        "open_gpu_cloud.toolkit.passthrough : ") for task, line in changed), changed


def test_nothing_was_written_and_the_server_did_not_reboot():
    before, after = kept("no-viommu-before.json"), kept("no-viommu-after.json")
    # Seen by the real kernel before the run: a virtual machine without an IOMMU.
    assert not any(d.get("iommu_group") for d in before["devices"].values())
    assert after["boot_id"] == before["boot_id"] and after["cmdline"] == before["cmdline"]
    assert after["files"] == before["files"] and STATE_FILE not in after["files"]
    assert {a: d["driver"] for a, d in after["devices"].items()} == {a: d["driver"] for a, d in before["devices"].items()}
