#!/usr/bin/env bash
# The GPU must-shows of issue #32 (engines' execution modes) in one device call (an H100/H200: Triton
# 3.6.0, no network), each step under its own deadline, the whole under ~9 minutes:
#   gpu-tests      tests/test_cuda_graphs_gpu.py: a warmed zerojit launch captured in a real
#                  torch.cuda.graph replays bit-equal to eager; a miss inside a real capture raises
#                  CaptureCompileError (warn, error and fallback modes) before anything compiles or
#                  loads, and the capture still replays; the runner's --cuda-graphs on 60 requests.
#   graphs         zerojit run --device cuda --cuda-graphs --check 16 over the shipped trace: decode
#                  steps captured per cuda_graph_batch_sizes bucket and replayed; 0 compiles during
#                  capture and replay, the first 16 graph steps equal to their eager launch, the
#                  median decode step with and without graphs ($OUT/graphs.json, key cuda_graphs).
#   compiled-step  benchmarks/compiled_step.py --device cuda: torch.compile(fullgraph=True) of a
#                  dsv4-like mixed step through the torch.ops.zerojit custom ops (0 graph breaks, 0
#                  runtime compiles, outputs equal to eager).
# STEPS="NAME ..." runs only those steps. A step that runs past its deadline is killed and the next one
# runs; its status says so (124). The whole has a budget (TOTAL_S, default 530 s).
#
# $OUT gets log.txt (every step's output, with its exit status and seconds) and graphs.json.
#
# Usage, from the repository root on the GPU machine:
#   OUT=/some/folder bash benchmarks/gpu_issue32.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/gpu_steps.sh  # require_gpus, step
require_gpus 1 benchmarks/gpu_issue32.sh
OUT=${OUT:-issue32-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/log.txt"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset ZEROJIT_JIT_MONITOR
START=$(date +%s)
TOTAL=${TOTAL_S:-530}


{ date; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$PY" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'; } >>"$LOG" 2>&1

step gpu-tests 170 "$PY" -m pytest -q -rA -m gpu tests/test_cuda_graphs_gpu.py -p no:cacheprovider -o faulthandler_timeout=150
step graphs 220 "$PY" -m zerojit run --device cuda --cuda-graphs --check 16 --no-progress --json "$OUT/graphs.json"
step compiled-step 130 "$PY" benchmarks/compiled_step.py --device cuda
date >>"$LOG"
