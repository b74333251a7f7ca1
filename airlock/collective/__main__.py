"""`python -m airlock.collective worker ...`: run this node's ranks and print the node report as one
`AIRLOCK-DIST {json}` line (exit 0 done, 1 error, 3 timeout, 4 not measured: no secret, no
rendezvous, arguments or a module of Airlock's own). See airlock.collective for the model."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airlock import paths, protocol
from airlock.collective.launcher import launch, local_gpu_count
from airlock.collective.params import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNMEASURED,
    params_for,
    parse_sizes,
)
from airlock.collective.pattern import EXACT
from airlock.collective.rendezvous import secret_from
from airlock.config import loader as config_mod
from airlock.errors import AirlockError, ConfigError, Unmeasured
from airlock.hw import faults as faults_mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m airlock.collective")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="run this node's ranks of an all-reduce sweep")
    w.add_argument("--master-addr", required=True)
    w.add_argument("--master-port", type=int, required=True)
    w.add_argument("--world-size", type=int, required=True)
    w.add_argument("--rank-offset", type=int, required=True)
    w.add_argument("--local-ranks", type=int, default=0, help="0 = GPUs here, else [allreduce] "
                   "cpu_ranks")
    w.add_argument("--host-store", action="store_true", help="host the rendezvous store here")
    w.add_argument("--secret-file", default="", help="the run's secret (root-only, 0600); "
                   "needed by every member of a multi-node group (else $AIRLOCK_DIST_SECRET)")
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
    except (Unmeasured, ConfigError, ModuleNotFoundError) as exc:  # say so by the exit code
        print(f"airlock.collective: {exc}", file=sys.stderr)
        return EXIT_UNMEASURED
    except Exception as exc:  # one line, never a traceback
        print(f"airlock.collective: {exc}", file=sys.stderr)
        return EXIT_ERROR
    protocol.emit(protocol.DIST, report)
    if report["timed_out"]:
        return EXIT_TIMEOUT
    return EXIT_ERROR if report["errors"] or report["leftover"] else EXIT_OK


def _worker(args) -> dict[str, Any]:
    node = args.node or paths.local_node_name()
    try:
        cfg = config_mod.load()
        section = cfg.allreduce
    except AirlockError:
        cfg, section = None, config_mod.defaults("allreduce")
    gpus = local_gpu_count()
    local = args.local_ranks or gpus or section.cpu_ranks
    params = params_for(section, on_gpu=bool(gpus), level=args.level)
    if args.sizes:
        params.sizes = parse_sizes(args.sizes)
    for key in ("iters", "warmup", "dtype", "timeout", "backend"):
        if getattr(args, key) is not None:
            setattr(params, key, getattr(args, key))
    if args.faults is not None:
        faults = faults_mod.parse(args.faults)
    else:
        faults = faults_mod.active(cfg, node) if cfg is not None else faults_mod.active()
    secret = secret_from(args.secret_file)
    return launch(args.master_addr, args.master_port, args.world_size, args.rank_offset, local,
                  params, faults, host_store=args.host_store, node=node, secret=secret)


if __name__ == "__main__":
    sys.exit(main())
