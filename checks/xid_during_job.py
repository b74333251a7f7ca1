"""xid_during_job (epilog): no fatal XID (the XID policy's, or [epilog] fatal_xids) reported
by NVML on any GPU since the prolog's snapshot of the job; other new XIDs are warnings."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.job_gpus import gpus_at_end, job_or_skip
from airlock.errors import AirlockError
from airlock.hw import boot as boot_mod
from airlock.hw.profiles.xid_policy import policy
from airlock.records import job_snapshot

CHECK = "xid_during_job"


def _xid_key(x: dict[str, Any]) -> tuple:
    return (int(x["xid"]), int(x.get("gpu", -1)), round(float(x.get("time", 0)), 3))


def verdict_xids(before: dict[str, Any] | None, gpus: list[dict[str, Any]],
                 fatal: Iterable[int], since: float | None = None) -> Outcome:
    """since: the snapshot's moment in the wall-clock frame of `gpus` (snapshot_since)."""
    if before is None:
        return skipped("xid_during_job", "no prolog snapshot for this job")
    seen = {_xid_key(x) for g in before["gpus"] for x in g.get("xids", ())}
    if since is None:
        since = float(before.get("gathered_at", 0))
    new = sorted({_xid_key(x) for g in gpus for x in g.get("xids", ())
                  if _xid_key(x) not in seen and float(x.get("time", 0)) >= since},
                 key=lambda k: k[2])
    fatal = set(fatal)
    bad = [k for k in new if k[0] in fatal]
    if bad:
        xid, gpu, _ = bad[0]
        return failed("xid_during_job", f"xid {xid} on gpu{gpu} during the job", "reboot",
                      xids=[k[0] for k in bad])
    if new:
        return warned("xid_during_job", f"non-fatal xid {new[0][0]} on gpu{new[0][1]}",
                      xids=[k[0] for k in new])
    return passed("xid_during_job", "no new XIDs")


def fatal_xids(cfg) -> set[int]:
    if cfg.epilog.fatal_xids:
        return set(cfg.epilog.fatal_xids)

    return set(policy("default", cfg.xid.policy_file).fatal)


def check_xid_during_job(ctx) -> Outcome:
    skip = job_or_skip(ctx, CHECK)
    if skip is not None:
        return skip
    try:
        gpus = gpus_at_end(ctx)
    except AirlockError as exc:  # the GPUs cannot be vouched for: never "see another check"
        return failed(CHECK, str(exc))
    before = ctx.job.before
    since = job_snapshot.since(before, time.time(), boot_mod.uptime()) if before else None
    return verdict_xids(before, gpus, fatal_xids(ctx.cfg), since)
