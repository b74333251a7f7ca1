"""Job preflight: before a multi-node job's user code runs, its nodes prove their collective
together from their prologs, and only a culprit is drained (docs/guide.md, "Job preflight").

  policy   which jobs qualify, from [preflight] and the prolog's environment only (pure; a job
           that does not qualify costs no Slurm call and no torch)
  plan     the job's members, its leader and its meeting folder, from the allocation (pure)
  meet     the meeting: every member announces itself in the shared directory, the leader
           writes the group's secret and members, then airlock.groups.batch drives the all-reduce
           rounds and the culprit search (airlock.groups.culprit) exactly as for a registration
           batch
  judge    one member's outcome from the batch's verdict (pure): pass, culprit or inconclusive
  record   the run document, its timings and the running totals for the metrics
  entry    the prolog's one call: the above in order, inside the budget; then the drain of a
           culprit, the requeue by the members that passed, or the inconclusive policy
  doctor   what `airlock doctor` says of the Slurm settings a preflight needs (pure)

The prolog imports only entry and policy until a job qualifies.
"""
