"""The all-reduce pattern: what each rank sends and what every element must sum to, exactly.

Rank r sends (i + r) % m at element i; the sums are small integers, exact in the dtype, so every
rank can check every element of the result and read back what it sent (a wrong sum is told apart
from a rank that sent wrong data). Pure maths: no torch import here.
"""

from __future__ import annotations

# Largest integer each dtype holds exactly: the verified sums must stay below it.
EXACT = {"fp32": 1 << 24, "fp16": 1 << 11, "bf16": 1 << 8}
ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}


def pattern_modulus(world_size: int, dtype: str) -> int:
    """Rank r sends (i + r) % m at element i. The largest m <= 8 whose worst-case sum
    world_size * (m - 1) stays exact in dtype; at least 2 so every element still varies."""
    limit = EXACT[dtype]
    m = min(8, limit // max(world_size, 1) + 1)
    if m < 2:
        raise ValueError(f"{world_size} ranks overflow exact {dtype} sums; use fp32")
    return m


def contribution_values(rank: int, m: int) -> list[int]:
    """One period of rank's data: element i holds (i + rank) % m."""
    return [(k + rank) % m for k in range(m)]


def expected_values(world_size: int, m: int) -> list[int]:
    """One period of the exact sum over every rank's contribution."""
    full, part = divmod(world_size, m)
    return [full * (m * (m - 1) // 2) + sum((k + r) % m for r in range(part)) for k in range(m)]


def tiled(torch, period: list[int], numel: int, dtype, device):
    """The period repeated to numel elements (a copy at memory speed, no per-element math)."""
    reps = -(-numel // len(period))
    return torch.tensor(period, dtype=dtype, device=device).repeat(reps)[:numel]


def human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"



def bus_factor(world_size: int) -> float:
    return 2 * (world_size - 1) / world_size if world_size else 0.0

