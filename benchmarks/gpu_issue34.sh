#!/usr/bin/env bash
# Issue #34's must-shows in one device call on a machine of 2+ GPUs (2, 4 or 8: one rank per GPU),
# each step under its own deadline, the whole under ~8 minutes (TOTAL_S, default 470 s):
#   gpus               the GPUs and the NCCL/NVLink-multicast environment the ranks inherit.
#   distributed-warmup benchmarks/distributed_warmup.py on NCCL, one process per GPU: the dsv4-like
#                      key space cold, every rank alone vs warmup(group=WORLD) with one shared cache
#                      folder and with one per rank: the slowest rank's seconds, compiles over the
#                      ranks, the speed-up ($OUT/distributed_warmup.json).
#   tensor-parallel    benchmarks/tensor_parallel.py --device cuda, one runner rank per GPU over the
#                      shipped trace (1000 requests), an NCCL all-reduce after every step:
#                      replay  cold cache folder, the runner's warm-up sharded across the group,
#                              error mode: 0 runtime compiles on every rank;
#                      miss    fallback mode, the last rank's key space cut (one key per kernel):
#                              every step's collective wait <= 2x the median step on every rank,
#                              the swaps on that rank only, each cut key learned once in the
#                              shared learned-keys file ($OUT/tensor_parallel.json: every rank's
#                              step times, collective waits and sums).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1: the device notes), exported here and set again by both benchmarks.
# STEPS="NAME ..." runs only those steps. A step past its deadline is killed (status 124) and the
# next one runs. $OUT gets log.txt (every step's output, exit status and seconds) and the JSONs.
#
# Usage, from the repository root on the GPU machine:
#   OUT=/some/folder bash benchmarks/gpu_issue34.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/gpu_steps.sh  # require_gpus, step
require_gpus 2 benchmarks/gpu_issue34.sh
OUT=${OUT:-issue34-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/log.txt"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset ZEROJIT_JIT_MONITOR ZEROJIT_LEARN
START=$(date +%s)
TOTAL=${TOTAL_S:-470}

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{ date; nproc; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  "$PY" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, "cuda devices:", torch.cuda.device_count(), "nccl:", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  env | grep -E '^(NCCL_|TORCH_SYMM_MEM_|NVSHMEM_)' | sort; } >>"$LOG" 2>&1
echo "$GPUS GPUs: one rank each" | tee -a "$LOG"

step distributed-warmup 200 "$PY" benchmarks/distributed_warmup.py --ranks "$GPUS" --space dsv4-like \
  --json "$OUT/distributed_warmup.json"
step tensor-parallel 260 "$PY" benchmarks/tensor_parallel.py --ranks "$GPUS" --miss-rank $((GPUS - 1)) --device cuda \
  --requests 1000 --json "$OUT/tensor_parallel.json"
date >>"$LOG"
