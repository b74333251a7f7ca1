"""The NVML snapshot a check reads, or the outcome it returns instead.

The snapshot is taken once per run (Context.snapshot) and shared by every check that needs it.
Each check that needs NVML reports NVML's failure itself (the `nvml` check, checks/nvml_checks.py,
is not the only one to), so an unreadable NVML never reads as a pass.
"""

from __future__ import annotations

from airlock.checks.base import Outcome, Verdict
from airlock.hw.nvml import NvmlError, NvmlTimeout, Snapshot


def snapshot_or_outcome(ctx, check: str) -> Snapshot | Outcome:
    if ctx.attempt > 1:
        ctx.forget_snapshot()  # a confirmation must re-read the hardware
    try:
        return ctx.snapshot
    except NvmlError as exc:
        # Each check that needs NVML reports its failure itself: a skip pointing at `nvml`
        # would pass the node whenever `nvml` is observed. (A hung driver is not waited for
        # again: nvml.gather refuses at once while the earlier call is still stuck.)
        return gather_failed(exc, check)


def gather_failed(error: BaseException, check: str = "nvml") -> Outcome:
    """`check`'s FAIL when NVML could not be read; a hung driver is a timeout, to reboot."""
    # The reason reads "airlock: FAIL nvml timeout: ..." (not "nvml nvml timeout").
    text = str(error).removeprefix("nvml ") if check == "nvml" else str(error)
    hung = isinstance(error, NvmlTimeout)  # the driver hung: never waited for again
    return Outcome(check, Verdict.FAIL, text, None, "reboot" if hung else "", timed_out=hung)
