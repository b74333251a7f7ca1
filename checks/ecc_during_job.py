"""ecc_during_job (epilog): no new uncorrectable ECC errors or remapped rows, and no GPU off
the bus, since the prolog's snapshot of the job; new correctable errors are a warning."""

from __future__ import annotations

from typing import Any

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.job_gpus import gpus_at_end, job_or_skip
from airlock.errors import AirlockError

CHECK = "ecc_during_job"


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


def check_ecc_during_job(ctx) -> Outcome:
    skip = job_or_skip(ctx, CHECK)
    if skip is not None:
        return skip
    try:
        gpus = gpus_at_end(ctx)
    except AirlockError as exc:  # the GPUs cannot be vouched for: never "see another check"
        return failed(CHECK, str(exc))
    return verdict_ecc(ctx.job.before, gpus)
