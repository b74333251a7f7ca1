"""What differs between the Slurm versions Airlock supports, each behaviour tested on each
variant: 22.05 (Debian 12), 24.11 (Debian 13) without an accounting plugin, and 24.11 with
AccountingStorageType=accounting_storage/slurmdbd (no slurmdbd running). The hooks here are
plain scripts, so what is seen is Slurm's own behaviour; docs/guide.md ("Supported Slurm")
summarises it. Each test uses its own nodes of the module's cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.dev.cluster import host_uptime
from airlock.slurm import reasons
from airlock.status import collect as status
from tests.cluster.conftest import running_cluster

ALL = ("22.05", "24.11", "24.11-dbd", "26.05")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# Record each run's boot identity as the hook sees it (a hook gets only SLURMD_NODENAME).
HEALTHCHECK = """#!/bin/sh
echo "$SLURMD_NODENAME $(cat /proc/sys/kernel/random/boot_id) $(cut -d' ' -f1 /proc/uptime)" \\
  >> @ROOT@/hc.log
exit 0
"""
PLAIN = {"healthcheck": HEALTHCHECK, "prolog": "#!/bin/sh\nexit 0\n",
         "epilog": "#!/bin/sh\nexit 0\n"}


@pytest.fixture(scope="module")
def vc(slurm_variant):
    with running_cluster(slurm_variant, wait=True, hooks=PLAIN, health_interval=3600,
                         nodes=["node1", "node2", "node3", "node4", "node5"],
                         future=["node9"]) as c:
        yield c


def hc_runs(c, node: str) -> list[tuple[str, float]]:
    path = c.root / "hc.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(boot_id, float(up)) for name, boot_id, up in (ln.split() for ln in lines)
            if name == node]


def drain_then_resume(c, node: str):
    s = c.slurm
    assert s.drain(node, reasons.failure("row_remap", "gpu0 row remap failed")).changed
    first = s.resume(node)
    return first, c.node(node)


# --- a resume without an accounting plugin keeps the reason (23.11+, Slurm issue 50933) -----
@pytest.mark.slurm_variants("22.05", "24.11-dbd", "26.05")
def test_resume_clears_the_reason(vc):
    first, n = drain_then_resume(vc, "node1")
    # (IDLE+NOT_RESPONDING until slurmctld's next ping, on every version)
    assert first.changed and n.state == "IDLE" and not n.drained and n.reason == ""
    _resumed_node_is_in_service_for_airlock(vc, n)


@pytest.mark.slurm_variants("24.11")
def test_resume_keeps_the_reason_without_accounting(vc):
    first, n = drain_then_resume(vc, "node1")
    assert first.changed and n.state == "IDLE" and not n.drained
    assert n.reason == "airlock: FAIL row_remap gpu0 row remap failed" and n.reason_user == "root"
    _resumed_node_is_in_service_for_airlock(vc, n)


def _resumed_node_is_in_service_for_airlock(c, n):
    """Whatever reason text is left, Airlock reads the node as in service, resumes it no
    second time (24.11 would answer "Invalid node state specified") and drains it again."""
    assert not n.drained and n.claim is None and not n.owned and not n.foreign_drain
    # not failed, not quarantined: "down" until slurmctld's next ping clears NOT_RESPONDING
    assert n.reason_in_force == "" and status.classify(n) in ("healthy", "down")
    again = c.slurm.resume(n.name)
    assert not again.changed and again.why == "not drained"
    redrain = c.slurm.drain(n.name, reasons.failure("row_remap", "gpu0 row remap failed"))
    assert redrain.changed, redrain
    n2 = c.node(n.name)
    assert n2.drained and n2.claim == reasons.Reason("FAIL", "row_remap", "gpu0 row remap failed")
    assert status.classify(n2) == "failed"
    assert c.slurm.resume(n.name).changed


# --- a reason set on a FUTURE node, at its registration -------------------------------------
def _future_registers(c):
    c.slurm.scontrol("update", "nodename=node9", "state=drain", "reason=ops: hold Owner=ops")
    assert c.node("node9").state_text == "FUTURE+DRAIN"
    c.start_node("node9", wait=True)
    return c.wait(lambda: (n := c.node("node9")).state == "IDLE" and n, 30, "node9 IDLE")


@pytest.mark.slurm_variants("22.05", "24.11-dbd", "26.05")
def test_future_node_loses_its_reason_at_registration(vc):
    n = _future_registers(vc)
    # still drained, but by nobody's claim: Airlock must neither resume nor call it foreign
    assert n.drained and n.reason == "" and not n.foreign_drain and not n.owned
    assert status.classify(n) == "drained-other"


@pytest.mark.slurm_variants("24.11")
def test_future_node_keeps_its_reason_at_registration(vc):
    n = _future_registers(vc)
    assert n.drained and n.reason == "ops: hold Owner=ops" and n.foreign_drain
    assert status.classify(n) == "drained-other"


# --- scontrol reboot -------------------------------------------------------------------------
@pytest.mark.slurm_variants(*ALL)
def test_reboot_appends_reboot_issued_and_a_drain_survives_it(vc):
    """The same on every version: the reboot's reason gains " : reboot issued"; a drained node
    comes back drained with that text (Airlock's recover reason, still parsed as Airlock's)."""
    before = hc_runs(vc, "node2")
    reason = "airlock: recover reboot airlock-1-reboot-node2"
    assert vc.slurm.drain("node2", reason).changed
    vc.slurm.scontrol("reboot", f"reason={reason}", "node2")
    vc.wait(lambda: len(hc_runs(vc, "node2")) > len(before), 60, "node2 back from its reboot")
    n = vc.wait(lambda: (m := vc.node("node2")).responding and not m.flags - {"DRAIN"} and m,
                30, "node2 registered after the reboot")
    assert n.drained and n.reason == f"{reason} : reboot issued"
    assert n.claim == reasons.Reason("recover", "reboot", "airlock-1-reboot-node2 : reboot issued")
    boot_id, uptime = hc_runs(vc, "node2")[-1]
    assert boot_id not in {b for b, _ in before} and uptime < 30  # RebootProgram: a fresh boot


def _reboot_to_resume(c):
    c.slurm.scontrol("reboot", "nextstate=resume", "reason=maint k=v", "node3")
    return c.wait(lambda: (n := c.node("node3")).state_text == "IDLE" and n, 60,
                  "node3 back in service")


@pytest.mark.slurm_variants("22.05", "24.11-dbd", "26.05")
def test_reboot_to_resume_clears_the_reason(vc):
    n = _reboot_to_resume(vc)
    assert n.reason == "" and status.classify(n) == "healthy"


@pytest.mark.slurm_variants("24.11")
def test_reboot_to_resume_keeps_the_reason_without_accounting(vc):
    n = _reboot_to_resume(vc)
    assert n.reason == "maint k=v : reboot issued" and n.reason_in_force == ""
    assert status.classify(n) == "healthy"


# --- the dev cluster's own promises, per version --------------------------------------------
@pytest.mark.slurm_variants("22.05", "24.11", "26.05")
def test_fresh_boot_presents_a_new_boot_id_and_a_small_uptime(vc):
    host_boot_id = BOOT_ID.read_text().strip()
    (first_id, first_up), = hc_runs(vc, "node4")  # started as the cluster came up: no reboot
    assert first_id == host_boot_id and first_up > host_uptime() - 600
    seen = {first_id}
    for runs in (2, 3):
        vc.restart_node("node4", fresh_boot=True)
        vc.wait(lambda n=runs: len(hc_runs(vc, "node4")) == n, 30, "node4's HealthCheckProgram")
        boot_id, uptime = hc_runs(vc, "node4")[-1]
        assert boot_id not in seen and uptime < 30, (boot_id, uptime)
        seen.add(boot_id)
    # what the fresh slurmd starts sees that boot too: a job
    job = vc.sbatch("cat /proc/sys/kernel/random/boot_id", "-w", "node4")
    vc.wait(lambda: vc.job(job).get("JobState") == "COMPLETED", 30, "job on node4")
    assert (vc.root / "jobs" / f"{job}.out").read_text().strip() == boot_id
    assert BOOT_ID.read_text().strip() == host_boot_id


@pytest.mark.slurm_variants("22.05", "24.11", "26.05")
def test_clients_reach_this_version_and_json_is_detected(vc):
    version = vc.run(["scontrol", "--version"]).split()[-1]
    assert version.startswith(vc.slurm_version + ".")
    assert vc.slurm.has_json() == (vc.slurm_version != "22.05")
    text = vc.slurm.nodes(reader="text")
    assert text == vc.slurm.nodes()
    if vc.slurm.has_json():
        assert vc.slurm.nodes(reader="json") == text
        # inside the chroot the same wrapper is the real binary (a job runs in there)
        job = vc.sbatch(f"{vc.client('scontrol')} --version", "-w", "node5")
        vc.wait(lambda: vc.job(job).get("JobState") == "COMPLETED", 30, "job on node5")
        assert (vc.root / "jobs" / f"{job}.out").read_text().split()[-1] == version
