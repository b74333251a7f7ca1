"""Development tooling, not the product core: a real Slurm cluster on one machine (cluster),
a loopback cloud API for the recovery service (cloud), and the demo that uses both (demo)."""
