"""The old name of airlock.collective, kept so that `python -m airlock.dist` (what a
node of the previous release starts through srun) runs during a rolling upgrade."""
