"""[preflight]: a multi-node job's nodes prove their collective together from their prologs
(airlock/preflight/). Self-contained: validate() checks every key here."""

from __future__ import annotations

import math

from airlock.config.sections import Section, setting

ON_INCONCLUSIVE = ("run", "hold")
LEVELS = ("collective", "collective+gemm")


class PreflightSection(Section):
    enabled: bool = setting(
        False,
        "run a preflight in the prologs of the jobs that qualify (off: no job pays anything)")
    min_nodes: int = setting(2, 'a job qualifies only with at least this many nodes (>= 2)')
    partitions: list[str] = setting(
        factory=list, doc='a job qualifies only in one of these partitions; [] = any partition')
    qos: list[str] = setting(
        factory=list,
        doc="a job qualifies only with one of these QOS ([] = any); read from the prolog's "
            "SLURM_JOB_QOS (Slurm 26.05+), or before 26.05 asked of slurmctld once "
            "(`scontrol show job`) for a job that passes every other filter; a job whose QOS "
            "cannot be learned gets no preflight")
    opt_in_feature: str = setting(
        "",
        'when set, a job qualifies only when its --constraint names this feature (the user '
        'opts in); "" = no opt-in needed')
    opt_in_comment: str = setting(
        "",
        'when set, a job qualifies only when this word is in its --comment (the user opts in); '
        'with opt_in_feature too, either one opts in; "" = no opt-in needed')
    level: str = setting(
        "collective",
        '"collective": the job\'s all-reduce only; "collective+gemm": first a short verified '
        'GEMM on each of the node\'s GPUs (the burn-in\'s, judged against the profile\'s TFLOPS '
        'floors; CPU stand-ins below the floor only warn), a wrong result failing that node '
        'alone ("airlock: FAIL preflight gemm ...")')
    budget: float = setting(
        90.0,
        "seconds a preflight may add to a job's start, the culprit search included; keep it "
        "below slurm.conf's PrologEpilogTimeout")
    rendezvous_timeout: float = setting(
        30.0,
        "seconds the job's nodes wait for each other's prologs; a member later than this leaves "
        "the preflight inconclusive (no one is drained)")
    round_timeout: float = setting(
        30.0, 'one all-reduce of the preflight (the whole job, or a part of it), seconds')
    on_inconclusive: str = setting(
        "run",
        'what a job whose preflight saw nothing does: "run" (its nodes are still proven by '
        'registration and the periodic checks; the run document says the preflight did not '
        'see it) or "hold" (requeued and held, `scontrol requeuehold`, for its owner or an '
        'admin to release; no node is drained either way)')

    def validate(self) -> None:
        if isinstance(self.min_nodes, bool) or not isinstance(self.min_nodes, int) \
                or self.min_nodes < 2:
            raise ValueError("min_nodes: must be an integer >= 2 (one node has no collective)")
        for name in ("partitions", "qos"):
            values = getattr(self, name)
            if not all(isinstance(v, str) and v.strip() and " " not in v for v in values):
                raise ValueError(f"{name}: must be a list of names without spaces")
        for name in ("opt_in_feature", "opt_in_comment"):
            value = getattr(self, name)
            if value != value.strip() or " " in value or "," in value:
                raise ValueError(f"{name}: must be one word, got {value!r}")
        for name in ("budget", "rendezvous_timeout", "round_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a finite number > 0, got {value}")
        if self.rendezvous_timeout + self.round_timeout > self.budget:
            raise ValueError(
                f"budget: {self.budget:g}s leaves no room for one round: it must be at least "
                f"rendezvous_timeout + round_timeout ({self.rendezvous_timeout:g} + "
                f"{self.round_timeout:g})")
        if self.level not in LEVELS:
            raise ValueError(f"level: must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.on_inconclusive not in ON_INCONCLUSIVE:
            raise ValueError(f"on_inconclusive: must be one of {', '.join(ON_INCONCLUSIVE)}, "
                             f"got {self.on_inconclusive!r}")
