#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) to run Airlock, its demo and its tests:
# Slurm 22.05 and munge from Debian, Slurm 24.11 and 26.05 in Debian 13 and sid chroots beside
# it (built once, cached in /var/cache/airlock), the CPU build of torch, then Airlock with its
# test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages, each installed only when its program is missing: Slurm and munge; faketime
# (a wall-clock step injected into one hook run by the fault-matrix tests); systemd's
# systemd-analyze (the rendered units are verified by systemd itself); chromium (the console's
# browser test drives it through Playwright, whose own browser download is not used); promtool
# from Debian's prometheus (deploy/'s alerting rules are checked and tested with it); a C
# compiler (tests/unit/bindlog.py preloads a bind() recorder into the processes under test).
declare -A pkg=([slurmctld]=slurmctld [slurmd]=slurmd [scontrol]=slurm-client [munged]=munge
                [faketime]=faketime [systemd-analyze]=systemd [chromium]=chromium
                [promtool]=prometheus [cc]=gcc)
need=()
for b in "${!pkg[@]}"; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || need+=("${pkg[$b]}")
done
if [ "${#need[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The cluster tests run on three Slurm releases: the chroots of 24.11 (trixie) and 26.05 (sid),
# about two minutes each the first time, milliseconds when cached.
bash scripts/slurm-chroot.sh trixie sid >/dev/null

PY=${PYTHON:-python3}
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
"$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q -e '.[test]'
echo "airlock: setup done ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
