#!/usr/bin/env bash
# Every GPU figure of issue #29 in one device call (an H200: torch 2.11, Triton 3.6.0, Python 3.12,
# no network), each step under its own deadline, the whole under ~9 minutes:
#   set-up     the wheels of the GPU tests' third-party kernels (fla-core, liger-kernel, einops...)
#              from the folder $1 (default ./wheels) into /tmp/site, offline; torch's, Triton's and
#              the tree's bytecode compiled (an image that ships none pays seconds of imports in
#              every process the benchmarks start);
#   gpu-tests  pytest -m gpu -q tests (tests/test_fallback_gpu.py among them);
#   miss       benchmarks/miss.py: a class not warmed, Triton's inline compile vs the fallback;
#   generic    benchmarks/generic_speed.py: generic vs specialized variants at every size;
#   runner     benchmarks/fallback_runner.py: zerojit run --device cuda, cut key space in fallback
#              mode beside an uncut run, --check;
#   cpu        benchmarks/fallback_runner.py --device cpu: the compile-only path's counts.
# STEPS="NAME ..." runs only those steps (wheels and bytecode always run).
# A step that runs past its deadline is killed and the next one runs; its status says so (124).
# The whole has a budget (TOTAL_S, default 530 s): each step's deadline is cut to what is left, and a
# step with less than 20 s left is skipped, saying so.
#
# At most 8 files land in $OUT (what a device call brings back, no deeper than $OUT/a/b/file):
# log.txt (every step's output, with its exit status and seconds), one table per benchmark
# (miss.txt, generic_speed.txt, fallback_runner.txt, fallback_runner_cpu.txt) and the JSON of miss.py
# and fallback_runner.py (miss.json, fallback_runner.json) and of generic_speed.py where it takes --json.
#
# Usage, from the repository root on the GPU machine (the wheels' folder carried with the tree):
#   OUT=/some/folder bash benchmarks/gpu_issue29.sh [WHEELS_FOLDER]
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/gpu_steps.sh  # require_gpus, step
require_gpus 1 benchmarks/gpu_issue29.sh
WHEELS=${1:-wheels}
OUT=${OUT:-issue29-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
export PYTHONPATH="src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE= PYTHONUNBUFFERED=1
unset ZEROJIT_JIT_MONITOR
START=$(date +%s)
TOTAL=${TOTAL_S:-530}


# table NAME SECONDS FILE CMD...: a step whose output is also kept whole in $OUT/FILE.
table() {
  local name=$1 limit=$2 file=$3
  shift 3
  step "$name" "$limit" bash -c '"$@" 2>&1 | tee "'"$OUT/$file"'"; exit "${PIPESTATUS[0]}"' _ "$@"
}

{ date; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$PY" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'; } >>"$LOG" 2>&1
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  STEPS= step wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
else
  echo "== wheels: none in $WHEELS/ (the tests of third-party kernels skip)" >>"$LOG"
fi
sources=$("$PY" -c 'import os, torch, triton; print(os.path.dirname(torch.__file__), os.path.dirname(triton.__file__))')
# shellcheck disable=SC2086  # two folders
STEPS= step bytecode 60 "$PY" -m compileall -q -j 0 src benchmarks /tmp/site $sources  # (exit 1 on a file of newer syntax is harmless)

step gpu-tests 200 "$PY" -m pytest -q -rA -m gpu tests -p no:cacheprovider -o faulthandler_timeout=90
table miss 110 miss.txt "$PY" benchmarks/miss.py --rounds 4 --timeout 45 --json "$OUT/miss.json"
if [ -f benchmarks/generic_speed.py ]; then
  json=()
  if "$PY" benchmarks/generic_speed.py --help 2>/dev/null | grep -q -- "--json"; then json=(--json "$OUT/generic_speed.json"); fi
  table generic 90 generic_speed.txt "$PY" benchmarks/generic_speed.py ${json[@]+"${json[@]}"}
else
  echo "== generic: benchmarks/generic_speed.py is not in this tree" >>"$LOG"
fi
table runner 150 fallback_runner.txt "$PY" benchmarks/fallback_runner.py --device cuda --rounds 2 --requests 600 \
  --timeout 70 --json "$OUT/fallback_runner.json"
table cpu 40 fallback_runner_cpu.txt "$PY" benchmarks/fallback_runner.py --device cpu --rounds 1 --requests 300 --timeout 30
date >>"$LOG"
