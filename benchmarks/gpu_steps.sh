# Sourced by the benchmarks/gpu_*.sh scripts: one GPU must-show step under a deadline, and the
# check that the machine has the GPUs a script needs.
# step NAME SECONDS CMD...: run CMD under a deadline (killed 10 s after it if it ignores SIGTERM),
# its output appended to $LOG under a header with its exit status and seconds. Needs LOG, START
# (the script's start, epoch seconds) and TOTAL (its budget in seconds); STEPS="NAME ..." runs only
# those steps. A step with less than 20 s of the budget left is skipped, saying so; a deadline past
# the budget is cut to what is left.
step() {
  local name=$1 limit=$2 t0 rc=0 left
  shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
    return
  fi
  left=$((TOTAL - ($(date +%s) - START)))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, ${left} s of the ${TOTAL} s budget left" | tee -a "$LOG"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s%N)
  echo "== $name (deadline ${limit} s): $*" >>"$LOG"
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))  # shell arithmetic: the device image has no bc
  echo "== $name: exit $rc after $((ms / 1000)).$(printf %03d $((ms % 1000))) s" >>"$LOG"
  echo "$name: exit $rc"
}

# require_gpus N SCRIPT: unless nvidia-smi lists N GPUs or more, say so in one line and exit 2, before
# the script makes its output folder (without it every step failed and the script exited 0).
require_gpus() {
  local have
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$have" -lt "$1" ]; then
    echo "$2 needs $1 NVIDIA GPU$([ "$1" -gt 1 ] && echo s); nvidia-smi lists $have: run it on the GPU machine" >&2
    exit 2
  fi
}
