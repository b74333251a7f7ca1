"""Device memory pattern test over a configurable share of each device's free memory.

Every device is tested at once (a thread each). The region is allocated as int32 chunks; each
pattern writes the whole region first and reads it back after, so a write that lands in the wrong
place (an address fault) is seen too:

* walking_ones: every word holds 1 << bit, for each of the 32 bits (stuck data bits);
* random: seeded random words, regenerated from the seed to compare (no second copy needed);
* address: every word holds its own index in the region (address lines, aliasing).

A bad word is reported as (device, byte offset in the tested region, expected, got), the first
[memtest] max_report of them with the total count. An allocation that fails is named as such.
Without GPUs the same code runs on [memtest] cpu_devices small CPU buffers, so tests run it for
real.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from airlock.checks.base import Outcome, failed, passed
from airlock.checks.device_plan import plan as device_plan
from airlock.checks.device_plan import unusable
from airlock.config.sections.checks import MemtestSection
from airlock.hw.faults import device_arg

CHECK = "memtest"
SEED = 4321
MIB = 1 << 20
CORRUPT_WORD = 1000  # memtest_corrupt flips bit 5 of this word (or the last one, if fewer)


@dataclass(frozen=True)
class BadWord:
    device: str
    pattern: str
    offset: int  # bytes from the start of the tested region
    expected: int  # the 32-bit word, unsigned
    got: int
    address: int = 0  # the device virtual address, when known

    def describe(self) -> str:
        return (f"offset 0x{self.offset:x} expected 0x{self.expected:08x} "
                f"got 0x{self.got:08x} ({self.pattern})")


@dataclass(frozen=True)
class DeviceMem:
    device: str
    bytes_tested: int = 0
    passes: int = 0
    bad_words: int = 0  # total over every pass
    bad: tuple[BadWord, ...] = ()  # the first few
    seconds: float = 0.0
    error: str = ""


def verdict_memtest(results: list[DeviceMem]) -> Outcome:
    figures: dict[str, Any] = {
        "devices": [r.device for r in results],
        "tested_mib": {r.device: round(r.bytes_tested / MIB, 1) for r in results},
        "bad_words": {r.device: r.bad_words for r in results if r.bad_words},
        "bad": [{"device": b.device, "offset": b.offset, "expected": b.expected, "got": b.got,
                 "pattern": b.pattern, "address": b.address}
                for r in results for b in r.bad],
    }
    if not results:
        return failed(CHECK, "no devices ran", **figures)
    for r in results:
        if r.error:
            return failed(CHECK, f"{r.device} {r.error}", "reboot", **figures)
    for r in results:
        if r.bad_words:
            first = r.bad[0].describe() if r.bad else ""
            return failed(CHECK, f"{r.device} {r.bad_words} bad words, first at {first}",
                          "replace", **figures)
    total = sum(r.bytes_tested for r in results)
    return passed(CHECK, f"{len(results)} devices, {total / MIB:.0f} MiB clean",
                  **figures)


# --- gathering ----------------------------------------------------------------------------------
def _variants(pattern: str) -> list[int]:
    return list(range(32)) if pattern == "walking_ones" else [0]


def _as_int32(torch, x):
    """int64 -> int32 keeping the low 32 bits (two's complement), exactly."""
    return ((x + (1 << 31)) % (1 << 32) - (1 << 31)).to(torch.int32)


class _Tester(threading.Thread):
    def __init__(self, torch, index: int, dev: str, nbytes: int, chunk_bytes: int,
                 patterns: list[str], rounds: int, faults: dict[str, str], max_report: int):
        super().__init__(name=f"memtest-{dev}", daemon=True)
        self.torch, self.index, self.dev = torch, index, dev
        self.nbytes, self.chunk_bytes, self.patterns = nbytes, chunk_bytes, patterns
        self.rounds, self.faults, self.max_report = rounds, faults, max_report
        self.result: DeviceMem | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.result = self._run()
        except BaseException as exc:  # a device error is this device's verdict
            msg = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:120]
            self.result = DeviceMem(self.dev, error=msg)
        self.result = DeviceMem(**{**self.result.__dict__,
                                   "seconds": round(time.monotonic() - started, 3)})

    def _allocate(self) -> list[Any]:
        torch, dev = self.torch, "cpu" if self.dev.startswith("cpu") else self.dev
        words = self.chunk_bytes // 4
        count = max(1, self.nbytes // self.chunk_bytes)
        alloc = device_arg(self.faults.get("alloc_fail"), 0)
        try:
            if alloc and alloc[0] == self.index:
                raise MemoryError("injected alloc_fail")
            return [torch.empty(words, dtype=torch.int32, device=dev) for _ in range(count)]
        except (MemoryError, RuntimeError) as exc:
            why = str(exc).splitlines()[0][:80]
            raise _AllocError(f"allocation of {count * self.chunk_bytes // MIB} MiB failed: "
                              f"{why}") from None

    def _run(self) -> DeviceMem:
        try:
            chunks = self._allocate()
        except _AllocError as exc:
            return DeviceMem(self.dev, error=str(exc))
        corrupt = device_arg(self.faults.get("memtest_corrupt"), 0)
        pending_corruption = bool(corrupt and corrupt[0] == self.index)
        bad: list[BadWord] = []
        bad_total = passes = 0
        for rnd in range(self.rounds):
            for pattern in self.patterns:
                for variant in _variants(pattern):
                    seed = SEED + rnd * 7919
                    for ci, buf in enumerate(chunks):
                        self._write(buf, ci, pattern, variant, seed)
                    if pending_corruption:  # memtest_corrupt: one word reads back wrong
                        w = min(CORRUPT_WORD, chunks[0].numel() - 1)
                        chunks[0][w] ^= 32
                        pending_corruption = False
                    found = self._verify(chunks, pattern, variant, seed, bad)
                    bad_total += found
                    passes += 1
        self._sync()
        del chunks
        return DeviceMem(self.dev, self.nbytes_allocated(), passes, bad_total, tuple(bad))

    def nbytes_allocated(self) -> int:
        return max(1, self.nbytes // self.chunk_bytes) * self.chunk_bytes

    def _sync(self) -> None:
        if self.dev.startswith("cuda"):
            self.torch.cuda.synchronize(self.dev)

    def _expected(self, buf, ci: int, pattern: str, variant: int, seed: int):
        torch = self.torch
        n = buf.numel()
        if pattern == "walking_ones":
            return _as_int32(torch, torch.tensor(1 << variant)).item()
        if pattern == "random":
            gen = torch.Generator(device=buf.device).manual_seed(seed + ci)
            return torch.randint(-(1 << 31), 1 << 31, (n,), dtype=torch.int32, generator=gen,
                                 device=buf.device)
        base = ci * n
        return _as_int32(torch, torch.arange(base, base + n, dtype=torch.int64,
                                             device=buf.device))

    def _write(self, buf, ci: int, pattern: str, variant: int, seed: int) -> None:
        exp = self._expected(buf, ci, pattern, variant, seed)
        if isinstance(exp, int):
            buf.fill_(exp)
        else:
            buf.copy_(exp)

    def _verify(self, chunks, pattern: str, variant: int, seed: int, bad: list[BadWord]) -> int:
        torch = self.torch
        total = torch.zeros((), dtype=torch.int64, device=chunks[0].device)
        for ci, buf in enumerate(chunks):  # counted on the device, one sync per pass
            total += (buf != self._expected(buf, ci, pattern, variant, seed)).sum()
        count = int(total.item())
        if not count:
            return 0
        for ci, buf in enumerate(chunks):  # rare: find where
            if len(bad) >= self.max_report:
                break
            exp = self._expected(buf, ci, pattern, variant, seed)
            exp_t = exp if not isinstance(exp, int) else torch.full_like(buf, exp)
            idx = (buf != exp_t).nonzero().view(-1)[: self.max_report - len(bad)].tolist()
            for i in idx:
                offset = ci * self.chunk_bytes + i * 4
                bad.append(BadWord(self.dev, pattern, offset, int(exp_t[i].item()) & 0xFFFFFFFF,
                                   int(buf[i].item()) & 0xFFFFFFFF,
                                   buf.data_ptr() + i * 4 if buf.is_cuda else 0))
        return count


class _AllocError(Exception):
    pass


def plan_bytes(cfg: MemtestSection, on_gpu: bool, level: str, free_bytes: int) -> tuple[int, int]:
    """(bytes to test, chunk bytes) for one device."""
    deep = level == "deep"
    if not on_gpu:
        total = cfg.cpu_mib * MIB * (2 if deep else 1)
        return total, min(MIB, total)
    chunk = cfg.chunk_mib * MIB
    share = cfg.deep_share if deep else cfg.share
    # The compare of a random/address chunk needs about two chunks of temporary space.
    usable = int(free_bytes * share) - 2 * chunk
    return max(chunk, usable // chunk * chunk), chunk


def run_memtest(torch, devices: list[str], cfg: MemtestSection, level: str,
                faults: dict[str, str]) -> list[DeviceMem]:
    testers = []
    if devices and not devices[0].startswith("cuda"):
        import os

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // len(devices)))
    rounds = cfg.deep_rounds if level == "deep" else cfg.rounds
    for i, dev in enumerate(devices):
        on_gpu = dev.startswith("cuda")
        free = torch.cuda.mem_get_info(dev)[0] if on_gpu else 0
        nbytes, chunk = plan_bytes(cfg, on_gpu, level, free)
        testers.append(_Tester(torch, i, dev, nbytes, chunk, list(cfg.patterns), rounds, faults,
                               cfg.max_report))
    for t in testers:
        t.start()
    for t in testers:
        t.join()
    return [t.result or DeviceMem(t.dev, error="no result") for t in testers]


def check_memtest(ctx) -> Outcome:
    import torch


    cfg: MemtestSection = ctx.cfg.memtest
    where = device_plan(ctx, torch, cfg.cpu_devices)
    if where.problem:
        return unusable(CHECK, where)
    devices = [d.torch for d in where.devices]
    out = verdict_memtest(run_memtest(torch, devices, cfg, ctx.level, ctx.faults))
    out.figures.update(where.figures())
    return out
