#!/usr/bin/env bash
# The one GPU script (run on the GPU machine, e.g. through the device tool): installs the carried
# wheels (scripts/device_wheels.sh, .whl/), then runs GPU tests and benchmarks, each step bounded
# by a timeout; results (JSON) come back in $OUT/results_<mode>.tgz, logs in $OUT/*.log.
#
#   scripts/gpu.sh                                   # every step of STEPS (default: all, ~20 min)
#   STEPS="tests ktests ftests envf" scripts/gpu.sh  # some steps, in this order (three calls cover the list)
#   STEPS="sc_h200 sc_ppo" scripts/gpu.sh          # learning scorecards (sc_fast sc_h200 sc_sb3 sc_ppo sc_sb3_ppo; sc_fast_gate
#                                                  # sc_ppo_gate: SC_SCEN only), tuner (tune),
#                                                  # regime seeds x gamma curves (regime), long-momentum
#                                                  # features (regime_feat), PPO's regime curves (regime_ppo),
#                                                  # seed ensembles (regime_ens, regime_ens_ppo)
#   scripts/gpu.sh tests "tests/agents tests/accel"  # pytest -m gpu on those paths
#   scripts/gpu.sh bench "bench_dqn --only abc" ...  # bench modules (python -m bench.<name> ARGS)
#
# Before the call: git rev-parse HEAD > bench/results/.revision (git-ignored, so carry it): the copy
# on the device has no usable .git and every JSON records this revision.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  || echo "warning: wheel install failed"
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd) PYTHONUNBUFFERED=1
rev=$(cat bench/results/.revision 2>/dev/null || echo unknown)
export FOXHUNT_GIT_REV=$rev
# A shim answers `git rev-parse HEAD` for anything that asks git.
mkdir -p /tmp/bin && printf '#!/bin/sh\necho %s\n' "$rev" > /tmp/bin/git && chmod +x /tmp/bin/git
export PATH=/tmp/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { local t=$1; shift; echo "=== $* (limit ${t}s)"; local s=$(date +%s); timeout "$t" "$@" 2>&1 | tee -a "$OUT/gpu.log" | tail -${TAILN:-25}; local rc=${PIPESTATUS[0]}; echo "=== rc=$rc in $(( $(date +%s) - s ))s"; return $rc; }
mode=${1:-steps}
status=0
case "$mode" in
  tests)
    TAILN=25 step ${T_TESTS:-600} python3 -m pytest -q -m gpu -p no:cacheprovider ${2:-tests} || status=$? ;;
  bench)
    shift
    for b in "$@"; do step ${T_BENCH:-600} python3 -m bench.$b || status=$?; done ;;
  steps)
    STEPS=${STEPS:-tests ktests ftests prof envf dqn bt replay train trainfast}
    # scorecard NAME CONFIG BASELINES [SCENARIOS] [--set ...]: --size gpu, scorecard.json kept as
    # bench/results/scorecard_cuda_NAME.json (the run folders stay on the device: too deep to return).
    # SC_PROF=1: under bench.sample_stacks (where the wall time goes: bench/results/stacks_cuda_NAME.json);
    # every scorecard also leaves its runs' per-fold / per-epoch seconds in bench/results/timings_cuda_NAME.json.
    scorecard() { local d=/tmp/sc_$1 wrap=(); rm -rf "$d"
      [ -n "${SC_PROF:-}" ] && wrap=(-m bench.sample_stacks --out "bench/results/stacks_cuda_$1.json" --)
      step ${T_SC:-420} python3 "${wrap[@]}" -m foxhunt.cli scorecard --size ${SC_SIZE:-gpu} --device ${SC_DEVICE:-cuda} \
      --config "$2" --baselines "$3" --sb3-steps ${SB3_STEPS:-5000} ${4:+--scenarios $4} \
      "${@:5}" --out "$d"; local rc=$?
      cp "$d/scorecard.json" "bench/results/scorecard_cuda_$1.json" 2>/dev/null
      python3 -m bench.run_timings "$d" > "bench/results/timings_cuda_$1.json" 2>/dev/null
      # what each train.abstain_z would have scored (bench/abstain_table.py; read from the run folders, so the
      # scenarios finished before a timeout count too)
      python3 -m bench.abstain_table "$d" > /tmp/abstain.json && [ "$(head -c 2 /tmp/abstain.json)" != "{}" ] \
        && mv /tmp/abstain.json "bench/results/abstain_cuda_$1.json"; return $rc; }
    # One named step; the steps run in the order STEPS lists them.
    run_step() {
      case "$1" in
        # Learning scorecards (issue 13/15; docs/LEARNING.md), ~2.5-6 min each on the H200:
        # FAST_SCEN / PPO_SCEN / H200_SCEN: a subset of scenarios (a whole card can outlast one device call),
        # then FAST_TAG / PPO_TAG / H200_TAG name the file (scorecard_cuda_h200_fast_TAG.json)
        sc_fast) scorecard h200_fast${FAST_TAG:+_$FAST_TAG} configs/h200-fast.toml supervised ${FAST_SCEN:-} ;;
        sc_h200) scorecard h200${H200_TAG:+_$H200_TAG} configs/h200.toml supervised ${H200_SCEN:-} ;;
        # sc_fast_lm / sc_ppo_lm: the same with the 120/250-bar momentum columns (docs/LEARNING.md, stop 21 §7)
        sc_fast_lm) scorecard h200_fast_lm configs/h200-fast.toml supervised "" --set "features.long_momentum=[120,250]" ;;
        sc_ppo_lm) scorecard h200_ppo_lm configs/h200-ppo.toml none "" --set "features.long_momentum=[120,250]" ;;
        # sc_fast_gate / sc_ppo_gate: the configs as they stand (ensembles, stop 23) on the scenarios at risk
        # (SC_SCEN, default regime,no_edge), ~2-3 min each
        sc_fast_gate) scorecard h200_fast_gate configs/h200-fast.toml none ${SC_SCEN:-regime,no_edge} ;;
        sc_ppo_gate) scorecard h200_ppo_gate configs/h200-ppo.toml none ${SC_SCEN:-regime,no_edge} ;;
        sc_sb3) scorecard h200_fast_sb3 configs/h200-fast.toml sb3_dqn no_edge,edge_daily,edge_minute,regime,leak ;;
        sc_ppo) scorecard h200_ppo${PPO_TAG:+_$PPO_TAG} configs/h200-ppo.toml none ${PPO_SCEN:-} ;;
        # sc_ppo_cand (h200-ppo.toml has these settings since stop 23): the best PPO regime setting on the CPU (stop 20), every
        # scenario; 16 epochs: give it T_SC=420 or more
        sc_ppo_cand) scorecard h200_ppo_cand configs/h200-ppo.toml none "" --set ppo.lr=3e-4 --set train.epochs=16 \
          --set ppo.gamma=0.97 --set ppo.ent_coef=0.03 ;;
        sc_sb3_ppo) scorecard h200_ppo_sb3 configs/h200-ppo.toml sb3_ppo no_edge,edge_daily,edge_minute,regime,leak ;;
        # regime: the regime scenario's learning curves over learner seeds and gamma (issue 13: is DQN's
        # regime capture reliably above the 60 % gate? docs/LEARNING.md "Stop 21"), ~11 s a variant.
        regime) step ${T_REGIME:-540} python3 -m bench.bench_learning --config ${REGIME_CONFIG:-configs/h200-fast.toml} \
          --size gpu --scenarios regime --epochs 16 --device cuda --name learning_regime_cuda_h200 --set "features.long_momentum=[]" \
          --variant "seed1:run.seed=1" --variant "seed2:run.seed=2" --variant "seed3:run.seed=3" \
          --variant "g0.8:dqn.gamma=0.8" --variant "g0.9:dqn.gamma=0.9" --variant "g0.9s1:dqn.gamma=0.9;run.seed=1" \
          --variant "g0.9s2:dqn.gamma=0.9;run.seed=2" --variant "g0.97:dqn.gamma=0.97" ;;
        # regime_feat: the same regime curves (seeds 0-3, the config's gamma) with two extra features, the 120- and
        # 250-bar vol-adjusted momentum (bench_learning --longmom; paired with `regime`'s seeds 0-3), ~2 min.
        regime_feat) step ${T_REGIME:-540} python3 -m bench.bench_learning --config ${REGIME_CONFIG:-configs/h200-fast.toml} \
          --size gpu --scenarios regime --epochs 16 --device cuda --longmom 120,250 --name learning_regime_longmom_cuda_h200 \
          --variant "seed1:run.seed=1" --variant "seed2:run.seed=2" --variant "seed3:run.seed=3" ;;
        # regime_ppo: PPO's best CPU regime setting (lr 3e-4, gamma 0.97, ent_coef 0.03), seeds 0-2, without and
        # with the long-momentum features, ~4 min.
        regime_ppo) local lm rc=0; for lm in "" 120,250; do
            step ${T_REGIME:-540} python3 -m bench.bench_learning --config configs/h200-ppo.toml --size gpu --scenarios regime \
              --epochs 16 --device cuda ${lm:+--longmom $lm} ${lm:---set features.long_momentum=[]} --name learning_regime_ppo${lm:+_longmom}_cuda_h200 \
              --set ppo.lr=3e-4 --set ppo.gamma=0.97 --set ppo.ent_coef=0.03 --variant "seed1:run.seed=1" \
              --variant "seed2:run.seed=2" || rc=$?
          done; return $rc ;;
        # (The configs set the 120/250 columns since stop 23: the runs "without" them unset it.)
        # regime_ens: seed ensembles (bench_learning --seeds 4: members = seeds 0-3, paired with `regime` and
        # `regime_feat`; scored alone and as one mean-Q ensemble), without and with the long-momentum columns, ~3 min.
        regime_ens) local lm rc=0; for lm in "" 120,250; do
            step ${T_REGIME:-540} python3 -m bench.bench_learning --config ${REGIME_CONFIG:-configs/h200-fast.toml} --size gpu \
              --scenarios regime --epochs 16 --device cuda --seeds 4 ${lm:+--longmom $lm} ${lm:---set features.long_momentum=[]} \
              --name learning_regime_ens${lm:+_longmom}_cuda_h200 || rc=$?
          done; return $rc ;;
        # regime_ens_ppo: the same for PPO's candidate setting (regime_ppo's), 3 seeds, ~3 min.
        regime_ens_ppo) local lm rc=0; for lm in "" 120,250; do
            step ${T_REGIME:-540} python3 -m bench.bench_learning --config configs/h200-ppo.toml --size gpu --scenarios regime \
              --epochs 16 --device cuda --seeds 3 ${lm:+--longmom $lm} ${lm:---set features.long_momentum=[]} --name learning_regime_ens_ppo${lm:+_longmom}_cuda_h200 \
              --set ppo.lr=3e-4 --set ppo.gamma=0.97 --set ppo.ent_coef=0.03 || rc=$?
          done; return $rc ;;
        tune) step ${T_TUNE:-540} python3 -m bench.bench_tune --deadline $(( ${T_TUNE:-540} - 40 )) ;;
        tests) TAILN=8 step ${T_TESTS:-240} python3 -m pytest -q -m gpu -p no:cacheprovider tests --ignore=tests/kernels ;;
        ktests) TAILN=30 step ${T_KTESTS:-200} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels -s ;;
        # ftests: the fused learner's GPU tests outside tests/kernels (ktests runs the kernels' own).
        ftests) TAILN=30 step ${T_FTESTS:-150} python3 -m pytest -q -m gpu -p no:cacheprovider tests/agents/test_dqn_fused_step.py \
          tests/agents/test_replay_wide_per.py tests/accel -s ;;
        # kwide: the 32-ary PER trees' kernel tests and their sampler's (after a kernel change)
        kwide) TAILN=10 step ${T_KWIDE:-120} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_wide_tree_fused.py \
          tests/agents/test_replay_wide_per.py ;;
        kbts) TAILN=10 step ${T_KBTS:-90} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_backtest_fused.py -k small_exact ;;
        replay) step ${T_REPLAY:-90} python3 -m bench.bench_replay ;;
        kbt) TAILN=30 step ${T_KBT:-200} python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_backtest_fused.py -s ;;
        prof) step ${T_PROF:-150} python3 -m bench.profile_dqn ;;
        envf) step ${T_ENVF:-30} python3 -m bench.bench_env_fused ;;
        dqn) step ${T_DQN:-330} python3 -m bench.bench_dqn --sb3-steps ${SB3_STEPS:-10000} ;;
        bt) step ${T_BT:-150} python3 -m bench.bench_backtest --fast --torch-bars 2000 ;;
        train) step ${T_TRAIN:-300} python3 -m bench.bench_train ;;
        trainfast) step ${T_TRAINFAST:-300} python3 -m bench.bench_train --config configs/h200-fast.toml --out bench/results/train_cuda_fast.json ;;
        *) echo "=== unknown step: $1"; return 2 ;;
      esac
    }
    for s in $STEPS; do run_step "$s" || status=$?; done
    ;;
  *) echo "usage: scripts/gpu.sh [steps | tests PATHS | bench NAME...]"; exit 2 ;;
esac
tar czf "$OUT/results_$mode.tgz" bench/results/*.json 2>/dev/null || true
exit $status
