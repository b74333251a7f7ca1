"""Which jobs get a preflight: [preflight] against the job as the prolog's environment shows it.

Pure, and cheap on purpose: the prolog asks it before every job, so it reads only the environment
slurmd gives the prolog (no Slurm call, no file) and imports nothing but the standard library.

slurmd sets SLURM_NODELIST (the allocation; not SLURM_JOB_NODELIST, which only the job itself
gets) and, from the job's credential, SLURM_JOB_NUM_NODES, SLURM_JOB_PARTITION,
SLURM_JOB_CONSTRAINTS, SLURM_JOB_COMMENT and SLURM_JOB_RESTART_COUNT. SLURM_JOB_QOS reaches the
prolog only from Slurm 26.05 on ("Add SLURM_JOB_QOS to Prolog/Epilog environment", 26.05.0rc1;
22.05's and 24.11's slurmd set none). So with a [preflight] qos filter, a job that passes every
other filter and whose prolog was not told its QOS is one whose QOS must be asked
(needs_qos): the prolog then asks slurmctld once (airlock.preflight.entry), and a job that
qualifies by nothing else never costs that call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple


class Job(NamedTuple):
    job_id: str
    nodelist: str  # Slurm's hostlist expression
    num_nodes: int  # 0 when the environment does not say
    partition: str
    qos: str
    constraints: str
    comment: str
    restarts: str = "0"  # SLURM_JOB_RESTART_COUNT: a requeued job meets afresh

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Job:
        try:
            num = int(env.get("SLURM_JOB_NUM_NODES", "") or 0)
        except ValueError:
            num = 0
        nodelist = env.get("SLURM_NODELIST", "") or env.get("SLURM_JOB_NODELIST", "")
        return cls(env.get("SLURM_JOB_ID", ""), nodelist, max(num, 0),
                   env.get("SLURM_JOB_PARTITION", ""), env.get("SLURM_JOB_QOS", ""),
                   env.get("SLURM_JOB_CONSTRAINTS", ""), env.get("SLURM_JOB_COMMENT", ""),
                   env.get("SLURM_JOB_RESTART_COUNT", "") or "0")


def count_nodes(nodelist: str) -> int:
    """Nodes in a hostlist expression without expanding it ("n[1-3,7],g01" -> 5); 0 when the
    expression is not one this counter reads (the plan expands it properly later)."""
    total = 0
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", nodelist):
        n = 1
        for group in re.findall(r"\[([^\]]*)\]", part):
            size = 0
            for item in group.split(","):
                lo, _, hi = item.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    return 0
                size += (int(hi) - int(lo) + 1) if hi else 1
                if hi and int(hi) < int(lo):
                    return 0
            n *= size
        total += n
    return total


def _features(constraints: str) -> set[str]:
    """The feature names in a --constraint expression ("a100&ib|fast*2" -> {a100, ib, fast})."""
    return {f for f in re.split(r"[^A-Za-z0-9_.\-]+", re.sub(r"\*\d+", "", constraints)) if f}


def qualifies(section: Any, job: Job) -> tuple[bool, str]:
    """(whether the job gets a preflight, why) under [preflight]
    (airlock.config.sections.preflight)."""
    if not section.enabled:
        return False, "preflight off"
    nodes = job.num_nodes or count_nodes(job.nodelist)
    if nodes < section.min_nodes:
        return False, f"{nodes} node(s) < min_nodes {section.min_nodes}"
    if section.partitions and job.partition not in section.partitions:
        return False, f"partition {job.partition or '?'} not in {','.join(section.partitions)}"
    if section.qos and job.qos not in section.qos:
        return False, f"QOS {job.qos or '(not given to the prolog)'} not in {','.join(section.qos)}"
    wants = []
    if section.opt_in_feature:
        wants.append(section.opt_in_feature in _features(job.constraints))
    if section.opt_in_comment:
        wants.append(section.opt_in_comment in job.comment.replace(",", " ").split())
    if wants and not any(wants):
        return False, "the job did not opt in"
    return True, f"{nodes} nodes"


def needs_qos(section: Any, job: Job) -> bool:
    """Whether only the job's QOS, which its prolog was not told, decides if it qualifies: a
    qos filter is set, the environment has no SLURM_JOB_QOS, and every other filter passes."""
    if not section.qos or job.qos:
        return False
    return qualifies(section, job._replace(qos=section.qos[0]))[0]


def qos_of(show_job: str) -> str:
    """The QOS in `scontrol -o show job ID`'s line ("" when it names none)."""
    m = re.search(r"(?:^|\s)QOS=(\S+)", show_job)
    return m.group(1) if m and m.group(1) not in ("(null)", "N/A") else ""
