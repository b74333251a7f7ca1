"""Errors that reach an operator as one clear line, never as a traceback."""


class AirlockError(Exception):
    """Base for every error Airlock reports to a person; str() is the whole message."""

    exit_code = 2


class ConfigError(AirlockError):
    """The config file is missing, unreadable or invalid."""


class SlurmError(AirlockError):
    """scontrol/sinfo is missing, timed out, failed, or printed something we cannot trust."""


class NodeNotFound(SlurmError):
    """Slurm does not know the node name."""
