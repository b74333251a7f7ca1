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


class SlurmUnreachable(SlurmError):
    """slurmctld did not answer (down, restarting, too slow), rather than refused: typed where
    scontrol's output is read (airlock.slurm.client), so that callers decide by type."""


class ReservationExists(SlurmError):
    """slurmctld refused to create a reservation and has one of that name: typed where the
    reservation is created (airlock.slurm.client.Slurm.create_reservation), from slurmctld's
    reservation table, never from the words of the refusal."""


class Unmeasured(AirlockError):
    """Airlock could not measure: its files or the shared directory, a secret, the rendezvous,
    a child it could not start. Raised where that happens; whoever catches it records no
    verdict on the node (inconclusive), never the node's FAIL."""


class OwnError(AirlockError):
    """Airlock's own trouble on this node, named by subject (see airlock.slurm.reasons.OWN_ERRORS):
    a state or log directory that cannot be written. An unproven boot fails closed on it."""

    def __init__(self, subject: str, detail: str):
        super().__init__(f"{subject} {detail}")
        self.subject = subject
        self.detail = detail


def where(exc: BaseException) -> str:
    """file:line of the innermost frame in Airlock's own code (airlock/, checks/, hooks/), for
    a drain reason that must fit on one line."""
    import traceback  # an error path: the hooks' pass path never loads it

    frames = traceback.extract_tb(exc.__traceback__)
    mine = ("/airlock/", "/checks/", "/hooks/")
    ours = [f for f in frames if any(d in f.filename.replace("\\", "/") for d in mine)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    parts = frame.filename.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{frame.lineno}"


class NotFound(AirlockError):
    """Something asked for by name does not exist: a recorded run, an on-demand check."""
