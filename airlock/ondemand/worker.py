"""What srun runs on each node of an on-demand check (`python -m airlock.ondemand
node-worker|group-worker ...`, not for people): the level, or one member of a group all-reduce,
answered as one marked line on stdout (airlock.protocol) for airlock.ondemand.run to read."""

from __future__ import annotations

import argparse
import sys
import time

from airlock import finish, paths, protocol
from airlock.checks import groupcheck
from airlock.config import loader as config_mod
from airlock.errors import AirlockError
from airlock.runner import run_level


def node_worker(level: str, only: list[str]) -> int:
    cfg = config_mod.load()
    node = paths.local_node_name()
    started = time.time()
    records, ctx = run_level(cfg, node, level, only=only or None)
    run = finish.summarize(node, level, "ondemand", records, started, ctx.profile_name)
    try:
        finish.record_run(cfg, node, run)
    except OSError as exc:
        print(f"airlock: {node}: results not saved: {exc}", file=sys.stderr)
    protocol.emit(protocol.NODE, run)
    return 0


def group_worker(master: str, port: int, nodes: list[str], level: str,
                 secret_file: str = "") -> int:
    cfg = config_mod.load()
    node = paths.local_node_name()
    result = groupcheck.run_member(cfg, node, nodes, master, port, level,
                                   secret_file=secret_file)
    protocol.emit(protocol.GROUP, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m airlock.ondemand")
    sub = ap.add_subparsers(dest="worker", required=True)
    nw = sub.add_parser("node-worker")
    nw.add_argument("--level", default="standard")
    nw.add_argument("--only", action="append", default=[])
    gw = sub.add_parser("group-worker")
    gw.add_argument("--master", required=True)
    gw.add_argument("--port", type=int, required=True)
    gw.add_argument("--nodes", required=True)
    gw.add_argument("--level", default="standard")
    gw.add_argument("--secret-file", default="")
    args = ap.parse_args(argv)
    try:
        if args.worker == "node-worker":
            return node_worker(args.level, args.only)
        return group_worker(args.master, args.port, args.nodes.split(","), args.level,
                            args.secret_file)
    except AirlockError as exc:
        print(f"airlock: {exc}", file=sys.stderr)
        return exc.exit_code
