"""[ledger]: the inputs of `airlock ledger`'s value model (airlock/ledger/value.py), each shown
beside the figures it makes. Ranges are [low, high]: the balance is a range because its inputs
are; docs/ledger.md gives each default's source."""

from __future__ import annotations

import math

from airlock.config.sections import Section, setting

JOB_SOURCES = ("auto", "sacct", "config")
# (key, lowest allowed, highest allowed): a range outside these is a typo, not a cluster.
RANGES = (
    ("job_gpus", 1.0, 1_000_000.0),
    ("job_hours", 0.01, 8760.0),
    ("checkpoint_minutes", 1.0, 10_080.0),
    ("restart_minutes", 0.0, 1440.0),
    ("utilization", 0.0, 1.0),
)


class LedgerSection(Section):
    jobs: str = setting(
        "auto",
        'where job sizes and durations come from: "sacct" (slurmdbd required), "config" '
        '(job_gpus, job_hours below), "auto" (sacct when slurmdbd answers, else config)')
    job_gpus: list[float] = setting(
        factory=lambda: [8.0, 256.0],
        doc="[low, high] GPUs of a typical job, when not from sacct")
    job_hours: list[float] = setting(
        factory=lambda: [1.0, 24.0],
        doc="[low, high] hours a typical job runs, when not from sacct")
    checkpoint_minutes: list[float] = setting(
        factory=lambda: [30.0, 180.0],
        doc="[low, high] minutes between a job's checkpoints (a crash loses half on average)")
    restart_minutes: list[float] = setting(
        factory=lambda: [10.0, 30.0],
        doc="[low, high] minutes a crashed job needs to be running again (requeue, load)")
    utilization: list[float] = setting(
        factory=lambda: [0.6, 0.95],
        doc="[low, high] share of node time allocated to jobs, when not from sacct "
            "(the chance that a bad node's next job was waiting)")
    recur_window_hours: float = setting(
        168.0,
        "a failure of the same check within this many hours after a reboot means the reboot "
        "did not clear it (recurred)")
    gpus_per_node: int = setting(
        8, "GPUs per node when Slurm's GRES does not say")
    failure_rates: dict[str, float] = setting(
        factory=dict,
        doc="unexpected interruptions per million GPU-hours, by class, replacing the public "
            "defaults (docs/ledger.md; e.g. {gpu = 7.0, hbm = 3.4})")

    def validate(self) -> None:
        if self.jobs not in JOB_SOURCES:
            raise ValueError(f"jobs: must be one of {', '.join(JOB_SOURCES)}, got {self.jobs!r}")
        for key, low, high in RANGES:
            pair = getattr(self, key)
            if len(pair) != 2:
                raise ValueError(f"{key}: must be [low, high], got {pair}")
            if not all(math.isfinite(v) and low <= v <= high for v in pair):
                raise ValueError(f"{key}: must be between {low:g} and {high:g}, got {pair}")
            if pair[0] > pair[1]:
                raise ValueError(f"{key}: low {pair[0]:g} is above high {pair[1]:g}")
        if not (math.isfinite(self.recur_window_hours) and 0 < self.recur_window_hours <= 8760):
            raise ValueError("recur_window_hours: must be between 0 and 8760, got "
                             f"{self.recur_window_hours}")
        if not 1 <= self.gpus_per_node <= 1024:
            raise ValueError(f"gpus_per_node: must be between 1 and 1024, got "
                             f"{self.gpus_per_node}")
        for name, rate in self.failure_rates.items():
            if not (math.isfinite(rate) and 0 <= rate <= 1e6):
                raise ValueError(f"failure_rates.{name}: must be between 0 and 1e6 per million "
                                 f"GPU-hours, got {rate}")
