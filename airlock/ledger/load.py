"""Reading what the ledger is computed from: the results store, the recovery database, Slurm's
view of the nodes, slurm.conf's HealthCheckInterval, and sacct when slurmdbd answers. Every
source is read-only here; what could not be read is named in the History, and what makes the
ledger wrong (a history with gaps, sacct asked for but absent) is a one-line error."""

from __future__ import annotations

import re
import time

from airlock.errors import AirlockError, SlurmError
from airlock.ledger.history import Action, History, Job, NodeView, Release
from airlock.records import results
from airlock.recovery.machine import format_slurm_time, parse_slurm_time
from airlock.slurm import conf as slurmconf
from airlock.slurm.client import Node, Slurm

# The recovery store's action statuses that mean the action was sent (store.ISSUED, DONE).
SENT = ("issued", "done")
# recovery.machine's `released` event for a foreign drain (hands off, the node stays out);
# every other `released` means the node was back in service without Airlock's action.
FOREIGN_RELEASE = "foreign reason"
READ_S = 120.0  # the whole results store, read once per ledger
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")


class HistoryGap(AirlockError):
    """A node's kept history does not reach back to the window's start."""


class NoSlurmdbd(AirlockError):
    """[ledger] jobs = "sacct", and sacct did not answer."""


def gpu_count(gres: str) -> int:
    """GPUs in a node's Gres (gpu:8, gpu:h100:8(S:0-1), ...); 0 when it names none."""
    return sum(int(n) for n in _GRES_GPU.findall(gres or ""))


def node_view(node: Node, default_gpus: int) -> NodeView:
    down = node.state in ("DOWN", "FUTURE", "UNKNOWN") or "NOT_RESPONDING" in node.flags
    return NodeView(gpu_count(node.gres) or default_gpus, not (node.drained or down),
                    parse_slurm_time(node.boot_time))


def load(cfg, since_s: float, now: float | None = None, slurm: Slurm | None = None) -> History:
    settings = cfg.ledger
    now = time.time() if now is None else now
    start = now - since_s
    slurm = slurm or Slurm.from_config(cfg)
    nodes = slurm.nodes()
    h = History(start, now, gpus_per_node=settings.gpus_per_node)
    h.nodes = {n.name: node_view(n, settings.gpus_per_node) for n in nodes}
    _results(cfg, h)
    _recovery(cfg, h)
    _jobs(slurm, settings.jobs, h)
    found = slurmconf.settings(slurmconf.find(cfg.slurm.conf), ("HealthCheckInterval",))
    try:
        h.health_check_interval = max(0.0, float(found.get("healthcheckinterval", "0")))
    except ValueError:
        h.health_check_interval = 0.0
    return h


def _results(cfg, h: History) -> None:
    # every kept run of every node: far more than `airlock status` reads, so a longer wait
    read = results.read_many(cfg, sorted(h.nodes), history=results.KEEP, timeout=READ_S)
    for name, res in sorted(read.items()):
        if res.run is None:
            h.unread[name] = res.problem
            continue
        h.latest[name] = res.run
        kept = res.history
        if len(kept) >= results.KEEP:
            oldest = min((r.get("finished_at") or 0) for r in kept)
            if oldest > h.start:
                days = (h.end - oldest) / 86400
                raise HistoryGap(
                    f"the history of {name} has a gap: only its last {results.KEEP} runs are "
                    f"kept and the oldest finished {format_slurm_time(oldest)}, after the "
                    f"window's start; use --since {max(days, 0.01):.2f}d or less")
        h.runs += [r for r in kept if h.start <= (r.get("finished_at") or 0) <= h.end]


def _recovery(cfg, h: History) -> None:
    import os

    from airlock.recovery.store import RecoveryStore, StoreError

    db = cfg.recovery.db
    if not db or not os.path.exists(db):
        h.recovery_note = f"no recovery database at {db}: no reboots or replacements known"
        return
    try:
        store = RecoveryStore(db, readonly=True)
    except StoreError as exc:
        h.recovery_note = f"{exc}: no reboots or replacements known"
        return
    try:
        for a in store.actions():
            if a["status"] in SENT and a["kind"] in ("reboot", "replace") \
                    and h.start <= a["created"] <= h.end:
                h.actions.append(Action(a["node"], a["kind"], float(a["created"])))
        for e in store.history():
            if e["event"] == "released" and h.start <= e["ts"] <= h.end \
                    and not str(e["detail"]).startswith(FOREIGN_RELEASE):
                h.releases.append(Release(e["node"], float(e["ts"])))
    finally:
        store.close()


def _jobs(slurm: Slurm, source: str, h: History) -> None:
    if source == "config":
        h.jobs_note = "configured ([ledger] job_gpus, job_hours, utilization)"
        return
    try:
        out = slurm.run("sacct", ["-a", "-X", "-n", "-P", "-o", "AllocTRES,NNodes,ElapsedRaw",
                                  "-S", format_slurm_time(h.start),
                                  "-E", format_slurm_time(h.end)], timeout=60.0)
    except SlurmError as exc:
        if source == "sacct":
            raise NoSlurmdbd(f"no slurmdbd: [ledger] jobs = \"sacct\" but {exc}; set jobs = "
                             "\"config\" (or \"auto\") to use [ledger] job_gpus and job_hours"
                             ) from None
        h.jobs_note = f"no slurmdbd ({exc}): configured [ledger] job_gpus, job_hours"
        return
    h.jobs = parse_sacct(out)
    h.jobs_note = f"sacct: {len(h.jobs)} jobs"


def parse_sacct(text: str) -> list[Job]:
    """Jobs from `sacct -P -o AllocTRES,NNodes,ElapsedRaw`; lines that do not parse are
    skipped (sacct's output is Slurm's, not ours)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        gpus = sum(int(n) for n in _TRES_GPU.findall(parts[0]))
        jobs.append(Job(gpus, int(parts[1]), int(parts[2]) / 3600))
    return jobs
