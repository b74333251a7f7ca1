"""On-demand group checks: `airlock check --nodes EXPR | --partition P | --feature F`.

How it works, and why:
* A Slurm maintenance reservation over the targets is both the isolation and the lock. Creating
  it takes effect at once (no new job lands on a target; running jobs go on, IGNORE_JOBS) and
  slurmctld refuses a second reservation of the same name, so two on-demand runs can never
  interleave, whichever host they start from. Its Duration bounds the damage if we die.
* Targets still running a job are waited for up to --wait-jobs, then dropped from the
  reservation and reported as skipped (busy); their jobs are never touched.
* The checks run on the targets through Slurm's own launch path: `srun --reservation` starts one
  worker per node (`python -m airlock.ondemand node-worker`), in parallel, each running the level
  locally and printing its run as JSON.
* Then a multi-node all-reduce across the nodes that passed (torch.distributed: NCCL on GPUs,
  gloo on CPU; rendezvous on the first target). If it fails or is slow, airlock.groups.culprit
  splits the group and re-pairs suspects with known-good nodes, so only the bad node(s) are
  blamed.
* A node is drained (`airlock: FAIL <check> <detail>`, by the drain policy in
  airlock.slurm.drains) only on a verdict: its own worker's FAIL, or a culprit confirmed by the
  group search. A node that gave no verdict of its own (srun could not launch on it, a
  timeout, an srun error) is inconclusive and never drained: Airlock's or Slurm's trouble must
  not take a healthy node out of service.
* The reservation is deleted, which returns the passing nodes to service. Exit 0: all passed;
  1: some failed; 3: nothing failed but some nodes were skipped or inconclusive.

One concern a module:

  run          the orchestration: targets, reservation, the level, the group test, the drains
  targets      which nodes an expression names, and which of them can be checked now
  report       GroupTarget and GroupReport (what airlock.cli.check prints), the exit codes
  reservation  the Slurm reservation: the lock and the isolation (Busy when another run has it)
  launch       srun/scancel of a worker on a set of nodes, inside the reservation
  group        the multi-node all-reduce tests, their rendezvous secret and the culprit search
  worker       what srun runs on each node (`python -m airlock.ondemand node-worker|...`)
  __main__     that command line's entry point

This file imports nothing: `python -m airlock.ondemand` on a node loads only the worker.
"""
