"""The reporting window: `--since 30d` and its kin."""

from __future__ import annotations

import re

from airlock.errors import AirlockError

UNITS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_S = 400 * 86400.0  # a history older than this is beyond what any store keeps
MONTH_S = 30 * 86400.0  # "per month" in every figure


class BadWindow(AirlockError):
    """--since is not a duration Airlock understands."""


def parse_since(text: str) -> float:
    """Seconds back from now that `text` (e.g. 30d, 12h, 90m, 2w) names."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([mhdw])\s*", text or "")
    if not m:
        raise BadWindow(f"--since: {text!r} is not a duration (use a number and m, h, d or w, "
                        "e.g. 30d, 12h, 90m)")
    seconds = float(m.group(1)) * UNITS[m.group(2)]
    if not 0 < seconds <= MAX_S:
        raise BadWindow(f"--since: {text!r} must be more than 0 and at most 400d")
    return seconds
