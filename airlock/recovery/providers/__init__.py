"""Recovery providers: who carries out a reboot or a replacement (see base for the interface).

One module per provider (slurm: scontrol reboot, HyperPod's Slurm reasons, CLOUD power-cycling;
command; http; aws_hyperpod) and the factory that builds the pair a [recovery] section asks for.
"""

from airlock.recovery.providers.base import (
    ERROR,
    ISSUED,
    REFUSED,
    ActionTarget,
    Provider,
    Recorder,
    Result,
    dumps,
    mark,
    no_record,
    recover_reason,
)
from airlock.recovery.providers.command import Command
from airlock.recovery.providers.factory import make
from airlock.recovery.providers.slurm import HyperpodSlurm, SlurmPower, SlurmReboot

__all__ = [
    "ERROR", "ISSUED", "REFUSED", "ActionTarget", "Command", "HyperpodSlurm", "Provider",
    "Recorder", "Result", "SlurmPower", "SlurmReboot", "dumps", "make", "mark", "no_record",
    "recover_reason",
]
