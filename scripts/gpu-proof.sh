#!/usr/bin/env bash
# Airlock on a real GPU in one command: the NVML snapshot as Airlock sees it, `airlock check
# --level standard` on real NVML, the burn-in's TFLOPS beside raw torch.matmul, the injected
# GEMM and memory faults caught, PCIe bandwidth with the NVML link, the P2P matrix and DCGM
# (level 1 when installed; its recorded failure and a hang through a stand-in dcgmi), NCCL with
# a verified all-reduce, and the periodic hook's and the prolog's wall time, into
# $OUT/gpu-proof.json and $OUT/gpu-proof.md (bench/gpu_proof.py says what each step does and
# proves).
#
#   scripts/gpu-proof.sh            on the GPU machine: about 6 minutes on one H200, 9 at most
#   scripts/gpu-proof.sh --cpu      the same steps on the CPU (gloo, simulated NVML): CI runs it
#
# Airlock runs from this source tree (nothing is installed). It needs Python 3.11+, torch (with
# CUDA on a GPU), nvidia-ml-py, and python-hostlist, which the Slurm hooks import: where that
# cannot be installed, bring its pure-Python wheel along in .whl/ (ignored by git):
#   mkdir -p .whl && pip download --no-deps -d .whl python-hostlist
# and carry .whl to the GPU machine. Environment: OUT (default ./gpu-proof-out), PYTHON (default
# python3), BUDGET (seconds for all steps, default 520).
set -euo pipefail
OUT=$(realpath -m "${OUT:-./gpu-proof-out}")  # relative to where it was started
cd "$(dirname "$0")/.."

mode=()
for arg in "$@"; do
  case "$arg" in
    --cpu) mode=(--cpu) ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-proof: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
BUDGET=${BUDGET:-520}
mkdir -p "$OUT"

if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "gpu-proof: $PY is not Python 3.11 or newer" >&2; exit 2
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu-proof: $PY cannot import torch" >&2; exit 2
fi
if [ "${#mode[@]}" -eq 0 ]; then
  if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-proof: torch sees no CUDA device here; run with --cpu for the CPU steps" >&2
    exit 2
  fi
  "$PY" -c 'import pynvml' 2>/dev/null \
    || echo "gpu-proof: warning: nvidia-ml-py (pynvml) missing: NVML will read as absent" >&2
fi
if ! "$PY" -c 'import hostlist' 2>/dev/null && ! ls .whl/python_hostlist-*.whl >/dev/null 2>&1
then
  echo "gpu-proof: warning: python-hostlist is neither installed nor in .whl/: the hook step" \
       "will fail (see --help)" >&2
fi

echo "gpu-proof: $("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA",
  torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU")'),
  budget ${BUDGET}s, output in $OUT" >&2
# The steps keep to the budget themselves; this is the backstop, after which the report on
# disk holds every step that finished.
exec timeout -k 5 "$((BUDGET + 20))" "$PY" bench/gpu_proof.py --out "$OUT" --budget "$BUDGET" \
  "${mode[@]}"
