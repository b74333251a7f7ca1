"""Epilog: after every job, check that the job left its GPUs healthy and free.

slurmd runs it as root with SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_USER, SLURM_CONF (and
SLURM_JOB_GPUS when the job had GPUs through gres) and no PATH. Three checks, each a pure verdict
over one fresh NVML snapshot and the prolog's snapshot of the same job:

  gpu_released    no compute process still alive on the job's GPUs and no more than
                  memory_used_max_mib of device memory in use on each of them (after
                  process_grace seconds for exiting processes to let go); without
                  SLURM_JOB_GPUS (a job without GPU gres, maybe on a shared node) only
                  the job's own processes count (its cgroup, else its uid), and memory
                  only on GPUs no other live process is using
  xid_during_job  no fatal XID (the XID policy's, or [epilog] fatal_xids) reported by NVML
                  on any GPU since the prolog; other new XIDs are warnings
  ecc_during_job  no new uncorrectable ECC errors or remapped rows since the prolog; new
                  correctable errors are a warning

A failure drains the node with "airlock: FAIL <check> <detail> (epilog job N)" and exits 0, so
Slurm does not add its own "Epilog error"; when the drain cannot be set the epilog exits 1 and
Slurm's drain protects the next job instead. No torch, no Slurm call on success.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from airlock import finish
from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.errors import AirlockError
from airlock.hooks.common import Hook, guard
from airlock.hooks.prolog import gpu_snapshot, jobs_dir
from airlock.hw import boot as boot_mod
from airlock.hw import nvml
from airlock.hw.profiles.xid_policy import policy
from airlock.paths import read_json


# --- pure verdicts -------------------------------------------------------------------------------
def job_gpu_indices(env_value: str | None, all_indices: Iterable[int]) -> set[int]:
    """SLURM_JOB_GPUS ("0,2") names the job's GPUs; without it the job had the whole node."""
    if env_value:
        try:
            return {int(x) for x in env_value.split(",") if x.strip()}
        except ValueError:
            pass
    return set(all_indices)


def verdict_released(gpus: list[dict[str, Any]], job_gpus: set[int],
                     alive: Callable[[int], bool], memory_max_mib: int,
                     belongs: Callable[[int], bool] | None = None) -> Outcome:
    """A live process names the culprit, so it is reported first; memory still held with no
    live process (an orphaned context, a driver that did not free) is the next failure.

    belongs: when the job's GPUs are not known (no SLURM_JOB_GPUS: a job without GPU gres, on
    a node other jobs may share), only the job's own processes count, and memory only on GPUs
    that no one else's live process is using."""
    mine = [g for g in gpus if g["index"] in job_gpus]
    if belongs is not None:
        mine = [g for g in mine
                if not any(alive(p) and not belongs(p) for p in g.get("compute_pids", ()))
                or any(alive(p) and belongs(p) for p in g.get("compute_pids", ()))]
    leftovers = [(g["index"], pid) for g in mine
                 for pid in g.get("compute_pids", ()) if alive(pid)
                 and (belongs is None or belongs(pid))]
    if leftovers:
        gpu, pid = leftovers[0]
        more = f" (+{len(leftovers) - 1} more)" if len(leftovers) > 1 else ""
        return failed("gpu_released", f"gpu{gpu} pid {pid} still running{more}", "reboot",
                      leftovers=[list(x) for x in leftovers])
    held = [(g["index"], int(g.get("memory_used_mib", 0))) for g in mine
            if int(g.get("memory_used_mib", 0)) > memory_max_mib
            and not (belongs is not None and any(alive(p) for p in g.get("compute_pids", ())))]
    if held:
        gpu, mib = held[0]
        more = f" (+{len(held) - 1} more)" if len(held) > 1 else ""
        return failed("gpu_released", f"gpu{gpu} {mib} MiB still in use{more}", "reboot",
                      memory_used_mib=[list(x) for x in held])
    return passed("gpu_released", f"{len(job_gpus)} GPUs free")


def _xid_key(x: dict[str, Any]) -> tuple:
    return (int(x["xid"]), int(x.get("gpu", -1)), round(float(x.get("time", 0)), 3))


def snapshot_since(before: dict[str, Any], now_wall: float, now_uptime: float) -> float:
    """The prolog snapshot's moment on the wall clock as it reads now: XIDs are dated by the
    wall clock when read, and a clock stepped during the job (NTP, an operator) would otherwise
    put them before the snapshot. The boot clock between the two hooks is the true interval."""
    up = before.get("uptime")
    if isinstance(up, (int, float)) and not isinstance(up, bool) and 0 <= up <= now_uptime:
        return now_wall - (now_uptime - float(up))
    return float(before.get("gathered_at", 0))  # a snapshot of an older version


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


def verdict_ecc(before: dict[str, Any] | None, gpus: list[dict[str, Any]]) -> Outcome:
    if before is None:
        return skipped("ecc_during_job", "no prolog snapshot for this job")
    prev = {g["index"]: g for g in before["gpus"]}
    corrected = []
    for g in gpus:
        p = prev.get(g["index"])
        if g.get("lost") and not (p or {}).get("lost"):
            return failed("ecc_during_job", f"gpu{g['index']} fell off the bus during the job",
                          "reboot")
        if p is None:
            continue
        for key, label in (("ecc_volatile_uncorrected_dram", "uncorrectable DRAM ECC"),
                           ("ecc_volatile_uncorrected_sram", "uncorrectable SRAM ECC"),
                           ("remap_uncorrectable_rows", "uncorrectable remapped rows")):
            delta = int(g.get(key, 0)) - int(p.get(key, 0))
            if delta > 0:
                return failed("ecc_during_job", f"gpu{g['index']} +{delta} {label} during the "
                              "job", "reboot", gpu=g["index"], delta=delta)
        delta = int(g.get("ecc_volatile_corrected", 0)) - int(p.get("ecc_volatile_corrected", 0))
        if delta > 0:
            corrected.append((g["index"], delta))
    if corrected:
        return warned("ecc_during_job", f"gpu{corrected[0][0]} +{corrected[0][1]} correctable "
                      "ECC during the job", corrected=[list(c) for c in corrected])
    return passed("ecc_during_job", "no new ECC errors")


def fatal_xids(cfg) -> set[int]:
    if cfg.epilog.fatal_xids:
        return set(cfg.epilog.fatal_xids)

    return set(policy("default", cfg.xid.policy_file).fatal)


# --- gathering ---------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    return boot_mod.process_start(pid) is not None


_JOB_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")


def job_owns(job: str, uid: int | None, proc_root: str = "/proc") -> Callable[[int], bool]:
    """Whether a process belongs to this job: by its cgroup (proctrack/cgroup and the cgroup
    task plugin put every step under .../job_<id>/), else, outside any job's cgroup, by the
    job owner's uid. Unknown: not the job's (this check accuses, so it needs to be sure)."""

    def owns(pid: int) -> bool:
        base = os.path.join(proc_root, str(pid))
        try:
            with open(os.path.join(base, "cgroup")) as fh:
                found = _JOB_CGROUP.search(fh.read())
            if found:
                return found.group(1) == job
            return uid is not None and os.stat(base).st_uid == uid
        except OSError:
            return False

    return owns


def _gpus(cfg, node: str) -> list[dict[str, Any]]:

    snap = nvml.gather(nvml.backend_for(cfg, node), cfg.nvml.timeout)
    out = gpu_snapshot(snap)["gpus"]
    for g, gpu in zip(out, snap.gpus, strict=True):
        g["compute_pids"] = list(gpu.compute_pids)
        g["memory_used_mib"] = gpu.memory_used_mib
    return out


def run_epilog(hook: Hook, job_gpus_env: str | None) -> tuple[int, str]:

    cfg, node, job = hook.cfg, hook.node, hook.job
    started = time.time()
    t0 = time.monotonic()
    snap_path = jobs_dir(cfg, node) / f"{job}.json"
    before = read_json(snap_path)
    before = before if isinstance(before, dict) and "gpus" in before else None
    records = []
    try:
        gpus = _gpus(cfg, node)
        mine = job_gpu_indices(job_gpus_env, (g["index"] for g in gpus))
        # No SLURM_JOB_GPUS: the job had no GPU gres, and other jobs may share the node.
        belongs = None if job_gpus_env else job_owns(job, _job_uid())
        deadline = time.monotonic() + cfg.epilog.process_grace
        limit = cfg.epilog.memory_used_max_mib
        released = verdict_released(gpus, mine, _alive, limit, belongs)
        while released.failed and time.monotonic() < deadline:
            time.sleep(0.5)
            gpus = _gpus(cfg, node)
            released = verdict_released(gpus, mine, _alive, limit, belongs)
        since = snapshot_since(before, time.time(), boot_mod.uptime()) if before else None
        outcomes = [released, verdict_xids(before, gpus, fatal_xids(cfg), since),
                    verdict_ecc(before, gpus)]
    except AirlockError as exc:  # nvml timeout or error: the GPUs cannot be vouched for
        outcomes = [failed("gpu_released", str(exc))]
    took = round(time.monotonic() - t0, 3)
    for o in outcomes:
        rec = o.to_dict()
        rec.update(duration_s=took, attempts=1)
        records.append(rec)
    run = finish.summarize(node, "epilog", "epilog", records, started)
    run["job_id"] = job
    try:
        os.unlink(snap_path)
    except OSError:
        pass
    failing = run["verdict"] == "fail"
    try:
        done = finish.finish_run(cfg, node, run, history=failing,
                                 slurm=hook.slurm() if failing else None,
                                 reason_suffix=f"(epilog job {job})")
    except AirlockError as exc:
        # Exit 1: Slurm's own "Epilog error" drain then protects the next job.
        return 1, f"FAIL {run['failed_check']}; could not set the reason: {exc}"
    for problem in done.problems:
        hook.log(problem)
    if not failing:
        return 0, f"epilog {run['verdict']} in {run['duration_s']:.2f}s"
    # Exit 0 after our own drain, so Slurm does not add its "Epilog error" on top.
    return 0, f"FAIL {run['failed_check']}: {'drained' if done.drain.changed else done.drain.why}"


def _job_uid() -> int | None:
    try:
        return int(os.environ["SLURM_JOB_UID"])
    except (KeyError, ValueError):
        return None


def body(hook: Hook) -> tuple[int, str]:
    cfg = hook.load_config()
    if not cfg.epilog.enabled:
        return 0, "epilog checks off ([epilog] enabled = false)"
    return run_epilog(hook, os.environ.get("SLURM_JOB_GPUS"))


def main(argv: list[str] | None = None) -> int:
    hook = Hook("epilog", os.environ.get("SLURMD_NODENAME", ""),
                job=os.environ.get("SLURM_JOB_ID", "?"))
    return guard(hook, body, open_rc=0, closed_rc=0)




if __name__ == "__main__":
    sys.exit(main())
