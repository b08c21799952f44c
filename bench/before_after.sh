#!/usr/bin/env bash
# Issue 12's proof, "same run, before and after": bench_train of configs/h200-fast.toml on the old
# code (688ee41, the last main revision before [accel] was merged in 78d6478, with its own config)
# and on this revision (bench/configs/h200-fast-688ee41.toml: the same workload in today's keys),
# in one call on the GPU machine. Writes bench/results/before_after_cuda.json (both revisions, the
# config agreement, every run's full bench JSON) and prints a side-by-side table.
#
# LOCAL preparation (here, before the device call: the device copy has no usable .git):
#   rm -rf .before && mkdir .before && git archive 688ee41 src bench configs ':(exclude)bench/results' | tar -x -C .before \
#     && git rev-parse 688ee41 > .before/REVISION && git rev-parse HEAD > bench/results/.revision
# (.before/ is git-ignored, ~1.3 MB). Device command, from the repo root, carrying
# .whl .before bench/results/.revision:
#   bench/before_after.sh
#
# Runs (each its own process: a CUDA illegal memory access poisons the process that hits it):
#   old        688ee41: python -m bench.bench_train --config configs/h200-fast.toml (in .before/,
#              PYTHONPATH=.before/src)
#   new_fused  HEAD: --config bench/configs/h200-fast-688ee41.toml (accel.backend = "fused": the fused
#              acting kernel included, as the old dqn.fused_acting = true; it has an open H200 bug)
#   new_torch  HEAD: the same with --set accel.acting="torch" (what `auto` ships on the H200)
# in two rounds, cold then warm: each label gets its own empty Triton / Inductor cache directories
# (so every cold run compiles everything) and reuses them in the warm round. A run starts only while
# BA_BUDGET_S (default 470 s) has at least BA_MIN_S (45 s) left, and is bounded by timeout.
#
# Knobs (environment): BA_ARGS (extra bench_train flags for every run, e.g. "--folds 3 --epochs 5";
# default none: 1 M bars, 5 folds x 10 epochs, as stop 17), BA_ORDER (label:round list), BA_BUDGET_S,
# BA_MIN_S, T_COLD / T_WARM (per-run limits, default 200 / 100 s), BA_BEFORE (old tree, .before),
# PYTHON (python3).
# CPU check (no GPU): BA_QUICK=1 bench/before_after.sh: bench_train --quick --device cpu, the fused
# parts replaced by their torch twins in every run (old: dqn.fused_* / train.eval_fused = false;
# new: accel.backend = "torch"), result bench/results/before_after_cpu_quick.json. With
# BA_INTERPRET=1 as well, the fused parts stay and run under TRITON_INTERPRET=1 (minutes per run;
# not like for like on a CPU: 688ee41 ran its validation backtests in torch there (train.eval_fused
# was CUDA-only) and torch.compiled its fused train step, HEAD runs the fused backtest kernel under
# the interpreter and the train step's program eagerly). CPU figures check the harness, nothing else.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BEFORE=$(cd "${BA_BEFORE:-.before}" 2>/dev/null && pwd) || { echo "no old tree at ${BA_BEFORE:-.before}: see the local preparation step at the top of $0"; exit 2; }
[ -f "$BEFORE/src/foxhunt/config.py" ] && [ -f "$BEFORE/bench/bench_train.py" ] || { echo "$BEFORE lacks src/ or bench/"; exit 2; }
[ -f "$BEFORE/configs/h200-fast.toml" ] || { echo "$BEFORE lacks configs/h200-fast.toml"; exit 2; }
PY=${PYTHON:-python3}
QUICK=${BA_QUICK:-0}
START=$(date +%s)
BUDGET=${BA_BUDGET_S:-470}
MIN_S=${BA_MIN_S:-45}
NEW_CFG=bench/configs/h200-fast-688ee41.toml
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/before_after.XXXXXX)
CACHE=${BA_CACHE:-/tmp/ba_cache}; rm -rf "$CACHE"

SITE=${BA_SITE:-/tmp/site}  # the wheels' install target (scripts/gpu.sh)
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >/dev/null 2>&1 \
    || echo "warning: wheel install failed"
fi
before_rev=$(cat "$BEFORE/REVISION" 2>/dev/null || echo 688ee41)
after_rev=$(cat bench/results/.revision 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
# A shim per side answers `git rev-parse HEAD` for anything that asks git (the device copy has no .git).
for side in before after; do
  mkdir -p "$WORK/bin_$side"; rev=$before_rev; [ $side = after ] && rev=$after_rev
  printf '#!/bin/sh\necho %s\n' "$rev" > "$WORK/bin_$side/git"; chmod +x "$WORK/bin_$side/git"
done

if [ "$QUICK" = 1 ]; then
  COMMON="--quick --device cpu ${BA_ARGS:-}"
  RESULT=bench/results/before_after_cpu_quick.json
  if [ "${BA_INTERPRET:-0}" = 1 ]; then
    export TRITON_INTERPRET=1; RESULT=bench/results/before_after_cpu_quick_interpret.json; OLD_SET=(); NEW_SET=(); VARIANT="fused parts under TRITON_INTERPRET=1"; OLD_ACTING=fused
  else
    OLD_SET=(--set dqn.fused_env=false --set dqn.fused_acting=false --set dqn.fused_train_step=false --set train.eval_fused=false)
    NEW_SET=(--set 'accel.backend="torch"'); VARIANT="torch twins of the fused parts (no Triton on the CPU)"; OLD_ACTING=torch
  fi
else
  COMMON="${BA_ARGS:-}"; RESULT=bench/results/before_after_cuda.json; OLD_SET=(); NEW_SET=(); VARIANT=""; OLD_ACTING=fused
fi

# The workload check: both configs resolved by their own code, compared key by key.
( cd "$BEFORE" && PYTHONPATH=$SITE:$BEFORE/src "$PY" "$ROOT/bench/before_after.py" dump-config configs/h200-fast.toml "$WORK/config_old.json" ) \
  && PYTHONPATH=$SITE:$ROOT/src "$PY" bench/before_after.py dump-config "$NEW_CFG" "$WORK/config_new.json" \
  && PYTHONPATH=$SITE:$ROOT/src "$PY" bench/before_after.py compare "$WORK/config_old.json" "$WORK/config_new.json" --out "$WORK/agreement.json"
echo "=== config check rc=$?"

run() {  # label round
  local label=$1 round=$2 left limit rc s t js="$WORK/$1_$2.json" log="$WORK/$1_$2.log"
  left=$(( BUDGET - ($(date +%s) - START) ))
  limit=${T_WARM:-100}; [ "$round" = cold ] && limit=${T_COLD:-200}
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$left" -lt "$MIN_S" ]; then
    echo "=== $label/$round skipped: ${left}s of the budget left"; echo "$label $round skip - $js $log" >> "$WORK/manifest"; return
  fi
  export TRITON_CACHE_DIR=$CACHE/$label/triton TORCHINDUCTOR_CACHE_DIR=$CACHE/$label/inductor
  mkdir -p "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR"
  echo "=== $label/$round (limit ${limit}s)"
  s=$(date +%s%N)
  if [ "$label" = old ]; then
    ( cd "$BEFORE" && PATH=$WORK/bin_before:$PATH FOXHUNT_GIT_REV=$before_rev PYTHONPATH=$SITE:$BEFORE/src:$BEFORE \
        timeout -k 10 "$limit" "$PY" -m bench.bench_train --config configs/h200-fast.toml $COMMON "${OLD_SET[@]}" --out "$js" ) > "$log" 2>&1
  else
    local extra=(); [ "$label" = new_torch ] && extra=(--set 'accel.acting="torch"')
    PATH=$WORK/bin_after:$PATH FOXHUNT_GIT_REV=$after_rev PYTHONPATH=$SITE:$ROOT/src:$ROOT \
      timeout -k 10 "$limit" "$PY" -m bench.bench_train --config "$NEW_CFG" $COMMON "${NEW_SET[@]}" "${extra[@]}" --out "$js" > "$log" 2>&1
  fi
  rc=$?; t=$(( ($(date +%s%N) - s) / 1000000 )); t=$(printf "%d.%03d" $((t / 1000)) $((t % 1000)))
  tail -${TAILN:-6} "$log"; echo "=== $label/$round rc=$rc in ${t}s"
  echo "$label $round $rc $t $js $log" >> "$WORK/manifest"
}

: > "$WORK/manifest"
for item in ${BA_ORDER:-old:cold new_fused:cold new_torch:cold old:warm new_fused:warm new_torch:warm}; do
  run "${item%%:*}" "${item##*:}"
done

PYTHONPATH=$ROOT/src "$PY" bench/before_after.py report "$WORK/manifest" --out "$RESULT" --agreement "$WORK/agreement.json" \
  --meta before_rev="$before_rev" --meta after_rev="$after_rev" --meta bench_args="$COMMON" --meta quick="$QUICK" \
  --meta cpu_variant="$VARIANT" --meta old_acting="$OLD_ACTING"
status=$?
cp "$RESULT" "$OUT/" 2>/dev/null; mkdir -p "$OUT/before_after_logs" && cp "$WORK"/*.log "$WORK"/config_*.json "$OUT/before_after_logs/" 2>/dev/null
echo "=== total $(( $(date +%s) - START ))s"
exit $status
