"""The ledger: what the gate cost this cluster and what it caught, from what Airlock already
stores (docs/ledger.md explains every figure, its source and its uncertainty).

  window   --since parsing and the reporting window
  load     the only module that reads anything: results, the recovery database, Slurm, sacct;
           it returns a History (plain data)
  cost     node- and GPU-hours in checks by stage and level, boot to service, hours held out
  caught   every failure and what became of it: confirmed, recurred, overturned, open
  value    the model that turns caught faults into GPU-hours saved, with its inputs shown
  advice   which registration level to run, and what would change it
  report   the document (CLI --json, GET /api/v1/ledger), its text and its Prometheus metrics

Everything below load is pure: a History in, plain data out, so unit tests give it a recorded
history and check the answer.
"""
