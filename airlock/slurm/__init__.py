"""Slurm: the client, slurm.conf facts, reasons, and the one drain/resume path."""
