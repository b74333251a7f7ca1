"""All-reduce sweep over torch.distributed: the per-node launcher, the per-rank worker, and how
node reports combine. The intra-node check (checks/allreduce.py) runs one node; the
on-demand group check runs one launcher per node (srun) into the same process group.

Process model
-------------
One launcher per node forks one process per local rank (local rank i uses cuda:i with NCCL;
without GPUs, N ranks share the CPU with gloo). Global rank = rank_offset + local rank, in a
world of world_size. The rendezvous (airlock.collective.rendezvous) is hosted by a launcher, not by
a
rank, so it outlives a crashed rank and on a hang the launcher reads how far each rank got: for
one node a FileStore in a fresh 0700 directory (nothing on the network); for several, a TCPStore
on the host launcher's loopback behind a relay on master_addr:master_port that admits only
members proving the run's secret (--secret-file, root-only, 0600).

Ranks are forked, not spawned: they inherit the imported torch (importing it costs seconds per
process on a small node). The launcher never initialises CUDA before forking (device counts come
from NVML through torch.cuda.device_count()), so each rank initialises CUDA for itself.

The ranks live in a process group of their own, so a hard timeout kills every one of them at
once (SIGKILL to the group), then checks that none is left. Each rank also dies with its
launcher (PR_SET_PDEATHSIG) and on an alarm a little after the timeout, so nothing outlives a
launcher that was itself killed (Slurm's proctrack/pgid would not see the ranks' group).

The sweep, per message size: a verified all-reduce (each rank sends small integers whose sum is
exact in the dtype; every rank checks every element of the result, and reads back what it sent,
so a wrong sum can be told from a rank that sent wrong data), then warm-up and a timed loop.
Each rank reports its loop time and, per iteration, the time it spent outside the collective
(a straggler spends its time outside while everyone else waits inside).

CLI (one line of JSON on stdout, prefixed `AIRLOCK-DIST `; exit 0 done, 1 error, 3 timeout):

  python -m airlock.collective worker --master-addr A --master-port P --world-size W
      --rank-offset R --local-ranks N [--host-store] [--secret-file PATH] [--node NAME]
      [--backend auto|nccl|gloo]
      [--sizes BYTES,BYTES,...] [--iters K] [--warmup K] [--dtype fp32|bf16|fp16]
      [--timeout SECONDS] [--level standard|deep] [--faults SPEC]

Modules: pattern (the exact-sum maths), params (what a sweep is asked to do), rank (one rank),
launcher (fork, process group, watchdog), rendezvous (stores and the secret-checking relay),
report (combining node reports), remote (launching a worker elsewhere and reading its answer),
__main__ (the CLI).
"""

from airlock.collective.launcher import launch, local_gpu_count, resolve_backend, run_local
from airlock.collective.params import KIB, SweepParams, params_for, parse_sizes
from airlock.collective.pattern import (
    ELEMENT,
    EXACT,
    bus_factor,
    contribution_values,
    expected_values,
    human_bytes,
    pattern_modulus,
    tiled,
)
from airlock.collective.remote import parse_report, worker_argv
from airlock.collective.report import SizeResult, Sweep, combine

__all__ = [
    "ELEMENT", "EXACT", "KIB", "SizeResult", "Sweep", "SweepParams", "bus_factor", "combine",
    "contribution_values", "expected_values", "human_bytes", "launch", "local_gpu_count",
    "params_for", "parse_report", "parse_sizes", "pattern_modulus", "resolve_backend",
    "run_local", "tiled", "worker_argv",
]
