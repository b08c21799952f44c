#!/usr/bin/env bash
# One device call that runs every GPU test and the benchmarks, each bounded by a timeout so that the
# whole call fits the lease; results (JSON) come back in $OUT/results_final.tgz, logs in $OUT/*.log.
# Before the call: git rev-parse HEAD > bench/results/.revision (git-ignored, so carry it to the
# device with .whl): the copy there has no usable .git and the JSON records this revision.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  || echo "warning: wheel install failed"
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd) PYTHONUNBUFFERED=1
rev=$(cat bench/results/.revision 2>/dev/null || echo unknown)
export FOXHUNT_GIT_REV=$rev
# The copy on the GPU machine has no .git: a shim answers `git rev-parse HEAD` for the benchmarks.
mkdir -p /tmp/bin && printf '#!/bin/sh\necho %s\n' "$rev" > /tmp/bin/git && chmod +x /tmp/bin/git
export PATH=/tmp/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { local t=$1; shift; echo "=== $* (limit ${t}s)"; local s=$(date +%s); timeout "$t" "$@" 2>&1 | tee -a "$OUT/final.log" | tail -${TAILN:-25}; echo "=== rc=${PIPESTATUS[0]} in $(( $(date +%s) - s ))s"; }
# STEPS picks what to run (default all); the whole list needs ~20 min, i.e. three device calls:
#   STEPS="tests ktests ftests envf" ...   STEPS="dqn" ...   STEPS="bt replay train trainfast prof" ...
STEPS=${STEPS:-tests ktests ftests prof envf dqn bt replay train trainfast}
want() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }
want tests && TAILN=8 step ${T_TESTS:-90} python3 -m pytest -q -m gpu -p no:cacheprovider tests --ignore=tests/kernels
want ktests && TAILN=30 step ${T_KTESTS:-200} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels -s
# ftests: the fused learner's GPU tests outside tests/kernels (ktests runs the kernels' own).
want ftests && TAILN=30 step ${T_FTESTS:-150} python3 -m pytest -q -m gpu -p no:cacheprovider tests/agents/test_dqn_fused_step.py tests/agents/test_replay_wide_per.py -s
want kbts && TAILN=10 step ${T_KBTS:-90} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_backtest_fused.py -k small_exact
want replay && step ${T_REPLAY:-90} python3 bench/bench_replay.py
want kbt && TAILN=30 step ${T_KBT:-200} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_backtest_fused.py -s
want prof && step ${T_PROF:-150} python3 bench/profile_dqn.py
want envf && step ${T_ENVF:-30} python3 bench/bench_env_fused.py
want dqn && step ${T_DQN:-330} python3 bench/bench_dqn.py --sb3-steps ${SB3_STEPS:-10000}
want bt && step ${T_BT:-150} python3 bench/bench_backtest.py --fast --torch-bars 2000
want train && step ${T_TRAIN:-300} python3 bench/bench_train.py
want trainfast && step ${T_TRAINFAST:-300} python3 bench/bench_train.py --config configs/h200-fast.toml --out bench/results/train_cuda_fast.json
tar czf "$OUT/results_final.tgz" bench/results/*.json 2>/dev/null || true
