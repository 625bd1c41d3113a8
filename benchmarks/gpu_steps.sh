# Sourced by the benchmarks/gpu_issue*.sh scripts: one GPU must-show step under a deadline.
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
