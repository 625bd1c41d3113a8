#!/usr/bin/env bash
# Every figure of issues #21's and #33's must-shows in one GPU call, each step timed, results under $OUT:
#   set-up: the wheels in .whl/ (fla-core, liger-kernel, einops: the GPU tests' third-party
#           kernels) into /tmp/site, and byte-compiled torch and Triton (an image that ships them
#           without bytecode, as the H200 image does, pays 0.1 s of Triton's compiler imports per
#           process and 4-5 s of torch's import without it);
#   the GPU tests (pytest -m gpu), first_launch.py --repeat 3, launch.py (15 rounds),
#   warmup.py --repeat 3, kernels.py, autotune.py --rounds 3, and zerojit run --device cuda with
#   defaults on a cold cache. On an H100 (2026-12-06) the steps after the GPU tests took ~240 s.
# At most 8 files land in $OUT (what a device call brings back): log.txt (every step's output)
# and one JSON per benchmark.
#
# STEPS (space-separated step names, default every step) runs only those, in the order above; e.g.
# issue #33's figures without the GPU tests: STEPS="bytecode first-launch launch warmup autotune run"
# (autotune.py --rounds 3 is the step "autotune").
#
# Usage, from the repository root on the GPU machine:
#   OUT=/some/folder bash benchmarks/gpu_must_show.sh
#   OUT=/some/folder STEPS="first-launch autotune" bash benchmarks/gpu_must_show.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/gpu_steps.sh  # require_gpus, step
require_gpus 1 benchmarks/gpu_must_show.sh
OUT=${OUT:-must-show}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
export PYTHONPATH="src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=

# step NAME CMD...: run CMD, its output appended to the log under a header with its status and seconds.
STEPS=${STEPS:-wheels bytecode gpu-tests first-launch launch warmup kernels autotune run}
step() {
  local name=$1 t0 rc=0
  shift
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  t0=$(date +%s%N)
  echo "== $name: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1 || rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))  # shell arithmetic: the device image has no bc
  echo "== $name: exit $rc after $((ms / 1000)).$(printf %03d $((ms % 1000))) s" >>"$LOG"
  echo "$name: exit $rc"
}

{ date; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >>"$LOG" 2>&1
if compgen -G ".whl/*.whl" >/dev/null; then
  step wheels "$PY" -m pip install -q --no-deps --target /tmp/site .whl/*.whl
fi
sources=$("$PY" -c 'import os, torch, triton; print(os.path.dirname(torch.__file__), os.path.dirname(triton.__file__))')
# shellcheck disable=SC2086  # two folders
step bytecode "$PY" -m compileall -q -j 0 src benchmarks $sources  # (torch ships a file of newer syntax: exit 1 there is harmless)
step gpu-tests "$PY" -m pytest -q -m gpu tests -p no:cacheprovider
step first-launch "$PY" benchmarks/first_launch.py --repeat 3 --json "$OUT/first_launch.json"
step launch "$PY" benchmarks/launch.py --rounds 15 --json "$OUT/launch.json"
step warmup "$PY" benchmarks/warmup.py --repeat 3 --json "$OUT/warmup.json"
step kernels "$PY" benchmarks/kernels.py --json "$OUT/kernels.json"
step autotune "$PY" benchmarks/autotune.py --rounds 3 --json "$OUT/autotune.json"
cold=$(mktemp -d)
step run env TRITON_CACHE_DIR="$cold" "$PY" -m zerojit run --device cuda --no-progress --json "$OUT/run.json"
rm -rf "$cold"
