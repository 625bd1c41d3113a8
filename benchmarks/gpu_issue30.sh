#!/usr/bin/env bash
# The GPU must-shows of issue #30 in one device call (an H200: Triton 3.6.0, no network), each step
# under its own deadline, the whole under ~9 minutes:
#   tuned-exec  an autotuned kernel whose module makes no hardware probe (zerojit.examples.tuned_scale's
#               tuned_scale_kernel launched raw) recorded with no GPU (CUDA_VISIBLE_DEVICES= and
#               --target cuda:90: tuning keys with launches, no choices), then exec'd on the GPU in error
#               mode: tuned at warm-up, 0 compiles and 0 benchmarks while the program runs, an unrecorded
#               size served by the default policy, outputs bit-equal to the kernel's own call with the same
#               config forced; a second exec reads the tuning file instead of tuning
#               (tests/test_recorded_tuning_gpu.py), then the same as a transcript of the commands.
# STEPS="NAME ..." runs only those steps. A step that runs past its deadline is killed and the next one
# runs; its status says so (124). The whole has a budget (TOTAL_S, default 530 s).
#
# $OUT gets log.txt (every step's output, with its exit status and seconds) and tuned_exec.json (the
# transcript's exec --json).
#
# Usage, from the repository root on the GPU machine:
#   OUT=/some/folder bash benchmarks/gpu_issue30.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/gpu_steps.sh  # require_gpus, step
require_gpus 1 benchmarks/gpu_issue30.sh
OUT=${OUT:-issue30-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/log.txt"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset ZEROJIT_JIT_MONITOR
START=$(date +%s)
TOTAL=${TOTAL_S:-530}


# The transcript: record with no GPU, exec twice on the GPU (tuned at warm-up, then from the tuning file).
tuned_exec_transcript() {
  local dir
  dir=$(mktemp -d)
  cat >"$dir/app.py" <<'APP'
import sys
import torch
import triton
from zerojit.examples.tuned_scale import tuned_scale_kernel

device = "cuda" if torch.cuda.is_available() else "cpu"
for word in sys.argv[1:]:
    n = int(word)
    x = torch.arange(n, dtype=torch.float32, device=device)
    tuned_scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, torch.empty_like(x), n, 2.0)
print("best config at the last size:", tuned_scale_kernel.fn.best_config)
APP
  cd "$dir" || return 1
  export TRITON_CACHE_DIR="$dir/cache" TRITON_HOME="$dir/home"
  CUDA_VISIBLE_DEVICES= "$PY" -m zerojit record --target cuda:90 --report -o m.json -- python app.py 1000 4096 || return 1
  "$PY" -m zerojit exec --manifest m.json --jit-monitor-mode error --no-progress --json "$OUT/tuned_exec.json" \
    -- python app.py 1000 4096 3000 || return 1
  "$PY" -m zerojit exec --manifest m.json --jit-monitor-mode error --no-progress -- python app.py 1000 4096 3000
}

{ date; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$PY" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'; } >>"$LOG" 2>&1

step tuned-exec 240 "$PY" -m pytest -q -rA -s -m gpu tests/test_recorded_tuning_gpu.py -p no:cacheprovider -o faulthandler_timeout=120
export -f tuned_exec_transcript
export PY OUT
step tuned-exec-transcript 180 bash -c tuned_exec_transcript  # (timeout runs programs, not shell functions)
date >>"$LOG"
