#!/usr/bin/env bash
# The test command: the CPU suite (GPU tests skip themselves without CUDA).
# pytest exits 5 when nothing was collected; that is not a failure of the suite.
set -uo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export TRITON_INTERPRET=${TRITON_INTERPRET:-1}
# Two pytest-xdist workers (CI has 2 cores; FOXHUNT_TEST_WORKERS=0 runs in one process), a module per
# worker at a time (--dist loadscope: module fixtures are built once); tests/conftest.py gives each
# worker its share of the torch threads, and subprocesses run with one.
workers=${FOXHUNT_TEST_WORKERS:-2}
par=()
if [ "$workers" != "0" ] && python -c "import xdist" 2>/dev/null; then
  par=(-n "$workers" --dist loadscope)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
python -m pytest -q -m "not gpu" "${par[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "no tests collected"; exit 0; fi
exit "$rc"
