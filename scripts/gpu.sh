#!/usr/bin/env bash
# The one GPU script (run on a CUDA machine, e.g. through the device tool): installs the carried wheels
# (scripts/device_wheels.sh -> .whl/), then runs the named steps in order, each bounded by a timeout.
# JSON results land in bench/results/ (and $OUT/results.tgz), logs in $OUT/gpu.log.
#
#   STEPS="tests ktests sanitize" scripts/gpu.sh
#
# | step      | what it runs                                                            | ~H200 time |
# |-----------|-------------------------------------------------------------------------|------------|
# | tests     | pytest -m gpu outside tests/kernels (learners, replay, env, accel)      | 2-4 min    |
# | ktests    | every test of tests/kernels on CUDA (small shapes and the -m gpu ones), ${KT_WORKERS:-8} xdist workers | ~2-4 min |
# | sanitize  | every Triton kernel under compute-sanitizer memcheck (scripts/sanitize_kernels.py) | 2-4 min |
# | acting    | the acting kernel's Q over a grid of net shapes and launches (scripts/acting_shape_sweep.py) | ~1 min |
# | noedge    | foxhunt train with configs/h200-fast.toml and h200-ppo.toml on a 1 M-bar no-edge file | 4 min |
# | sc_fast   | foxhunt scorecard --size gpu, configs/h200-fast.toml (SC_SCEN: scenario subset)        | 5-7 min |
# | sc_ppo    | the same for configs/h200-ppo.toml                                      | 5-8 min    |
# | family    | foxhunt scorecard --family ${FAMILY:-dev} --draws ${DRAWS:-12} for both configs        | 10+ min |
# | fampar    | bench/bench_family.py: each run of FAM_RUNS ("TAG|CONFIG|k=v;k=v|PROCESSES[|DRAWS]", space-separated) on the ${FAMILY:-heldout} | ~9 min |
# |           | draws ${FAM_DRAWS:-0..11}, split over its processes, every process side by side on the one GPU; each run's rows |  |
# |           | merge into family_<FAMILY>_cuda_<TAG>.json with the family gates over all its draws (held-out: report only)   |  |
# | bench     | the benchmarks BENCHMARKS.md cites (BENCH: a subset of bench_*.py names) | 10+ min   |
# | mtests    | the lockstep members', stacked members' and epoch graphs' GPU tests (-m gpu)             | ~2 min |
# | gates     | issue 44's gates, each walk-forward alone: bench_members with the DQN and PPO decision-grid configurations | ~4 min |
# |           | (3 members, lockstep; DQN also sequential), GATE_SET: extra --set flags for both                      |            |
# | members   | bench_members: M = ${MEMBERS:-1,3,9,27} lockstep (sequential up to ${MAX_SEQ:-9}) for h200-fast, h200-ppo and  | ~8 min |
# |           | h200-direct on ${MEM_ARGS:---folds 1 --epochs 4}                                                              |            |
# | stacked   | issue 44's stacked members: bench_members [16,16] 3 vs 27 with the batched collection (dqn.joint_rounds and  | ~8 min |
# |           | dqn.counter_draws) on and off, PPO with ppo.batched_rollouts (+ counter_draws) on and off, each alone; then  |        |
# |           | a tune population of 32 stacked trials                                                                     |        |
# |           | beside one trial at a time                                                                                 |        |
# | universe  | issue 47 at the gpu layout: bench_universe_learning --size gpu (UNI_ARGS: extra flags, e.g. --set ...) on the  | 10+ min |
# |           | dev universes 0,1,2 (pooled and per-symbol), then bench_universe_scale's minute universe (the fused env step) |        |
# | streams   | dqn.overlap_collection: its GPU tests, bench_dqn --only e, bench_train --streams two,off,one,two (STREAMS_ARGS: | ? |
# |           | extra bench_train flags, e.g. "--bars 200000 --folds 3 --epochs 4")    |            |
#
# Subsets: T_PATHS (tests: test paths), KT_PATHS (ktests: test paths), SAN_KERNELS (sanitize: comma-separated kernel labels).
# Extra arguments for a step: SC_SET / FAMILY_SET ("--set k=v ..."), T_<STEP> (its timeout, seconds). BUDGET_S: the
# call's own limit; every step's timeout is cut to fit in it (see step() below), so the call never dies mid-copy.
# Before the call: git rev-parse HEAD > bench/results/.revision (git-ignored, so carry it, with .whl): the
# copy on the device has no .git and every JSON records this revision.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -f /tmp/site/.installed ]; then  # once per machine (several gpu.sh may run side by side after it)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
    && touch /tmp/site/.installed || echo "warning: wheel install failed"
fi
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd) PYTHONUNBUFFERED=1
rev=$(cat bench/results/.revision 2>/dev/null || echo unknown)
export FOXHUNT_GIT_REV=$rev
mkdir -p /tmp/bin && printf '#!/bin/sh\necho %s\n' "$rev" > /tmp/bin/git && chmod +x /tmp/bin/git  # answers `git rev-parse HEAD`
export PATH=/tmp/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
# step LIMIT CMD...: runs CMD under `timeout`. With BUDGET_S (the device call's limit, seconds), a step's limit is cut to
# what is left of it minus CP_S (default 30 s, for copying results out), and a step with under 20 s left is skipped:
# a call that runs out then still returns the steps that finished.
cut() { local t=$1; [ -z "${BUDGET_S:-}" ] && { echo "$t"; return; }  # LIMIT -> the limit that fits in BUDGET_S
        local left=$(( BUDGET_S - ${CP_S:-30} - ($(date +%s) - T0) )); [ "$t" -gt "$left" ] && t=$left; echo "$t"; }
step() { local t; t=$(cut "$1"); shift
         if [ "$t" -lt 20 ]; then echo "=== skipped (BUDGET_S: ${t}s left): $*"; return 124; fi
         echo "=== $* (limit ${t}s)"; local s=$(date +%s); timeout "$t" "$@" 2>&1 | tee -a "$OUT/gpu.log" | tail -${TAILN:-20}
         local rc=${PIPESTATUS[0]}; echo "=== rc=$rc in $(( $(date +%s) - s ))s"; return $rc; }
# scorecard NAME CONFIG [args...]: --size gpu, scorecard.json kept as bench/results/scorecard_cuda_NAME.json
scorecard() { local name=$1 cfg=$2; shift 2; local d=/tmp/sc_$name; rm -rf "$d"
  step ${T_SC:-540} python3 -m foxhunt.cli scorecard --size gpu --device cuda --config "$cfg" "$@" --out "$d"; local rc=$?
  cp "$d/scorecard.json" "bench/results/scorecard_cuda_$name.json" 2>/dev/null; return $rc; }
noedge_file() {  # the scorecard's no-edge market (GARCH-t martingale, minute bars) as a user's bar file
  [ -f /tmp/noedge.parquet ] || python3 -c "from foxhunt.scorecard.markets import no_edge; from foxhunt.data.writer import write_bars; \
write_bars(no_edge(1_000_000).bars, '/tmp/noedge.parquet')"; }
run_step() {
  case "$1" in
    tests) TAILN=12 step ${T_TESTS:-300} python3 -m pytest -q -m gpu -p no:cacheprovider ${T_PATHS:-tests --ignore=tests/kernels} ;;
    ktests) local n=(); python3 -c 'import xdist' 2>/dev/null && n=(-n "${KT_WORKERS:-8}" --dist loadfile)  # compile-bound: spread over cores
            TAILN=25 step ${T_KTESTS:-480} python3 -m pytest -q -p no:cacheprovider "${n[@]}" ${KT_PATHS:-tests/kernels} ;;
    sanitize) TAILN=30 step ${T_SANITIZE:-420} python3 scripts/sanitize_kernels.py --tools memcheck --workers 8 ${SAN_KERNELS:+--kernels $SAN_KERNELS} \
                --out bench/results/sanitizer_cuda.json ;;
    acting) TAILN=140 step ${T_ACTING:-150} python3 scripts/acting_shape_sweep.py --workers 12 --out bench/results/acting_shapes_cuda.json ;;
    noedge) noedge_file; local rc=0 c
      for c in h200-fast h200-ppo; do rm -rf /tmp/runs_$c
        TAILN=14 step ${T_NOEDGE:-300} python3 -m foxhunt.cli train --config configs/$c.toml --data /tmp/noedge.parquet \
          --set "run.out_dir=\"/tmp/runs_$c\"" --name noedge ${NOEDGE_SET:-} || rc=$?
        ls /tmp/runs_$c/noedge/report.html /tmp/runs_$c/noedge/summary.json || rc=1
        cp /tmp/runs_$c/noedge/summary.json "bench/results/train_noedge_cuda_$c.json" 2>/dev/null
      done; return $rc ;;
    sc_fast) scorecard h200_fast${SC_TAG:+_$SC_TAG} configs/h200-fast.toml --baselines quant ${SC_SCEN:+--scenarios $SC_SCEN} ${SC_SET:-} ;;
    sc_ppo) scorecard h200_ppo${SC_TAG:+_$SC_TAG} configs/h200-ppo.toml --baselines quant ${SC_SCEN:+--scenarios $SC_SCEN} ${SC_SET:-} ;;
    family) local rc=0 c
      for c in h200-fast h200-ppo; do
        T_SC=${T_FAMILY:-900} scorecard "family_${FAMILY:-dev}_${c#h200-}${SC_TAG:+_$SC_TAG}" configs/$c.toml --family ${FAMILY:-dev} \
          --draws ${DRAWS:-12} --baselines quant ${FAMILY_SET:-} || rc=$?
      done; return $rc ;;
    fampar) local rc=0 spec tag cfg set par i pid kv x; local -a pids=() tags=() sets=(); local all=${FAM_DRAWS:-0,1,2,3,4,5,6,7,8,9,10,11}
      local fam=${FAMILY:-heldout} dv=${FAM_DEVICE:-cuda}; dv=${dv%%:*}; echo "=== fampar: family $fam, draws $all, runs: ${FAM_RUNS:?FAM_RUNS is empty}"
      for spec in $FAM_RUNS; do IFS='|' read -r tag cfg set par draws <<< "$spec"; tags+=("$tag"); sets=()
        IFS=';' read -ra kv <<< "$set"; for x in "${kv[@]}"; do [ -n "$x" ] && sets+=(--set "$x"); done
        for ((i = 0; i < par; i++)); do
          local part; part=$(echo "${draws:-$all}" | tr ',' '\n' | awk -v p="$par" -v i="$i" '(NR - 1) % p == i' | paste -sd,)
          [ -z "$part" ] && continue
          OMP_NUM_THREADS=2 timeout "$(cut ${T_FAMPAR:-540})" python3 -m bench.bench_family --family "$fam" --config "$cfg" --device "${FAM_DEVICE:-cuda}" \
            --size "${FAM_SIZE:-gpu}" --draws "$part" --tag "$tag" "${sets[@]}" ${FAM_ARGS:-} --name "family_${fam}_${dv}_${tag}_part$i" \
            > "$OUT/fampar_${tag}_$i.log" 2>&1 & pids+=($!)
        done
      done; for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
      for tag in "${tags[@]}"; do python3 -m bench.merge_parts "family_${fam}_${dv}_${tag}" || rc=$?; tail -n 5 "$OUT"/fampar_${tag}_*.log; done
      return $rc ;;
    mtests) TAILN=12 step ${T_TESTS:-300} python3 -m pytest -q -m gpu -p no:cacheprovider tests/train/test_lockstep.py \
              tests/agents/test_dqn_epoch_graph.py tests/agents/test_ppo_epoch_graph.py tests/tune/test_joint_validation.py \
              tests/train/test_lockstep_stacked.py tests/agents/test_dqn_member_stack.py tests/tune/test_population_stacked.py ;;
    gates) local rc=0 ema='features.ema_horizons=[10,30,100,300,1000,3000]' grid='train.decision_grid=[1,8,32]'
      step ${T_GATE:-240} python3 -m bench.bench_members --config configs/h200-fast.toml --members 3 --modes lockstep,sequential \
        --set "$ema" --set dqn.n_step=3 --set "$grid" --set dqn.gamma=0.9 ${GATE_SET:-} --set 'features.cache_dir="/tmp/fcache"' --tag gate_dqn || rc=$?
      step ${T_GATE:-240} python3 -m bench.bench_members --config configs/h200-ppo.toml --members 3 --modes lockstep \
        --set "$ema" --set "$grid" ${GATE_SET:-} --set 'features.cache_dir="/tmp/fcache"' --tag gate_ppo || rc=$?
      return $rc ;;
    members) local rc=0 c
      for c in h200-fast h200-ppo h200-direct; do
        step ${T_MEMBERS:-200} python3 -m bench.bench_members --config configs/$c.toml --members ${MEMBERS:-1,3,9,27} \
          --max-sequential ${MAX_SEQ:-9} ${MEM_ARGS:---folds 1 --epochs 4} --set 'features.cache_dir="/tmp/fcache"' --tag "scale_${c#h200-}" || rc=$?
      done; return $rc ;;
    stacked) local rc=0 m="python3 -m bench.bench_members --config configs/h200-fast.toml --members 3,27 --modes lockstep --folds 2 \
        --epochs 4 --warmup-each --set dqn.hidden=[16,16] --set dqn.head_hidden=8 --set features.cache_dir=\"/tmp/fcache\" --set dqn.stack_members=true"
      step ${T_MEMBERS:-150} $m --set dqn.joint_rounds=true --set dqn.counter_draws=true --tag stack16batched_counter_fast || rc=$?
      step ${T_MEMBERS:-150} $m --set dqn.joint_rounds=false --tag stack16off_fast || rc=$?
      local p="python3 -m bench.bench_members --config configs/h200-ppo.toml --members 3,27 --modes lockstep --folds 2 \
        --epochs 4 --warmup-each --set ppo.hidden=[16,16] --set ppo.head_hidden=8 --set features.cache_dir=\"/tmp/fcache\""
      step ${T_MEMBERS:-150} $p --set ppo.batched_rollouts=true --set ppo.counter_draws=true --tag ppo16batched_counter || rc=$?
      step ${T_MEMBERS:-150} $p --tag ppo16own || rc=$?
      step ${T_TUNE:-200} python3 -m bench.bench_tune --workers --population 32 32 --seconds 20 --no-eval --no-scorecard \
        --set dqn.stack_members=true --set dqn.joint_rounds=true --name tune_cuda_population_stacked_batched_warm || rc=$?
      step ${T_TUNE:-200} python3 -m bench.bench_tune --workers 1 --seconds 75 --no-scorecard --name tune_cuda_k1_baseline_batched || rc=$?
      return $rc ;;
    universe) local rc=0
      step ${T_UNIVERSE:-1200} python3 -m bench.bench_universe_learning --family dev --universes 0,1,2 --size gpu --device cuda \
        --modes pooled,per_symbol ${UNI_ARGS:-} || rc=$?
      step ${T_BENCH:-600} python3 -m bench.bench_universe_scale --device cuda --layout minute --symbols 50 --years 1 --folds 2 || rc=$?
      return $rc ;;
    streams) local rc=0
      TAILN=12 step ${T_TESTS:-300} python3 -m pytest -q -m gpu -p no:cacheprovider tests/agents/test_dqn_overlap.py || rc=$?
      step ${T_BENCH:-600} python3 -m bench.bench_dqn --only e --streams two,off,one,two --name dqn_streams_cuda || rc=$?
      step ${T_BENCH:-600} python3 -m bench.bench_train --streams two,off,one,two ${STREAMS_ARGS:-} || rc=$?
      return $rc ;;
    bench) local rc=0 b; for b in ${BENCH:-bench_env bench_env_fused bench_dqn bench_ppo bench_replay bench_backtest bench_train}; do
        step ${T_BENCH:-600} python3 -m bench.$b || rc=$?; done; return $rc ;;
    *) echo "=== unknown step: $1 (see the table at the top of scripts/gpu.sh)"; return 2 ;;
  esac
}
status=0
for s in ${STEPS:-tests ktests}; do run_step "$s" || status=$?; done
tar czf "$OUT/results.tgz" bench/results/*.json 2>/dev/null || true
exit $status
