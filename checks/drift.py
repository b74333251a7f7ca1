"""Fleet drift: this node's driver, CUDA, VBIOS, GPU firmware (InfoROM image), HCA firmware and
kernel versions against the fleet of the same profile, as CHS's configcheck diffs a node against
a golden one and GCM flags a VBIOS mismatch. A fact where the node differs from the fleet's
majority warns by default, or fails with [drift] action = "fail".

The node's own facts are this check's figures ("facts"), so every registration publishes them
in the run document that goes to the shared directory, where the other nodes read them. Also
recorded, never compared: the node's hardware identity ("identity": instance id from DMI, GPU
serials), which the recovery service's escalation memory keys on.

How trust in the fleet is established (other nodes' documents are input from strangers; the
same rules as the burn-in's fleet median, checks/fleet.py):
* only nodes Slurm lists (one call; no fleet when Slurm cannot answer), one vote per node;
* read through airlock.paths.SafeDir: no symlinks followed, files owned by root only;
* each document validates as a run of the node whose folder holds it (results.run_problem), of
  the same profile as this node, and its facts validate field by field (known names, short
  strings of version characters; anything else drops that node's vote, named in the figures);
* a majority needs [drift] min_nodes voters and more than [drift] majority of them agreeing.
Whoever can write the shared directory can still forge a majority, so fleet-relative
differences alone only warn unless the operator opts into "fail" (the shared directory then
being as trusted as the nodes' root); the node's own checks (driver mismatch across its GPUs,
the burn-in's floor) fail it regardless.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.fleet import fleet_members, read_fleet
from airlock.checks.snapshot import snapshot_or_outcome
from airlock.config.sections.checks import DRIFT_FACTS

CHECK = "drift"
FACTS = DRIFT_FACTS
VALUE = re.compile(r"^[\w.+:,()/ -]{1,80}$")


# --- gather ----------------------------------------------------------------------------------
def _joined(values) -> str:
    """One fact from several devices: the one value, or every distinct value sorted."""
    vals = sorted({v.strip() for v in values if v and v.strip()})
    return ",".join(vals)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read(256).strip()
    except OSError:
        return ""


def hca_firmware(sys_root: str) -> str:
    base = os.path.join(sys_root, "class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return ""
    return _joined(_read(os.path.join(base, d, "fw_ver")) for d in names)


def kernel(proc_root: str) -> str:
    return _read(os.path.join(proc_root, "sys", "kernel", "osrelease")) or os.uname().release


def instance_id(sys_root: str) -> str:
    """The instance (EC2 Nitro: the instance id in board_asset_tag), else the board's UUID."""
    dmi = os.path.join(sys_root, "class", "dmi", "id")
    tag = _read(os.path.join(dmi, "board_asset_tag"))
    if tag.startswith("i-"):
        return tag
    return _read(os.path.join(dmi, "product_uuid")) or tag


def local_facts(snap, sys_root: str, proc_root: str) -> dict[str, str]:
    gpus = [g for g in snap.gpus if not g.lost]
    return {
        "driver": snap.driver_version or _joined(g.driver_version for g in gpus),
        "cuda": snap.cuda_version,
        "vbios": _joined(g.vbios_version for g in gpus),
        "gpu_firmware": _joined(g.inforom_version for g in gpus),
        "hca_firmware": hca_firmware(sys_root),
        "kernel": kernel(proc_root),
    }


def identity(snap, sys_root: str) -> dict[str, Any]:
    return {"instance": instance_id(sys_root),
            "gpus": sorted(g.serial for g in snap.gpus if g.serial)}


IDENTITY = re.compile(r"^[\w.:-]{1,80}$")


def identity_keys(run: dict[str, Any]) -> frozenset[str]:
    """The hardware identity a run's drift record carries, as the recovery service's memory
    keys it ("instance:<id>", "gpu:<serial>"); empty when the run has none. The document is
    input (validated here, bad values dropped)."""
    for rec in run.get("checks", []) if isinstance(run, dict) else ():
        if not isinstance(rec, dict) or rec.get("check") != CHECK:
            continue
        ident = (rec.get("figures") or {}).get("identity")
        if not isinstance(ident, dict):
            return frozenset()
        keys = set()
        inst = ident.get("instance")
        if isinstance(inst, str) and IDENTITY.match(inst):
            keys.add(f"instance:{inst}")
        for serial in ident.get("gpus") or ():
            if isinstance(serial, str) and IDENTITY.match(serial):
                keys.add(f"gpu:{serial}")
        return frozenset(keys)
    return frozenset()


# --- the fleet's documents (validated field by field) ---------------------------------------
def facts_of(run: dict[str, Any], profile: str) -> dict[str, str] | None:
    """The drift facts a validated run document carries for `profile`, or None."""
    if run.get("profile") != profile:
        return None
    for rec in run.get("checks", []):
        if not isinstance(rec, dict) or rec.get("check") != CHECK:
            continue
        facts = (rec.get("figures") or {}).get("facts")
        if not isinstance(facts, dict) or set(facts) - set(FACTS):
            return None
        out = {}
        for key, value in facts.items():
            if not isinstance(value, str) or (value and not VALUE.match(value)):
                return None
            out[key] = value
        return out
    return None


# --- verdict (pure) --------------------------------------------------------------------------
def fleet_majority(fleet: dict[str, dict[str, str]], fact: str, min_nodes: int,
                   majority: float) -> tuple[str | None, int, int]:
    """(the value more than `majority` of the voters share, its count, voters); None when
    fewer than min_nodes nodes report the fact or no value has such a majority."""
    votes = [f[fact] for f in fleet.values() if f.get(fact)]
    if len(votes) < max(min_nodes, 1):
        return None, 0, len(votes)
    value, count = Counter(votes).most_common(1)[0]
    if count / len(votes) <= majority:
        return None, count, len(votes)
    return value, count, len(votes)


def verdict_drift(mine: dict[str, str], fleet: dict[str, dict[str, str]], facts: list[str],
                  min_nodes: int, majority: float, action: str,
                  ident: dict[str, Any] | None = None, ignored: list[str] | None = None,
                  fleet_note: str = "") -> Outcome:
    figures: dict[str, Any] = {"facts": mine, "fleet_nodes": len(fleet)}
    if ident is not None:
        figures["identity"] = ident
    if ignored:
        figures["ignored"] = ignored[:10]
    differs, judged = [], []
    for fact in facts:
        if not mine.get(fact):
            continue
        value, count, voters = fleet_majority(fleet, fact, min_nodes, majority)
        if value is None:
            continue
        judged.append(fact)
        if mine[fact] != value:
            differs.append(f"{fact} {mine[fact]} vs fleet {value} ({count}/{voters} nodes)")
    figures["judged"] = judged
    if differs:
        figures["differs"] = differs
        more = f" (+{len(differs) - 1} more)" if len(differs) > 1 else ""
        if action == "fail":
            return failed(CHECK, f"{differs[0]}{more}", "reboot", **figures)
        return warned(CHECK, f"{differs[0]}{more}", **figures)
    if not judged:
        why = fleet_note or (f"{len(fleet)} other nodes of this profile, fewer than "
                             f"{min_nodes} agreeing on any fact")
        return skipped(CHECK, f"no fleet to compare with ({why}); facts recorded")
    return passed(CHECK, f"{', '.join(judged)} as the fleet's majority ({len(fleet)} nodes)",
                  **figures)


# --- the check -------------------------------------------------------------------------------
def check_drift(ctx) -> Outcome:
    s, sysc = ctx.cfg.drift, ctx.cfg.system
    snap = snapshot_or_outcome(ctx, CHECK)
    if isinstance(snap, Outcome):
        return snap
    mine = local_facts(snap, sysc.sys_root, sysc.proc_root)
    mine = {k: v for k, v in mine.items() if not v or VALUE.match(v)}  # what others can read
    ident = identity(snap, sysc.sys_root)
    ignored: list[str] = []
    fleet: dict[str, dict[str, str]] = {}
    note = ""
    if not ctx.cfg.shared_dir:
        note = "no shared_dir"
    else:
        members = fleet_members(ctx.cfg, ignored)
        if members is None:
            note = "Slurm's node list unreadable"
        else:
            fleet = read_fleet(ctx.cfg.shared_dir, ctx.node, ctx.profile.name, ignored=ignored,
                               members=members, extract=facts_of)
    out = verdict_drift(mine, fleet, list(s.facts), s.min_nodes, s.majority, s.action, ident,
                        ignored, note)
    if out.verdict.value == "skip":  # the facts must still be published for the others
        figures = {"facts": mine, "identity": ident, "fleet_nodes": len(fleet)}
        if ignored:
            figures["ignored"] = ignored[:10]
        return Outcome(CHECK, out.verdict, out.detail, figures)
    return out
