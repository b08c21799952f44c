#!/usr/bin/env bash
# Issue 16's 30-minute study on the H200, in device calls of at most 10 minutes
# (bench/bench_tune_long.py; the study, its time accounting and stale-trial handling:
# bench/tune_long_study.py). Every call resumes the one Optuna study kept in .tune_long/ (journal
# file storage: text) and decides by itself what to do:
#   - the study's accumulated time < TL_TOTAL_S: run one chunk (bench_tune_long study) as long as
#     this call allows (TL_CHUNK_S at most); when what remains plus compare fits in this call, run
#     exactly what remains, then compare;
#   - the study is done (within TL_MIN_CHUNK_S): compare (both configurations retrained: hold-out
#     and scorecard rows) -> bench/results/tune_long_cuda.json.
#
# LOCAL, before each call (the device copy has no usable .git):
#   git rev-parse HEAD > bench/results/.revision       # git-ignored: carry it
#   ls .whl/*.whl || scripts/device_wheels.sh          # the wheels the GPU image lacks
# DEVICE call, from the repository root (.tune_long is absent on the first call: a new study):
#   run(command="bench/tune_long.sh", carry=[".tune_long", ".whl", "bench/results/.revision"], timeout_s=600)
# It writes to $OUT exactly two files: tune_long.tgz (.tune_long/ without its lock files, plus
# bench/results/tune_long_*.json once compare has run) and tune_long.log (what it printed).
# LOCAL, after each call, from the repository root (replaces .tune_long/ with the returned one):
#   rm -rf .tune_long && tar xzf <files_at>/tune_long.tgz && cat <files_at>/tune_long.log
# then call again until the log says "compare done". With the defaults the 1,800-s study takes four
# calls (3 x ~500-s chunks, then the rest + compare), more than one session's 30 device-minutes:
# the study directory carries over to the next session as is. To keep the study itself, commit
# .tune_long/journal.log and trials.csv under bench/results/ (text, a few MB).
#
# Knobs (environment): TL_TOTAL_S (1800), TL_CHUNK_S (500), TL_CALL_S (this call's wall budget,
# 560: the device limit is 600 s), TL_MARGIN_S (kept free after a chunk for the last trials and the
# tar, 40), TL_COMPARE_S (what compare is given, 240), TL_MIN_CHUNK_S (30), TL_WORKERS (4 on one
# GPU), TL_DIR (.tune_long), TL_ARGS (extra flags for every bench_tune_long call, e.g.
# "--scenario regime"; the study's defining flags must be the same on every call), PYTHON (python3).
# CPU check (no GPU): TL_QUICK=1 TL_TOTAL_S=40 TL_CHUNK_S=15 TL_CALL_S=60 TL_COMPARE_S=60 bench/tune_long.sh
# (--quick --device cpu, one worker; result bench/results/tune_long_cpu_quick.json).
set -uo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
START=$(date +%s)
PY=${PYTHON:-python3}
DIR=${TL_DIR:-.tune_long}
TOTAL=${TL_TOTAL_S:-1800}
CHUNK=${TL_CHUNK_S:-500}
CALL=${TL_CALL_S:-560}
MARGIN=${TL_MARGIN_S:-40}
COMPARE=${TL_COMPARE_S:-240}
MIN=${TL_MIN_CHUNK_S:-30}
WORKERS=${TL_WORKERS:-4}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/tune_long.log
if [ "${TL_QUICK:-0}" = 1 ]; then
  FLAGS="--quick --device cpu --min-chunk-s ${TL_MIN_CHUNK_S:-2} ${TL_ARGS:-}"; MIN=${TL_MIN_CHUNK_S:-2}; WORKERS=${TL_WORKERS:-1}
else
  FLAGS="--min-chunk-s $MIN ${TL_ARGS:-}"
fi
wheels=(.whl/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" >/dev/null 2>&1 \
    || echo "warning: wheel install failed" | tee -a "$LOG"
  export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd)
else
  export PYTHONPATH=$(pwd)/src:$(pwd)${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
if [ -f bench/results/.revision ]; then
  export FOXHUNT_GIT_REV=$(cat bench/results/.revision)
fi

say() { echo "[tune_long $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
left() { echo $(( START + CALL - $(date +%s) )); }
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | cut -d. -f1; }
status() { "$PY" -m bench.bench_tune_long status --storage "$DIR" --total-s "$TOTAL" $FLAGS 2>>"$LOG" | tail -1; }
pack() {
  local files=(bench/results/tune_long_*.json)
  tar czf "$OUT/tune_long.tgz" --exclude='*.lock' "$DIR" "${files[@]}" 2>>"$LOG" || say "tar failed"
}
trap pack EXIT

compare() {
  local l=$(( $(left) - 15 )); [ "$l" -gt 420 ] && l=420
  say "compare (deadline ${l}s)"
  timeout -k 10 $(( l + 10 )) "$PY" -m bench.bench_tune_long compare --storage "$DIR" --deadline "$l" $FLAGS 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && say "compare done" || say "compare exited with $rc"
  return "$rc"
}

s=$(status); say "status: ${s:-none}"
[ -n "$s" ] || { say "status failed (see above)"; exit 2; }
if [ "$(field "$s" done)" != 1 ]; then
  rem=$(( $(field "$s" remaining_s) + 1 ))
  avail=$(( $(left) - MARGIN ))
  if [ $(( rem + COMPARE )) -le "$avail" ]; then
    chunk=$rem                          # the rest of the study, then compare in this call
  else
    chunk=$(( avail < CHUNK ? avail : CHUNK ))
  fi
  if [ "$chunk" -lt "$MIN" ]; then
    say "only ${avail}s usable in this call: no chunk"; exit 0
  fi
  say "chunk of ${chunk}s with $WORKERS worker(s)"
  # The chunk stops its workers itself (at chunk + 30 s at the latest, or 3 trials); this timeout
  # (SIGTERM: the chunk's time is counted, its RUNNING trials re-queued) is the backstop.
  timeout -k 15 $(( chunk + MARGIN + 20 )) "$PY" -m bench.bench_tune_long study --storage "$DIR" --total-s "$TOTAL" \
    --chunk-s "$chunk" --workers "$WORKERS" $FLAGS 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { say "study chunk exited with $rc"; exit "$rc"; }
  s=$(status); say "status: $s"
fi
if [ "$(field "$s" done)" = 1 ]; then
  if [ "$(left)" -ge "$COMPARE" ]; then compare; exit $?; fi
  say "study done; compare in the next call ($(left)s left here, TL_COMPARE_S=$COMPARE)"
fi
exit 0
