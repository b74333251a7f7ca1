"""What a check gets: config, node, level, active fault switches, and lazily the NVML snapshot
and the SKU profile (gathered once per run, shared by every check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airlock.hw import faults as faults_mod
from airlock.hw import nvml, profiles


@dataclass
class JobEnd:
    """What the epilog's checks know of the job that just ended."""

    job_id: str
    gpus_env: str | None  # SLURM_JOB_GPUS: the job's GPUs ("0,2"); None when it had no GRES
    uid: int | None  # SLURM_JOB_UID
    before: dict[str, Any] | None  # the prolog's snapshot (airlock.records.job_snapshot)
    # The GPUs as read at the job's end, shared by the three checks once gpu_released has
    # waited for exiting processes (None until read), and why they could not be read.
    gpus: list[dict[str, Any]] | None = None
    unreadable: str = ""


class Context:
    def __init__(self, cfg: Any, node: str, level: str = "quick", attempt: int = 1,
                 faults: dict[str, str] | None = None, job: JobEnd | None = None):
        self.cfg, self.node, self.level, self.attempt = cfg, node, level, attempt
        self.faults: dict[str, str] = dict(faults or {})
        # What the run gathers once and every check shares; each is filled on first use.
        self._snapshot: nvml.Snapshot | None = None
        self._profile: profiles.Profile | None = None
        # The node's Slurm record (airlock.hw.profiles.node_facts): whether it was asked for,
        # what came back (None: Slurm did not answer), and why not.
        self.slurm_facts_read = False
        self.slurm_facts: Any = None
        self.slurm_facts_error = ""
        self.pci_gpus: list[str] | None = None  # the NVIDIA GPUs on the PCI bus
        self.job = job  # the job that just ended (the epilog level only)

    @classmethod
    def create(cls, cfg: Any, node: str, level: str = "quick") -> Context:
        return cls(cfg=cfg, node=node, level=level, faults=faults_mod.active(cfg, node))

    @property
    def snapshot(self) -> nvml.Snapshot:
        if self._snapshot is None:
            backend = nvml.backend_for(self.cfg, self.node)
            self._snapshot = nvml.gather(backend, self.cfg.nvml.timeout)
        return self._snapshot

    @property
    def profile(self) -> profiles.Profile:
        if self._profile is None:
            # from config (node, partition, feature), else detected
            self._profile = profiles.for_context(self)
        return self._profile

    @property
    def profile_name(self) -> str:
        """The profile's name when a check chose one during the run ("" when none needed it)."""
        return self._profile.name if self._profile is not None else ""

    def know_slurm_node(self, node: Any) -> None:
        """The node's Slurm record as the caller just read it (the registration suite, when it
        confirmed isolation): the checks use it rather than ask a controller that may be gone
        by the time they run (profiles.node_facts)."""
        self.slurm_facts_read, self.slurm_facts, self.slurm_facts_error = True, node, ""

    def forget_snapshot(self) -> None:
        """The next read of the snapshot asks NVML again (a confirmation re-reads the hardware)."""
        self._snapshot = None

    def forget_slurm_facts(self) -> None:
        """The next read of the node's Slurm record asks Slurm again."""
        self.slurm_facts_read, self.slurm_facts, self.slurm_facts_error = False, None, ""

    def fault(self, name: str) -> str | None:
        return self.faults.get(name)
