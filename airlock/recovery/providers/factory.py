"""The provider a [recovery] section asks for."""

from __future__ import annotations

from airlock.recovery.providers.aws_hyperpod import HyperpodProvider
from airlock.recovery.providers.base import Provider, Recorder, no_record
from airlock.recovery.providers.command import Command
from airlock.recovery.providers.http import HttpProvider
from airlock.recovery.providers.slurm import HyperpodSlurm, SlurmPower, SlurmReboot


def make(cfg, slurm, record: Recorder = no_record) -> tuple[Provider, Provider]:
    """(rebooter, replacer) for this config."""
    settings = cfg.recovery
    name = settings.provider
    if name == "http":
        replacer: Provider = HttpProvider(settings.http, record)
    elif name == "command":
        replacer = Command(settings.command.path, settings.command.timeout)
    elif name == "aws-hyperpod":
        replacer = HyperpodProvider.from_settings(settings.aws_hyperpod, record)
    elif name == "hyperpod-slurm":
        replacer = HyperpodSlurm(slurm)
    elif name == "slurm-power":
        replacer = SlurmPower(slurm)
    else:
        replacer = Provider()
    rebooter = SlurmReboot(slurm) if settings.reboot_via == "slurm" else replacer
    return rebooter, replacer

