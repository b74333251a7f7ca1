"""GEMM burn-in with verified results, on every local device at once.

Each device runs in a thread of its own (CUDA work releases the GIL, so devices run
concurrently); without GPUs, [burnin] cpu_devices "virtual devices" share the CPU. Every device
multiplies the same seeded matrices, per configured dtype, and is judged on four things:

* bit-exact agreement: the result's bits must equal those of the other devices of the same
  model (same inputs, same kernels). A device that disagrees with the majority is named with the
  count and place of the differing elements. The device's own result must also stay the same
  from chunk to chunk over the whole run (an intermittent error shows as "unstable").
* the golden checksum: row and column sums of the result against a float64 reference computed
  once on the CPU, within the dtype's rounding tolerance. Sums of A@B are cheap to get exactly
  (rows: A(B1), columns: (1A)B, O(n^2) instead of O(n^3)), so even 8192-wide matrices have a
  float64 reference, and a wrong element is located at (row, column).
* speed: TFLOPS per device (median over timed chunks, so a moment of contention does not count)
  against the profile floor, against the node's median (a straggler), and, where stored results
  exist, against the fleet median of nodes with the same profile. On CPU "devices" (threads that
  share cores with everything else) a straggler is noise, so it is a WARN and never a drain. The
  fleet is data from strangers (other nodes' documents in the shared directory): only documents
  that validate, that root wrote, one per distinct node that Slurm lists, count; too few of them
  and there is no fleet; outliers are dropped by the median absolute deviation before the median
  is taken; and a node below the fleet is only warned: its own profile floor is what fails it.
* errors: an allocation failure or a device that stops making progress (a per-device watchdog,
  far sooner than the check's own timeout) is named as itself.

On GPUs the work runs for [burnin] duration seconds per dtype (deep_duration at level deep); on
the CPU a fixed small amount, so tests and registration stay quick. Progress (elapsed, remaining)
goes to stderr as `AIRLOCK-PROGRESS burnin {json}` lines, or to a callback.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airlock import protocol
from airlock.checks.base import Outcome, failed, passed, warned
from airlock.checks.device_plan import plan as device_plan
from airlock.checks.device_plan import unusable
from airlock.checks.fleet import fleet_members, fleet_reference, read_fleet
from airlock.hw.faults import device_arg

CHECK = "burnin"
SEED = 1234
GPU_SIZE = 8192
# Max relative error of a row/column sum of C against its float64 reference, relative to the sum
# of |a||b| over the same terms. Each element's rounding is at most u|c| <= u*sum|a||b|, so the
# bound is about the unit roundoff of the result (bf16 2^-8, fp16 2^-11; tf32 rounds both inputs
# to 2^-11) with room for fp32 accumulation; an injected or real fault is far larger.
TOLERANCE = {"fp32": 1e-4, "tf32": 4e-3, "fp16": 2e-3, "bf16": 1.6e-2}
CHUNK_SECONDS = 0.5  # GPU: a timed chunk lasts about this long
CPU_CHUNKS = 8
# The job preflight's GEMM ([preflight] level = "collective+gemm"): its level name, and the
# longest it runs on a GPU.
PREFLIGHT = "preflight"
PREFLIGHT_GPU_S = 2.0
WATCHDOG_GRACE = 60.0  # seconds past its planned time before a device counts as hung

Progress = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class DeviceRun:
    device: str
    model: str
    dtype: str
    tflops: float = 0.0  # median over timed chunks
    sustained: float = 0.0  # every GEMM over all the time spent
    gemms: int = 0
    fingerprint: int = 0  # exact integer sum of the result's bits (order-independent)
    golden_error: float = 0.0  # worst row/column error relative to its scale
    golden_at: tuple[int, int] | None = None  # (row, column) of the worst error
    unstable: int = 0  # chunks whose result differed from the device's first one
    mismatches: int = 0  # elements differing from the majority of same-model devices
    first_mismatch: tuple[int, int] | None = None
    versus: str = ""  # set when no majority decided: the one device it was compared with
    error: str = ""


@dataclass
class Plan:
    size: int
    dtypes: list[str]
    duration: float = 0.0  # > 0: run each dtype this many seconds (GPU)
    iterations: int = 0  # duration == 0: this many GEMMs per dtype, in CPU_CHUNKS chunks
    # CPU "devices" are threads sharing cores with every other process: their chunks are timed
    # in thread CPU time, so a busy machine does not make a healthy one look like a straggler.
    thread_clock: bool = False


# --- pure verdict helpers ---------------------------------------------------------------------
def majority(fingerprints: dict[str, int]) -> tuple[int | None, list[str]]:
    """(the fingerprint most devices share, the devices that differ). A tie has no majority:
    (None, every device)."""
    counts: dict[int, int] = {}
    for fp in fingerprints.values():
        counts[fp] = counts.get(fp, 0) + 1
    if not counts:
        return None, []
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, sorted(fingerprints)
    ref = ranked[0][0]
    return ref, sorted(d for d, fp in fingerprints.items() if fp != ref)


def stragglers(values: dict[str, float], fraction: float) -> tuple[float, list[str]]:
    """(node median, devices below fraction x the median of the *other* devices), slowest first.
    Against the others, one slow device among two still stands out (a node median of two
    would be half its own speed)."""
    med = statistics.median(values.values()) if values else 0.0
    if len(values) < 2 or not fraction:
        return med, []
    slow = []
    for d, v in values.items():
        others = [x for k, x in values.items() if k != d]
        if v < fraction * statistics.median(others):
            slow.append(d)
    return med, sorted(slow, key=lambda d: values[d])


def verdict_burnin(runs: list[DeviceRun], floors: dict[str, float] | None = None,
                   straggler_fraction: float = 0.85, fleet: dict[str, float] | None = None,
                   fleet_fraction: float = 0.85, straggler_fails: bool = True) -> Outcome:
    """straggler_fails=False (CPU "devices"): a straggler, or a device below the floor, is a
    WARN, and the checks after it still run. A failure against the fleet carries
    figures["fleet_low"] (see check_burnin)."""
    floors = floors or {}
    fleet = fleet or {}
    figures = burnin_figures(runs, floors, fleet)
    warnings: list[str] = []
    if not runs:
        return failed(CHECK, "no devices ran", **figures)
    for r in runs:
        if r.error:
            return failed(CHECK, f"{r.device} {r.dtype} {r.error}", "reboot", **figures)
    for r in runs:
        if r.mismatches:
            where = f" first at {r.first_mismatch}" if r.first_mismatch else ""
            peer = f"{r.versus} (no majority)" if r.versus else "other devices"
            return failed(CHECK, f"{r.device} {r.dtype} {r.mismatches} mismatches vs "
                          f"{peer}{where}", "replace", **figures)
    for r in runs:
        if not r.golden_error <= TOLERANCE[r.dtype]:  # NaN is an error too
            return failed(CHECK, f"{r.device} {r.dtype} checksum off by {r.golden_error:.2e} "
                          f"at {r.golden_at}", "replace", **figures)
    for r in runs:
        if r.unstable:
            return failed(CHECK, f"{r.device} {r.dtype} result changed in {r.unstable} chunks",
                          "replace", **figures)
    for dtype in _dtypes(runs):
        per_dev = {r.device: r.tflops for r in runs if r.dtype == dtype}
        floor = floors.get(dtype) or 0.0
        below = sorted((d for d, v in per_dev.items() if v < floor), key=per_dev.get)
        if below:
            d = below[0]
            why = f"{d} {dtype} {per_dev[d]:.3g} TFLOPS < floor {floor:g}"
            if straggler_fails:
                return failed(CHECK, why, "reboot", **figures)
            # A CPU stand-in's speed on cores shared with everything else is not evidence
            # about hardware (a busy host put a healthy node below the CPU floor): it warns.
            warnings.append(why)
            continue
        _med, slow = stragglers(per_dev, straggler_fraction)
        if slow:
            d = slow[0]
            others = statistics.median(v for k, v in per_dev.items() if k != d)
            why = (f"{d} {dtype} straggler {per_dev[d]:.3g} TFLOPS < {straggler_fraction:g} x "
                   f"the others' median {others:.3g}")
            if straggler_fails:
                return failed(CHECK, why, "reboot", **figures)
            warnings.append(why)
    for dtype in _dtypes(runs):
        per_dev = {r.device: r.tflops for r in runs if r.dtype == dtype}
        ref = fleet.get(dtype)
        if ref and fleet_fraction:
            low = sorted((d for d, v in per_dev.items() if v < fleet_fraction * ref),
                         key=per_dev.get)
            if low:
                # Other nodes' documents are a second opinion, never a verdict: whoever can
                # write the shared directory could otherwise drain any node. Only the node's
                # own profile floor (above) fails it.
                d = low[0]
                return warned(CHECK, f"{d} {dtype} {per_dev[d]:.3g} TFLOPS < "
                              f"{fleet_fraction:g} x fleet median {ref:.3g} (a warning: only "
                              "the profile floor fails a node)", fleet_low=[d, dtype],
                              **figures)
    if warnings:
        return warned(CHECK, f"{warnings[0]} (CPU devices share cores: a warning, never a "
                      "drain)", **figures)
    primary = runs[0].dtype
    return passed(CHECK, f"{len({r.device for r in runs})} devices, {primary} min "
                  f"{figures['min_tflops']:.3g} TFLOPS", **figures)


def burnin_figures(runs: list[DeviceRun], floors: dict[str, float],
                   fleet: dict[str, float]) -> dict[str, Any]:
    tflops: dict[str, dict[str, float]] = {}
    for r in runs:
        tflops.setdefault(r.dtype, {})[r.device] = round(r.tflops, 6)
    medians = {dt: round(statistics.median(v.values()), 6) for dt, v in tflops.items() if v}
    primary = runs[0].dtype if runs else ""
    figs: dict[str, Any] = {
        "devices": sorted({r.device for r in runs}),
        "tflops": tflops,
        "median_tflops": medians,
        "min_tflops": round(min(tflops[primary].values()), 6) if primary else 0.0,
        "floor": floors.get(primary) or "",
        "gemms": sum(r.gemms for r in runs),
    }
    if fleet:
        figs["fleet_median"] = {k: round(v, 6) for k, v in fleet.items()}
    return figs


def _dtypes(runs: list[DeviceRun]) -> list[str]:
    seen: list[str] = []
    for r in runs:
        if r.dtype not in seen:
            seen.append(r.dtype)
    return seen


# --- gathering: the GEMMs ---------------------------------------------------------------------
def _torch_dtype(torch, name: str):
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[name]


def _int_view(torch, t):
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def fingerprint(torch, c) -> int:
    """Exact, order-independent digest of a tensor's bits: the int64 sum of its words (any single
    changed element changes it; integer addition has no rounding, so devices agree bit for bit)."""
    return int(_int_view(torch, c).sum(dtype=torch.int64).item())


@dataclass
class Golden:
    """float64 row and column sums of A@B for the inputs exactly as the device sees them."""

    rows: Any
    cols: Any
    row_scale: Any
    col_scale: Any

    @classmethod
    def compute(cls, torch, a, b) -> Golden:
        a64, b64 = a.double(), b.double()
        ones = torch.ones(a.shape[1], dtype=torch.float64)
        rows = a64 @ (b64 @ ones)
        cols = (ones @ a64) @ b64
        row_scale = a64.abs() @ (b64.abs() @ ones)
        col_scale = (ones @ a64.abs()) @ b64.abs()
        return cls(rows, cols, row_scale.clamp_min(1e-300), col_scale.clamp_min(1e-300))

    def to(self, dev) -> Golden:
        if str(dev) == "cpu":
            return self
        return Golden(self.rows.to(dev), self.cols.to(dev), self.row_scale.to(dev),
                      self.col_scale.to(dev))

    def error(self, torch, c) -> tuple[float, tuple[int, int]]:
        row_err = (c.sum(dim=1, dtype=torch.float64) - self.rows).abs() / self.row_scale
        col_err = (c.sum(dim=0, dtype=torch.float64) - self.cols).abs() / self.col_scale
        row_err = torch.nan_to_num(row_err, nan=float("inf"), posinf=float("inf"))
        col_err = torch.nan_to_num(col_err, nan=float("inf"), posinf=float("inf"))
        r = int(row_err.argmax().item())
        k = int(col_err.argmax().item())
        return float(max(row_err[r].item(), col_err[k].item())), (r, k)


def _sync(torch, dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize(dev)


def _tdev(dev: str) -> str:
    return "cpu" if dev.startswith("cpu") else dev


class _Later:
    """A value computed while the devices already run (the golden sums: the CPU is idle while
    GPUs work, so the reference costs no device time)."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._ready.set()

    def get(self) -> Any:
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self._value


class _DeviceWorker(threading.Thread):
    def __init__(self, torch, index: int, dev: str, model: str, dtype: str, a_host, b_host,
                 golden: _Later, plan: Plan, faults: dict[str, str]):
        super().__init__(name=f"burnin-{dev}", daemon=True)
        self.torch, self.index, self.dev, self.model, self.dtype = torch, index, dev, model, dtype
        self.a_host, self.b_host, self.golden, self.plan, self.faults = (a_host, b_host, golden,
                                                                         plan, faults)
        self.result: DeviceRun | None = None
        self.c = None  # the final result, kept for an element-wise comparison on disagreement
        self.heartbeat = time.monotonic()

    def run(self) -> None:
        try:
            self.result = self._run()
        except BaseException as exc:  # a device error is this device's verdict
            what = "allocation failed" if _is_alloc_error(exc, self.torch) else "error"
            msg = f"{what}: {type(exc).__name__}: {exc}".splitlines()[0][:120]
            self.result = DeviceRun(self.dev, self.model, self.dtype, error=msg)

    def _run(self) -> DeviceRun:
        torch, plan, n = self.torch, self.plan, self.plan.size
        dev = _tdev(self.dev)
        alloc = device_arg(self.faults.get("alloc_fail"), 0)
        if alloc and alloc[0] == self.index:
            raise MemoryError(f"injected alloc_fail on {self.dev}")
        dt = _torch_dtype(torch, self.dtype)
        a = self.a_host.to(dev, dt)
        b = self.b_host.to(dev, dt)
        c = torch.empty(n, n, dtype=dt, device=dev)
        torch.matmul(a, b, out=c)  # warm-up: kernel selection, clocks
        _sync(torch, dev)
        first = _int_view(torch, c).clone()  # every later result must equal it, bit for bit
        slow = device_arg(self.faults.get("gemm_slow"), 0.3)
        factor = slow[1] if slow and slow[0] == self.index else 1.0
        flop = 2.0 * n**3
        per_chunk = max(1, plan.iterations // CPU_CHUNKS) if not plan.duration else 1
        clock = time.thread_time if plan.thread_clock else time.perf_counter
        chunks: list[float] = []
        unstable = gemms = 0
        spent = 0.0
        started = time.monotonic()
        while True:
            t0 = clock()
            for _ in range(per_chunk):
                torch.matmul(a, b, out=c)
            _sync(torch, dev)
            took = clock() - t0
            if factor < 1.0:  # gemm_slow: the device really does less work per second
                _stall(clock, took * (1 / factor - 1), plan.thread_clock)
                took = clock() - t0
            gemms += per_chunk
            spent += took
            chunks.append(flop * per_chunk / took / 1e12)
            if not torch.equal(_int_view(torch, c), first):
                unstable += 1
            self.heartbeat = time.monotonic()
            if plan.duration:
                if took < CHUNK_SECONDS / 2 and per_chunk < 1 << 16:
                    per_chunk *= 2  # calibrate: a chunk of about CHUNK_SECONDS
                if time.monotonic() - started >= plan.duration:
                    break
            elif gemms >= plan.iterations:
                break
        corrupt = device_arg(self.faults.get("gemm_corrupt"), 0)
        if corrupt and corrupt[0] == self.index:
            # gemm_corrupt: one element goes wrong, as a flipped exponent bit would make it
            flat = c.view(-1)
            flat[n + 1] = flat[n + 1] * 4096 + 64
        fp = fingerprint(torch, c)
        err, at = self.golden.get().to(dev).error(torch, c)
        self.c = c
        return DeviceRun(self.dev, self.model, self.dtype, tflops=statistics.median(chunks),
                         sustained=flop * gemms / spent / 1e12, gemms=gemms, fingerprint=fp,
                         golden_error=err, golden_at=at, unstable=unstable)


def _stall(clock: Callable[[], float], seconds: float, busy: bool) -> None:
    """Lose `seconds` of the device's time: asleep on a GPU, spinning on a CPU "device" (whose
    clock counts only the CPU time its thread uses)."""
    if not busy:
        time.sleep(seconds)
        return
    end = clock() + seconds
    while clock() < end:
        pass


def _is_alloc_error(exc: BaseException, torch) -> bool:
    """A failed allocation, by type (host MemoryError, torch's OutOfMemoryError), never by the
    words of a message."""
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return isinstance(exc, MemoryError) or (oom is not None and isinstance(exc, oom))


def _compare(torch, ref, other) -> tuple[int, tuple[int, int] | None]:
    a = _int_view(torch, ref.cpu())
    b = _int_view(torch, other.cpu())
    diff = a != b
    count = int(diff.sum().item())
    if not count:
        return 0, None
    idx = int(diff.view(-1).nonzero()[0].item())
    return count, divmod(idx, ref.shape[1])


def run_dtype(torch, devices: list[tuple[str, str]], dtype: str, plan: Plan,
              faults: dict[str, str], tick: Callable[[], None] | None = None,
              seed: int = SEED) -> list[DeviceRun]:
    """One dtype on every device at once; devices are (name, model)."""
    a32, b32 = _inputs(torch, plan.size, seed)
    a_host = a32.to(_torch_dtype(torch, dtype))
    b_host = b32.to(_torch_dtype(torch, dtype))
    if devices and devices[0][0].startswith("cuda"):
        a_host, b_host = a_host.pin_memory(), b_host.pin_memory()
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    golden = _Later()
    workers = [_DeviceWorker(torch, i, dev, model, dtype, a_host, b_host, golden, plan, faults)
               for i, (dev, model) in enumerate(devices)]
    try:
        for w in workers:
            w.start()
        try:  # once per dtype, shared by every device, while they run
            golden.set(Golden.compute(torch, a_host, b_host))
        except BaseException as exc:  # every device reports it
            golden.set(error=exc)
        _wait(workers, plan, tick)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    runs = [w.result or DeviceRun(w.dev, w.model, dtype, error=_hung(w)) for w in workers]
    return _cross_check(torch, runs, {w.dev: w.c for w in workers})


_INPUTS: dict[tuple[int, int], tuple[Any, Any]] = {}


def _inputs(torch, n: int, seed: int) -> tuple[Any, Any]:
    """The seeded fp32 inputs, generated once per run and cast per dtype."""
    if (n, seed) not in _INPUTS:
        _INPUTS.clear()  # one size at a time: 8192^2 inputs are 512 MiB
        gen = torch.Generator().manual_seed(seed)
        _INPUTS[(n, seed)] = (torch.randn(n, n, generator=gen, dtype=torch.float32),
                              torch.randn(n, n, generator=gen, dtype=torch.float32))
    return _INPUTS[(n, seed)]


def _wait(workers: list[_DeviceWorker], plan: Plan, tick: Callable[[], None] | None) -> None:
    budget = (plan.duration or 0.0) + WATCHDOG_GRACE
    while any(w.is_alive() for w in workers):
        for w in workers:
            w.join(0.2)
        if tick:
            tick()
        now = time.monotonic()
        stale = [w for w in workers if w.is_alive() and now - w.heartbeat > budget]
        if stale:
            return  # hung devices are reported by _hung; their threads are daemons


def _hung(w: _DeviceWorker) -> str:
    return f"hung: no progress for {time.monotonic() - w.heartbeat:.0f}s"


def _cross_check(torch, runs: list[DeviceRun], results: dict[str, Any]) -> list[DeviceRun]:
    """Fill in mismatches: devices of one model must agree bit for bit."""
    by_model: dict[str, list[DeviceRun]] = {}
    for r in runs:
        if not r.error:
            by_model.setdefault(r.model, []).append(r)
    updates: dict[str, DeviceRun] = {}
    for group in by_model.values():
        if len(group) < 2:
            continue
        ref_fp, odd = majority({r.device: r.fingerprint for r in group})
        if not odd:
            continue
        versus = ""
        if ref_fp is None:
            # No majority (two devices, say): the one within the golden tolerance is the
            # reference; if none or both are, the others are named against the first, and
            # the detail says no majority decided.
            good = [r for r in group if r.golden_error <= TOLERANCE[r.dtype]]
            ref = good[0] if len(good) == 1 else group[0]
            versus = "" if len(good) == 1 else ref.device
            odd = [r.device for r in group if r.device != ref.device]
        else:
            ref = next(r for r in group if r.fingerprint == ref_fp)
        for r in group:
            if r.device in odd:
                count, first = _compare(torch, results[ref.device], results[r.device])
                updates[r.device] = _replace(r, mismatches=count, first_mismatch=first,
                                             versus=versus)
    return [updates.get(r.device, r) for r in runs]


def _replace(run: DeviceRun, **changes: Any) -> DeviceRun:
    return replace(run, **changes)


# --- devices, progress, the check ---------------------------------------------------------------
def stderr_progress(info: dict[str, Any]) -> None:
    protocol.emit(protocol.PROGRESS, info, sys.stderr, tag=CHECK)


@dataclass
class _Clock:
    total: float
    progress: Progress | None
    every: float = 5.0
    started: float = field(default_factory=time.monotonic)
    last: float = 0.0
    phase: str = ""

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress is None or (not force and now - self.last < self.every):
            return
        self.last = now
        elapsed = now - self.started
        self.progress({"elapsed": round(elapsed, 1),
                       "remaining": round(max(self.total - elapsed, 0.0), 1),
                       "phase": self.phase})


def make_plan(cfg, on_gpu: bool, level: str) -> Plan:
    """At the preflight level (a job's prolog, airlock.preflight) only the first dtype, for at
    most PREFLIGHT_GPU_S on a GPU: a sanity check inside the preflight's budget."""
    deep = level == "deep"
    short = level == PREFLIGHT
    if on_gpu:
        return Plan(size=cfg.size or GPU_SIZE,
                    dtypes=list(cfg.dtypes)[:1] if short else list(cfg.dtypes),
                    duration=min(cfg.duration, PREFLIGHT_GPU_S) if short
                    else cfg.deep_duration if deep else cfg.duration)
    iterations = cfg.cpu_iterations * (2 if deep else 1)
    # A virtual device is one core: one intra-op thread, so its thread's CPU time is the
    # device's time, and the same kernels (so the same result bits) run on every one.
    # TF32 is an NVIDIA tensor-core mode; on a CPU it only changes oneDNN's precision hint, and
    # a CI run caught one CPU device 100x slower in it than its twin (a false straggler). The
    # CPU runs the real dtypes only.
    dtypes = [d for d in cfg.dtypes if d != "tf32"] or ["fp32"]
    if short:
        dtypes = dtypes[:1]
    return Plan(size=cfg.cpu_size, dtypes=dtypes, iterations=iterations, thread_clock=True)


def run_burnin(torch, devices: list[tuple[str, str]], plan: Plan, faults: dict[str, str],
               progress: Progress | None = None) -> list[DeviceRun]:
    if not devices[0][0].startswith("cuda"):
        torch.set_num_threads(1)  # see make_plan
    total = plan.duration * len(plan.dtypes)
    clock = _Clock(total=total, progress=progress if plan.duration else None)
    runs: list[DeviceRun] = []
    for dtype in plan.dtypes:
        clock.phase = dtype
        clock.tick(force=True)
        runs.extend(run_dtype(torch, devices, dtype, plan, faults, clock.tick))
    return runs


def check_burnin(ctx, progress: Progress | None = None) -> Outcome:
    import torch  # in the check's own process only

    cfg = ctx.cfg.burnin
    where = device_plan(ctx, torch, cfg.cpu_devices)
    if where.problem:
        return unusable(CHECK, where)
    devices = [(d.torch, d.model) for d in where.devices]
    on_gpu = where.on_gpu
    plan = make_plan(cfg, on_gpu, ctx.level)
    profile = where.profile
    floors = {k: float(v) for k, v in (profile.get("tflops_floor") or {}).items()}
    fleet: dict[str, float] = {}
    ignored: list[str] = []
    # The preflight asks no fleet: no Slurm call for it in a job's prolog.
    members = fleet_members(ctx.cfg, ignored) if (on_gpu or cfg.fleet_cpu) and \
        ctx.cfg.shared_dir and ctx.level != PREFLIGHT else None
    if members is not None:
        others = read_fleet(ctx.cfg.shared_dir, ctx.node, profile.name, ignored=ignored,
                            members=members)
        for dtype in plan.dtypes:
            ref = fleet_reference(others, dtype, cfg.fleet_min_nodes)
            if ref:
                fleet[dtype] = ref
    fraction = cfg.straggler_fraction if on_gpu else cfg.cpu_straggler_fraction

    runs = run_burnin(torch, devices, plan, ctx.faults, progress or stderr_progress)
    out = verdict_burnin(runs, floors, fraction, fleet, cfg.fleet_fraction,
                         straggler_fails=on_gpu)
    out.figures.update(where.figures(), size=plan.size, model=devices[0][1],
                       mode=f"{plan.duration:g}s per dtype" if plan.duration
                       else f"{plan.iterations} GEMMs per dtype")
    if ignored:
        out.figures["fleet_ignored"] = ignored[:5]
    return out
