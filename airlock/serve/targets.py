"""How many nodes a hostlist expression names, counted without expanding it.

python-hostlist (airlock.slurm.client.expand) bounds each comma part at 100,000 names, not the
whole:
379 bytes of `x0[0-99999],...,x29[0-99999]` made the service build three million names (16 s,
1.5 GB; issue 26). The service counts an on-demand target expression first, by python-hostlist's
own grammar (parts split at commas outside brackets; in a part, each [range list] multiplies the
names by the sum of its ranges' sizes), and refuses one that names more nodes than Slurm lists
before anything expands it. Duplicates are counted, which only errs on the side of refusing.
"""

from __future__ import annotations

import re

_PART = re.compile(r"([^,\[]*)(\[[^\]]*\])?(.*)")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


class BadHostlist(ValueError):
    """Not a hostlist expression python-hostlist would expand: why."""


def _split(expr: str) -> list[str]:
    parts, part, level = [], "", 0
    for c in expr + ",":
        if c == "," and level == 0:
            if part:
                parts.append(part)
            part = ""
            continue
        part += c
        level += (c == "[") - (c == "]")
        if level > 1:
            raise BadHostlist("nested brackets")
        if level < 0:
            raise BadHostlist("unbalanced brackets")
    if level:
        raise BadHostlist("unbalanced brackets")
    return parts


def _ranges(text: str) -> int:
    total = 0
    for item in text.split(","):
        m = _RANGE.fullmatch(item)
        if not m:
            raise BadHostlist(f"bad range {item[:20]!r}")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low:
            raise BadHostlist(f"range {item[:20]!r} starts after it stops")
        total += high - low + 1
    return total


def count(expr: str, limit: int) -> int:
    """The names expr holds (duplicates included), or the first count found above limit (the
    counting stops there). BadHostlist when it is not a hostlist expression."""
    total = 0
    for part in _split(expr):
        names, rest = 1, part
        while rest:
            m = _PART.fullmatch(rest)
            if m is None:
                raise BadHostlist(f"cannot read {rest[:20]!r}")
            prefix, brackets, rest = m.groups()
            if not prefix and not brackets:  # cannot happen after _split; never loop on it
                raise BadHostlist(f"cannot read {rest[:20]!r}")
            if brackets:
                names *= _ranges(brackets[1:-1])
                if names > limit:
                    return total + names
        total += names
        if total > limit:
            return total
    return total
