"""bench/bench_tune_long.py's chunked study: chunks in fresh processes resume one Optuna journal
study; its accumulated time is the sum of the chunks' wall times; every trial is counted once; a
finished study runs no further chunk; a chunk with other study settings is refused; trials left
RUNNING by a dead chunk are failed and re-queued with their parameters; `compare` on the finished
study, in a fresh process, writes the best-against-untuned result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from bench.tune_long_study import STUDY, accumulated_s, chunks, fail_stale, journal_storage
from foxhunt.tune.study import quiet_optuna
from foxhunt.tune.worker import result_attrs

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "bench.bench_tune_long", *args, "--quick", "--device", "cpu"]
    return subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=180)


def _run(d: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _bench("study", "--storage", str(d), "--total-s", "26", "--chunk-s", "14", "--min-chunk-s", "4", "--workers", "1",
                  *extra)


@pytest.mark.slow
def test_two_chunks_in_fresh_processes_resume_one_study_and_their_times_and_trials_add_up(tmp_path: Path) -> None:
    d = tmp_path / "long"
    for _ in range(2):
        r = _run(d)
        assert r.returncode == 0, r.stderr
    study = optuna.load_study(study_name=STUDY, storage=journal_storage(d))
    cs = chunks(study)
    assert [c["index"] for c in cs] == [0, 1] and all(c["state"] == "done" for c in cs)
    assert accumulated_s(study) == pytest.approx(sum(c["wall_s"] for c in cs))
    assert cs[1]["planned_s"] == pytest.approx(min(14, 26 - cs[0]["wall_s"]))  # what the first left
    trials = study.trials
    assert [t.number for t in trials] == list(range(len(trials)))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)  # graceful stop: nothing RUNNING
    assert trials[0].params == study.user_attrs["untuned"]
    for c in cs:  # each chunk's trials: its worker (id = chunk index with one worker), counted once
        mine = [t for t in trials if result_attrs(t)["worker"] == c["index"]]
        assert len(mine) == c["finished_after"] - c["finished_before"] == c["reports"][0]["finished"] >= 1
    assert cs[0]["finished_before"] == 0 and cs[1]["finished_before"] == cs[0]["finished_after"] == len(
        [t for t in trials if result_attrs(t)["worker"] == 0])
    assert cs[1]["finished_after"] == len(trials)

    # The study is done (26 s within 4 s): a third process adds no chunk and no trial.
    r = _run(d)
    assert r.returncode == 0 and "study done" in r.stdout, r.stderr
    study = optuna.load_study(study_name=STUDY, storage=journal_storage(d))
    assert len(chunks(study)) == 2 and len(study.trials) == len(trials)

    # Other settings than the study's: one line, exit code 2, nothing run.
    r = _run(d, "--scenario", "regime")
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "scenario='edge_daily'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    # compare (a fresh process, as on the device): both configurations on the hold-out, one scenario row.
    out = tmp_path / "compare.json"
    r = _bench("compare", "--storage", str(d), "--scenarios", "leak", "--seeds", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["study"]["complete"] == len(trials) and res["untuned"]["number"] == 0
    assert len(res["holdout_runs"]["untuned"]) == len(res["holdout_runs"]["best"]) == 1
    assert set(res["scorecard"]["leak"]) == {"untuned", "best"} and res["overfitting"]["n_trials"] == len(trials)


def test_fail_stale_marks_running_trials_failed_and_requeues_their_parameters(tmp_path: Path) -> None:
    quiet_optuna()
    storage = journal_storage(tmp_path)
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    dists = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    done = study.ask(dists)
    study.tell(done, 1.0)
    running = study.ask(dists)  # a trial whose worker died: journal storage keeps it RUNNING
    assert fail_stale(study, storage, max_retry=2) == [running.number]
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "FAIL", "WAITING"]
    retry = study.trials[2]
    assert retry.params == study.trials[1].params and retry.system_attrs["failed_trial"] == running.number
    assert fail_stale(study, storage, max_retry=2) == []  # nothing RUNNING any more
