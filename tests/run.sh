#!/usr/bin/env bash
# The whole test suite: two pytest processes, because Triton reads TRITON_INTERPRET when a kernel
# is decorated. Extra arguments go to both (e.g. -x, -k NAME). ZEROJIT_TEST_PROCESSES=compile-only
# (or interpreter) runs only that one.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python}
processes=${ZEROJIT_TEST_PROCESSES:-compile-only interpreter}
status=0
if [[ " $processes " == *" compile-only "* ]]; then
  echo "== compile-only and host tests =="
  TRITON_INTERPRET=0 "$py" -m pytest -q -p no:cacheprovider "$@" || status=$?
fi
if [[ " $processes " == *" interpreter "* ]]; then
  echo "== interpreter tests (TRITON_INTERPRET=1) =="
  TRITON_INTERPRET=1 "$py" -m pytest -q -p no:cacheprovider "$@" || { rc=$?; [ $rc -eq 5 ] || status=$rc; }
fi
exit $status
