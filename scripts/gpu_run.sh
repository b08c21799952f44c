#!/usr/bin/env bash
# Runs on the GPU machine (device tool): install the carried wheels, then GPU tests and benchmarks.
#   scripts/gpu_run.sh tests "tests/agents tests/backtest"   # pytest -m gpu on those paths
#   scripts/gpu_run.sh bench "bench_dqn.py --only abc" ...   # benchmark scripts (bench/<name>)
# Results go to bench/results/ and are copied to $OUT; a short table is printed last by each bench.
# The wheels come from scripts/device_wheels.sh (run here first; carry .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  || echo "warning: wheel install failed"
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd)
export PYTHONUNBUFFERED=1
export FOXHUNT_GIT_REV=$(cat bench/results/.revision 2>/dev/null || echo unknown)
mode=$1; shift
status=0
if [ "$mode" = tests ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider $1 2>&1 | tee ${OUT:-/tmp}/gpu_tests.log | tail -25
  status=${PIPESTATUS[0]}
else
  for b in "$@"; do
    echo "=== $b"
    python3 bench/$b 2>&1 | tail -40
  done
fi
mkdir -p ${OUT:-/tmp/out}
tar czf ${OUT:-/tmp/out}/results_$mode.tgz bench/results/*.json 2>/dev/null || true
exit $status
