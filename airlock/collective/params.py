"""What one all-reduce sweep is asked to do (SweepParams), derived from [allreduce], and the
names the launcher and its ranks share (store keys, exit codes)."""

from __future__ import annotations

from dataclasses import dataclass

from airlock.collective.pattern import EXACT
from airlock.errors import ConfigError

KEY = "airlock/"  # the rendezvous store's keys for progress and completion
EXIT_OK, EXIT_ERROR, EXIT_TIMEOUT = 0, 1, 3
# The launcher could not measure at all (errors.Unmeasured: the run's secret, the rendezvous):
# no report, and no verdict on this node.
EXIT_UNMEASURED = 4
KIB = 1024


@dataclass
class SweepParams:
    sizes: list[int]  # message sizes, bytes
    iters: int = 20
    warmup: int = 5
    dtype: str = "fp32"
    backend: str = "auto"  # nccl when every local rank has a GPU, else gloo
    timeout: float = 120.0  # hard limit on this node's whole run, seconds

    def validate(self) -> None:
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ValueError("sizes: need at least one positive message size")
        if self.iters <= 0 or self.warmup < 0:
            raise ValueError("iters must be > 0 and warmup >= 0")
        if self.dtype not in EXACT:
            raise ValueError(f"dtype: must be one of {', '.join(EXACT)}, got {self.dtype!r}")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend: must be auto, nccl or gloo, got {self.backend!r}")
        if not self.timeout > 0:
            raise ValueError("timeout: must be > 0")


def params_for(section, on_gpu: bool, level: str) -> SweepParams:
    """The sweep for this node from an [allreduce] section: GPU sizes and iterations, or the
    small CPU ones; level deep runs more iterations."""
    if on_gpu:
        iters = section.deep_iters if level == "deep" else section.iters
        return SweepParams([s * KIB for s in section.sizes_kib], iters, section.warmup,
                           section.dtype, section.backend, section.timeout)
    iters = section.cpu_iters * (2 if level == "deep" else 1)
    return SweepParams([s * KIB for s in section.cpu_sizes_kib], iters, section.cpu_warmup,
                       section.dtype, section.backend, section.timeout)


def parse_sizes(text: str) -> list[int]:
    out = []
    for item in text.split(","):
        item = item.strip().upper()
        mult = 1
        for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
            if item.endswith(suffix):
                item, mult = item[:-1], m
        if not item.isdigit():
            raise ConfigError(f"--sizes: {text!r} is not a list of sizes like 64K,1M,1G")
        out.append(int(item) * mult)
    return out

