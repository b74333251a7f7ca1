"""All-reduce sweep over torch.distributed: the per-node launcher, the per-rank worker, and how
node reports combine. The intra-node check (airlock/checks/allreduce.py) runs one node; the
on-demand group check runs one launcher per node (srun) into the same process group.

Process model
-------------
One launcher per node forks one process per local rank (local rank i uses cuda:i with NCCL;
without GPUs, N ranks share the CPU with gloo). Global rank = rank_offset + local rank, in a
world of world_size. The rendezvous is a TCPStore at master_addr:master_port hosted by the
launcher started with host_store (normally the one with rank offset 0), not by a rank: it
outlives a crashed rank, and on a hang the launcher reads how far each rank got.

Ranks are forked, not spawned: they inherit the imported torch (importing it costs seconds per
process on a small node). The launcher never initialises CUDA before forking (device counts come
from NVML through torch.cuda.device_count()), so each rank initialises CUDA for itself.

The ranks live in a process group of their own, so a hard timeout kills every one of them at
once (SIGKILL to the group), then checks that none is left. Each rank also dies with its
launcher (PR_SET_PDEATHSIG) and on an alarm a little after the timeout, so nothing outlives a
launcher that was itself killed (Slurm's proctrack/pgid would not see the ranks' group).

The sweep, per message size: a verified all-reduce (each rank sends small integers whose sum is
exact in the dtype; every rank checks every element of the result, and reads back what it sent,
so a wrong sum can be told from a rank that sent wrong data), then warm-up and a timed loop.
Each rank reports its loop time and, per iteration, the time it spent outside the collective
(a straggler spends its time outside while everyone else waits inside).

CLI (one line of JSON on stdout, prefixed `AIRLOCK-DIST `; exit 0 done, 1 error, 3 timeout):

  python -m airlock.dist worker --master-addr A --master-port P --world-size W
      --rank-offset R --local-ranks N [--host-store] [--node NAME] [--backend auto|nccl|gloo]
      [--sizes BYTES,BYTES,...] [--iters K] [--warmup K] [--dtype fp32|bf16|fp16]
      [--timeout SECONDS] [--level standard|deep] [--faults SPEC]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import selectors
import signal
import socket
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

MARK = "AIRLOCK-DIST "
KEY = "airlock/"
# Largest integer each dtype holds exactly: the verified sums must stay below it.
EXACT = {"fp32": 1 << 24, "fp16": 1 << 11, "bf16": 1 << 8}
ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}
EXIT_OK, EXIT_ERROR, EXIT_TIMEOUT = 0, 1, 3
SLOW_DEFAULT_S = 0.02  # allreduce_slow=RANK: seconds slept before each collective


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


# --- the pattern: exact sums ---------------------------------------------------------------------
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


# --- one rank ------------------------------------------------------------------------------------
def _fault_rank(faults: dict[str, str], name: str, local_rank: int, default: float
                ) -> float | None:
    from airlock.faults import device_arg

    arg = device_arg(faults.get(name), default)
    return arg[1] if arg and arg[0] == local_rank else None


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_rank(rank: int, local_rank: int, world_size: int, addr: str, port: int,
             params: SweepParams, backend: str, faults: dict[str, str], node: str
             ) -> dict[str, Any]:
    """One rank's whole sweep. Returns its report (see combine for the fields)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # ranks share the cores; gloo has threads of its own
    timeout = timedelta(seconds=params.timeout)
    store = dist.TCPStore(addr, port, world_size, False, timeout=timeout)

    def progress(step: int, label: str) -> None:
        store.set(f"{KEY}p/{rank}", f"{step}|{label}")

    progress(0, "connected")
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank,
                            world_size=world_size, timeout=timeout)
    progress(1, "joined")
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[params.dtype]
    m = pattern_modulus(world_size, params.dtype)
    slow = _fault_rank(faults, "allreduce_slow", local_rank, SLOW_DEFAULT_S)
    corrupt = _fault_rank(faults, "allreduce_corrupt", local_rank, 1.0)
    hang = _fault_rank(faults, "allreduce_hang", local_rank, 0.0)
    report: dict[str, Any] = {"rank": rank, "local_rank": local_rank, "node": node,
                              "device": str(device), "sizes": [], "verify": []}
    for si, nbytes in enumerate(params.sizes):
        numel = max(1, nbytes // ELEMENT[params.dtype])
        label = human_bytes(numel * ELEMENT[params.dtype])
        if hang is not None:  # allreduce_hang: this rank never joins the collective
            while True:
                time.sleep(3600)
        progress(2 + 2 * si, f"verify {label}")
        x = tiled(torch, contribution_values(rank, m), numel, dtype, device)
        if corrupt is not None:  # allreduce_corrupt: this rank's buffer holds one wrong value
            x[numel // 2] += 1
        sent = tiled(torch, contribution_values(rank, m), numel, dtype, device)
        sent_bad = x != sent
        v: dict[str, Any] = {"bytes": numel * ELEMENT[params.dtype],
                             "sent_bad": int(sent_bad.sum().item())}
        if v["sent_bad"]:
            v["sent_first"] = int(sent_bad.nonzero()[0].item())
        if slow:
            time.sleep(slow)
        dist.all_reduce(x)
        _sync(torch, device)
        exp = tiled(torch, expected_values(world_size, m), numel, dtype, device)
        wrong = x != exp
        v["bad"] = int(wrong.sum().item())
        if v["bad"]:
            j = int(wrong.nonzero()[0].item())
            v.update(first=j, expected=float(exp[j].item()), got=float(x[j].item()))
        report["verify"].append(v)
        del x, exp, wrong, sent, sent_bad
        progress(3 + 2 * si, f"timed {label}")
        report["sizes"].append(_timed(torch, dist, numel, dtype, device, params, slow))
    fence = torch.zeros(1, device=device)
    dist.all_reduce(fence)  # every rank is past the sweep before anyone leaves
    _sync(torch, device)
    progress(2 + 2 * len(params.sizes), "done")
    store.add(f"{KEY}done", 1)
    dist.destroy_process_group()
    return report


def _timed(torch, dist, numel: int, dtype, device, params: SweepParams,
           slow: float | None) -> dict[str, Any]:
    buf = torch.zeros(numel, dtype=dtype, device=device)
    for _ in range(params.warmup):
        dist.all_reduce(buf)
    fence = torch.zeros(1, device=device)
    dist.all_reduce(fence)  # start the clock together
    _sync(torch, device)
    own: list[float] = []
    start = mark = time.perf_counter()
    for _ in range(params.iters):
        if slow:
            time.sleep(slow)
        call = time.perf_counter()
        own.append(call - mark)
        dist.all_reduce(buf)
        mark = time.perf_counter()
    _sync(torch, device)
    loop = time.perf_counter() - start
    return {"bytes": numel * buf.element_size(), "iters": params.iters, "loop_s": loop,
            "own_median_s": statistics.median(own)}


def human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


# --- the launcher --------------------------------------------------------------------------------
def local_gpu_count() -> int:
    """GPUs visible here, without initialising CUDA (NVML), so forking afterwards stays safe."""
    import torch

    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def resolve_backend(backend: str, local_ranks: int) -> str:
    if backend != "auto":
        return backend
    gpus = local_gpu_count()
    return "nccl" if gpus and local_ranks <= gpus else "gloo"


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(EXIT_ERROR)


def _child(rank: int, local_rank: int, world_size: int, addr: str, params: SweepParams,
           backend: str, faults: dict[str, str], node: str, go_fd: int, out_fd: int,
           parent: int) -> None:
    code = EXIT_ERROR
    try:
        _die_with_parent(parent)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.alarm(int(params.timeout) + 30)  # default action kills, even inside a C call
        with os.fdopen(go_fd, "r") as fh:
            line = fh.readline().strip()
        if not line.isdigit():
            raise RuntimeError("launcher gave no port")
        report = run_rank(rank, local_rank, world_size, addr, int(line), params, backend,
                          faults, node)
        payload, code = report, EXIT_OK
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher
        payload = {"rank": rank, "local_rank": local_rank, "node": node,
                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
    try:
        data = (json.dumps(payload) + "\n").encode()
        while data:
            data = data[os.write(out_fd, data):]
    finally:
        os._exit(code)


def launch(master_addr: str, master_port: int, world_size: int, rank_offset: int,
           local_ranks: int, params: SweepParams, faults: dict[str, str] | None = None,
           host_store: bool = False, node: str = "") -> dict[str, Any]:
    """Run this node's ranks; return the node report (JSON-able). master_port 0 with host_store
    picks a free port (single-node runs)."""
    params.validate()
    if local_ranks <= 0 or world_size <= 0 or not 0 <= rank_offset <= world_size - local_ranks:
        raise ValueError(f"bad ranks: offset {rank_offset} + {local_ranks} local in a world "
                         f"of {world_size}")
    from datetime import timedelta

    import torch.distributed as dist

    faults = dict(faults or {})
    node = node or socket.gethostname().split(".")[0]
    backend = resolve_backend(params.backend, local_ranks)
    started = time.monotonic()
    deadline = started + params.timeout
    parent = os.getpid()
    children: list[dict[str, Any]] = []
    pgid = 0
    for lr in range(local_ranks):
        r_out, w_out = os.pipe()
        r_go, w_go = os.pipe()
        pid = os.fork()
        if pid == 0:  # the rank
            try:
                os.setpgid(0, pgid)
            except OSError:
                pass
            for c in children:
                for fd in (c["out"], c["go"]):
                    _close(fd)
            _close(r_out)
            _close(w_go)
            _child(rank_offset + lr, lr, world_size, master_addr, params, backend, faults,
                   node, r_go, w_out, parent)
        pgid = pgid or pid
        try:
            os.setpgid(pid, pgid)  # also here: whichever of parent and child runs first
        except OSError:
            pass
        _close(w_out)
        _close(r_go)
        children.append({"pid": pid, "rank": rank_offset + lr, "out": r_out, "go": w_go,
                         "buf": b""})
    store = None
    report: dict[str, Any] = {"node": node, "rank_offset": rank_offset,
                              "local_ranks": local_ranks, "world_size": world_size,
                              "backend": backend, "timeout": params.timeout, "ranks": [],
                              "errors": {}, "timed_out": False, "progress": {}, "leftover": []}
    try:
        port = master_port
        if host_store:
            store = dist.TCPStore(master_addr, master_port, world_size, True,
                                  timeout=timedelta(seconds=params.timeout),
                                  wait_for_workers=False)
            port = store.port
        for c in children:
            _write_all(c["go"], f"{port}\n".encode())
            _close(c["go"])
        finished = _collect(children, deadline)
        for c in children:
            text = c["buf"].decode(errors="replace").strip()
            try:
                rep = json.loads(text.splitlines()[-1]) if text else None
            except ValueError:
                rep = None
            if rep and "error" not in rep:
                report["ranks"].append(rep)
            elif rep:
                report["errors"][str(c["rank"])] = rep["error"]
            elif finished:
                report["errors"][str(c["rank"])] = "died without a report"
        if not finished:
            report["timed_out"] = True
            report["progress"] = _progress(store, master_addr, port, world_size, children,
                                           host_store)
        elif store is not None and not report["errors"]:
            _wait_done(store, world_size, deadline)  # remote ranks may still be leaving
    finally:
        report["leftover"] = _kill_and_reap(children, pgid)
        for c in children:
            _close(c["out"])
        if store is not None:
            del store
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # the child is gone; its missing report says so


def _collect(children: list[dict[str, Any]], deadline: float) -> bool:
    """Read every rank's report until all pipes close; False when the deadline came first."""
    sel = selectors.DefaultSelector()
    for c in children:
        sel.register(c["out"], selectors.EVENT_READ, c)
    open_count = len(children)
    while open_count:
        left = deadline - time.monotonic()
        if left <= 0:
            sel.close()
            return False
        for key, _ in sel.select(timeout=min(left, 1.0)):
            c = key.data
            chunk = os.read(c["out"], 65536)
            if chunk:
                c["buf"] += chunk
            else:
                sel.unregister(c["out"])
                open_count -= 1
    sel.close()
    return True


def _progress(store, addr: str, port: int, world_size: int, children: list[dict[str, Any]],
              host_store: bool) -> dict[str, list]:
    """{rank: [step, label]} for the ranks this launcher can speak for (all, when it hosts the
    store); a rank that never connected is [-1, "not started"]."""
    from datetime import timedelta

    import torch.distributed as dist

    try:
        if store is None:
            store = dist.TCPStore(addr, port, world_size, False, timeout=timedelta(seconds=3))
        ranks = range(world_size) if host_store else [c["rank"] for c in children]
        out: dict[str, list] = {}
        for r in ranks:
            key = f"{KEY}p/{r}"
            if store.check([key]):
                step, _, label = store.get(key).decode().partition("|")
                out[str(r)] = [int(step), label]
            else:
                out[str(r)] = [-1, "not started"]
        return out
    except Exception as exc:  # noqa: BLE001 - progress is a diagnosis, not the verdict
        return {"error": [-1, f"progress unavailable: {exc}"[:120]]}


def _wait_done(store, world_size: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if store.add(f"{KEY}done", 0) >= world_size:
            return
        time.sleep(0.05)


def _kill_and_reap(children: list[dict[str, Any]], pgid: int) -> list[int]:
    """SIGKILL the ranks' process group (and each rank, in case one left it), reap them, and
    return the pids still alive (there should be none)."""
    pids = [c["pid"] for c in children]
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + 10
    alive = set(pids)
    while alive and time.monotonic() < end:
        for pid in list(alive):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                alive.discard(pid)
        if alive:
            time.sleep(0.02)
    if pgid and not alive:
        try:
            os.killpg(pgid, 0)
            alive.add(-pgid)  # the group still has members: someone escaped the reaping
        except (ProcessLookupError, PermissionError):
            pass
    return sorted(alive)


def run_local(ranks: int, params: SweepParams, faults: dict[str, str] | None = None,
              node: str = "") -> dict[str, Any]:
    """The single-node case: every rank here, rendezvous on 127.0.0.1 at a free port."""
    return launch("127.0.0.1", 0, ranks, 0, ranks, params, faults, host_store=True, node=node)


# --- combining node reports ---------------------------------------------------------------
@dataclass(frozen=True)
class SizeResult:
    bytes: int
    time_s: float  # per all-reduce, slowest rank
    algbw_gbps: float
    busbw_gbps: float


@dataclass
class Sweep:
    world_size: int
    nodes: dict[int, str] = field(default_factory=dict)  # rank -> node
    sizes: list[SizeResult] = field(default_factory=list)
    timed_out: bool = False
    timeout: float = 0.0
    progress: dict[int, tuple[int, str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)  # ranks with no report at all
    sent_bad: list[dict[str, Any]] = field(default_factory=list)  # rank sent wrong data
    wrong_sum: list[dict[str, Any]] = field(default_factory=list)  # rank received a wrong sum
    own_fraction: dict[int, float] = field(default_factory=dict)  # at the largest size
    leftover: list[int] = field(default_factory=list)

    @property
    def laggards(self) -> list[int]:
        """Ranks behind the others when a run hung (empty when all are at the same step)."""
        steps = {r: s for r, (s, _label) in self.progress.items()}
        if not steps or len(set(steps.values())) < 2:
            return []
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)

    def where(self, rank: int) -> str:
        node = self.nodes.get(rank)
        return f"rank {rank}" + (f" ({node})" if node else "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["laggards"] = self.laggards
        return d


def bus_factor(world_size: int) -> float:
    return 2 * (world_size - 1) / world_size if world_size else 0.0


def combine(reports: list[dict[str, Any]]) -> Sweep:
    """One Sweep from every node's report: the collective's time per size is the slowest
    rank's; busbw = algbw * 2(n-1)/n (the nccl-tests convention)."""
    world = max((int(r.get("world_size", 0)) for r in reports), default=0)
    sw = Sweep(world_size=world)
    timings: dict[int, list[tuple[int, float]]] = {}
    own_last: dict[int, float] = {}
    loop_last: dict[int, tuple[int, float, int]] = {}
    seen: set[int] = set()
    for rep in reports:
        node = rep.get("node", "")
        offset, local = int(rep.get("rank_offset", 0)), int(rep.get("local_ranks", 0))
        for r in range(offset, offset + local):
            sw.nodes[r] = node
        sw.timed_out |= bool(rep.get("timed_out"))
        sw.timeout = max(sw.timeout, float(rep.get("timeout", 0)))
        sw.leftover += list(rep.get("leftover", []))
        for r, (step, label) in (rep.get("progress") or {}).items():
            if r.lstrip("-").isdigit():
                sw.progress[int(r)] = (int(step), str(label))
        for r, msg in (rep.get("errors") or {}).items():
            sw.errors[int(r)] = str(msg)
            seen.add(int(r))
        for rr in rep.get("ranks", []):
            rank = int(rr["rank"])
            seen.add(rank)
            for v in rr.get("verify", []):
                if v.get("sent_bad"):
                    sw.sent_bad.append({"rank": rank, "bytes": v["bytes"],
                                        "count": v["sent_bad"], "first": v.get("sent_first")})
                if v.get("bad"):
                    sw.wrong_sum.append({"rank": rank, "bytes": v["bytes"], "count": v["bad"],
                                         "first": v.get("first"), "expected": v.get("expected"),
                                         "got": v.get("got")})
            for s in rr.get("sizes", []):
                timings.setdefault(int(s["bytes"]), []).append(
                    (rank, float(s["loop_s"]) / max(int(s["iters"]), 1)))
                loop_last[rank] = (int(s["bytes"]), float(s["loop_s"]), int(s["iters"]))
                own_last[rank] = float(s["own_median_s"])
    sw.missing = sorted(set(range(world)) - seen) if not sw.timed_out else []
    factor = bus_factor(world)
    for nbytes in sorted(timings):
        t = max(v for _r, v in timings[nbytes])
        alg = nbytes / t / 1e9 if t > 0 else 0.0
        sw.sizes.append(SizeResult(nbytes, t, alg, alg * factor))
    if sw.sizes:
        largest = sw.sizes[-1]
        for rank, (nbytes, _loop, _iters) in loop_last.items():
            if nbytes == largest.bytes and largest.time_s > 0:
                sw.own_fraction[rank] = own_last[rank] / largest.time_s
    return sw


# --- launching the CLI elsewhere (srun) and reading its answer ---------------------------------
def worker_argv(master_addr: str, master_port: int, world_size: int, rank_offset: int,
                local_ranks: int = 0, host_store: bool = False, node: str = "",
                level: str = "standard", python: str = "", **options: Any) -> list[str]:
    """The command line of one node's launcher; options: sizes (list of bytes), iters, warmup,
    dtype, timeout, backend, faults (a switch string; "" = none, omitted = the node's own)."""
    argv = [python or sys.executable, "-m", "airlock.dist", "worker",
            "--master-addr", master_addr, "--master-port", str(master_port),
            "--world-size", str(world_size), "--rank-offset", str(rank_offset),
            "--local-ranks", str(local_ranks), "--level", level]
    if host_store:
        argv.append("--host-store")
    if node:
        argv += ["--node", node]
    for key, value in options.items():
        if value is None:
            continue
        if key == "sizes":
            value = ",".join(str(int(v)) for v in value)
        argv += [f"--{key}", str(value)]
    return argv


def parse_report(stdout: str) -> dict[str, Any] | None:
    """The node report from a launcher's stdout (the last `AIRLOCK-DIST ` line); None if absent
    or damaged (the caller counts that node's ranks as missing)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                rep = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return rep if isinstance(rep, dict) else None
    return None


# --- the CLI ------------------------------------------------------------------------------------
def _parse_sizes(text: str) -> list[int]:
    out = []
    for item in text.split(","):
        item = item.strip().upper()
        mult = 1
        for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
            if item.endswith(suffix):
                item, mult = item[:-1], m
        if not item.isdigit():
            raise ValueError(f"--sizes: {text!r} is not a list of sizes like 64K,1M,1G")
        out.append(int(item) * mult)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m airlock.dist")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="run this node's ranks of an all-reduce sweep")
    w.add_argument("--master-addr", required=True)
    w.add_argument("--master-port", type=int, required=True)
    w.add_argument("--world-size", type=int, required=True)
    w.add_argument("--rank-offset", type=int, required=True)
    w.add_argument("--local-ranks", type=int, default=0, help="0 = GPUs here, else [allreduce] "
                   "cpu_ranks")
    w.add_argument("--host-store", action="store_true", help="host the rendezvous store here")
    w.add_argument("--node", default="", help="node name (labels, per-node simulated faults)")
    w.add_argument("--backend", default=None, choices=("auto", "nccl", "gloo"))
    w.add_argument("--sizes", default=None, help="message sizes, e.g. 64K,1M,256M")
    w.add_argument("--iters", type=int, default=None)
    w.add_argument("--warmup", type=int, default=None)
    w.add_argument("--dtype", default=None, choices=tuple(EXACT))
    w.add_argument("--timeout", type=float, default=None)
    w.add_argument("--level", default="standard", choices=("standard", "deep"))
    w.add_argument("--faults", default=None, help="fault switches (default: $AIRLOCK_FAULTS "
                   "and the node's simulation entry)")
    args = p.parse_args(argv)
    try:
        report = _worker(args)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        print(f"airlock.dist: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(MARK + json.dumps(report), flush=True)
    if report["timed_out"]:
        return EXIT_TIMEOUT
    return EXIT_ERROR if report["errors"] or report["leftover"] else EXIT_OK


def _worker(args) -> dict[str, Any]:
    from airlock import faults as faults_mod
    from airlock.checks.allreduce import AllreduceSection, params_for
    from airlock.errors import AirlockError

    node = args.node or socket.gethostname().split(".")[0]
    try:
        from airlock import config as config_mod

        cfg = config_mod.load()
        section = cfg.allreduce
    except AirlockError:
        cfg, section = None, AllreduceSection()
    gpus = local_gpu_count()
    local = args.local_ranks or gpus or section.cpu_ranks
    params = params_for(section, on_gpu=bool(gpus), level=args.level)
    if args.sizes:
        params.sizes = _parse_sizes(args.sizes)
    for key in ("iters", "warmup", "dtype", "timeout", "backend"):
        if getattr(args, key) is not None:
            setattr(params, key, getattr(args, key))
    if args.faults is not None:
        faults = faults_mod.parse(args.faults)
    else:
        faults = faults_mod.active(cfg, node) if cfg is not None else faults_mod.active()
    return launch(args.master_addr, args.master_port, args.world_size, args.rank_offset, local,
                  params, faults, host_store=args.host_store, node=node)


if __name__ == "__main__":
    sys.exit(main())
