"""What `airlock doctor` says of the running Slurm's settings a preflight needs (pure: from
`scontrol show config`'s keys). Nothing at all while [preflight] is off."""

from __future__ import annotations

import re
from typing import Any

from airlock.preflight.entry import SPARE_S

# PrologFlags that make every node's prolog run at allocation: Alloc itself, and the flags
# slurm.conf(5) says imply it (Contain; X11 and RunInJob imply Contain).
ALLOC_FLAGS = {"alloc", "contain", "x11", "runinjob"}
UNLIMITED = {"65534", "unlimited", "(null)", "0"}
# The first release whose slurmd gives the prolog SLURM_JOB_QOS (26.05.0rc1's CHANGELOG: "Add
# SLURM_JOB_QOS to Prolog/Epilog environment").
QOS_IN_PROLOG = (26, 5)


def qos_item(conf: dict[str, str], cfg: Any) -> tuple[str, str, str] | None:
    """What a [preflight] qos filter costs on this release (None without one)."""
    if not cfg.preflight.qos:
        return None
    m = re.search(r"(\d+)\.(\d+)", conf.get("SLURM_VERSION", ""))
    if m is None:
        return ("WARN", "preflight qos", "Slurm version unknown: the prolog may not be told a "
                "job's QOS; it then asks slurmctld (`scontrol show job`) once per job that "
                "passes the other filters")
    version = (int(m.group(1)), int(m.group(2)))
    if version >= QOS_IN_PROLOG:
        return ("OK", "preflight qos", f"Slurm {m.group(0)} gives the prolog SLURM_JOB_QOS: "
                "the filter costs no Slurm call")
    return ("OK", "preflight qos", f"Slurm {m.group(0)} does not give the prolog SLURM_JOB_QOS "
            "(26.05 does): a job that passes every other filter costs one `scontrol show job` "
            "in each member's prolog, and one whose QOS slurmctld does not tell gets no "
            "preflight")


def items(conf: dict[str, str], cfg: Any) -> list[tuple[str, str, str]]:
    """(status, name, detail) lines, status OK, WARN or FAIL."""
    if cfg is None or not cfg.preflight.enabled:
        return []
    out = []
    flags = {f.strip().lower() for f in conf.get("PrologFlags", "").split(",") if f.strip()}
    if flags & ALLOC_FLAGS:
        out.append(("OK", "PrologFlags", f"{conf['PrologFlags']}: every node's prolog runs at "
                                         "allocation, a job's preflight members meet"))
    else:
        out.append(("FAIL", "PrologFlags", "no Alloc with [preflight] enabled: a node's prolog "
                    "waits for its first step, so a job's members never meet (every preflight "
                    "inconclusive); set PrologFlags=Alloc"))
    raw = (conf.get("PrologEpilogTimeout", "").split() or [""])[0]
    need = cfg.prolog.budget + cfg.preflight.budget + SPARE_S
    if raw.lower() in UNLIMITED or not raw:
        out.append(("OK", "preflight budget", f"{cfg.preflight.budget:g} s (PrologEpilogTimeout "
                                              "unlimited)"))
    elif not raw.isdigit():
        out.append(("WARN", "preflight budget", f"PrologEpilogTimeout {raw!r} unreadable"))
    elif int(raw) < need:
        out.append(("WARN", "preflight budget", f"PrologEpilogTimeout {raw} s < [prolog] budget "
                    f"+ [preflight] budget + {SPARE_S:g} s ({need:g} s): a preflight gets less "
                    "time than its budget, and a culprit search may end inconclusive"))
    else:
        out.append(("OK", "preflight budget", f"{cfg.preflight.budget:g} s within "
                                              f"PrologEpilogTimeout {raw} s"))
    qos = qos_item(conf, cfg)
    if qos is not None:
        out.append(qos)
    return out
