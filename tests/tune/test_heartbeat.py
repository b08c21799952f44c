"""Trials without a heartbeat (foxhunt.tune.heartbeat.OrphanSweep): a RUNNING trial that never beat
is failed once it has been seen so for the grace period, and re-queued by the storage's retry
callback with its parameters, exactly once across sweeping workers; a trial that beats is left to
Optuna's own stale check; journal storage is never swept. A trial failed by another worker while it
runs is counted as lost by its own worker, which writes nothing more to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import optuna

from foxhunt.tune.heartbeat import OrphanSweep, running_without_heartbeat
from foxhunt.tune.objective import FoldScores
from foxhunt.tune.space import distributions
from foxhunt.tune.study import counts, open_study, storage_url
from foxhunt.tune.worker import run_worker
from tests.tune.synthetic import SyntheticEvaluator, synthetic_config

RUNNING, FAIL, WAITING = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _study(tmp_path: Path, storage: str = "") -> tuple[Any, optuna.Study, str]:
    d = tmp_path / "synthetic"
    d.mkdir(parents=True, exist_ok=True)
    cfg = synthetic_config(d, heartbeat_s=1, grace_s=3, storage=storage)
    url = storage_url(cfg.tune.storage, d)
    return cfg, open_study(url, cfg.tune.study, cfg.tune, create=True), url


def test_a_trial_that_never_beat_is_failed_after_the_grace_period_and_retried_once(tmp_path: Path) -> None:
    cfg, study, _ = _study(tmp_path)
    orphan = study.ask(distributions(cfg.tune.entries()))  # what a worker killed right after ask leaves
    clock = Clock()
    sweep, other = OrphanSweep(cfg.tune.grace_s, clock), OrphanSweep(cfg.tune.grace_s, clock)
    assert sweep(study) == [] and other(study) == []  # first sight: the wait starts
    clock.t += 2.9
    assert sweep(study) == [] and study.trials[0].state == RUNNING
    clock.t += 0.1
    assert sweep(study) == [orphan._trial_id]
    assert other(study) == []  # a second worker finds it already failed: no second retry
    trials = study.trials
    assert [t.state for t in trials] == [FAIL, WAITING]
    assert trials[1].params == trials[0].params and trials[1].system_attrs["failed_trial"] == 0
    assert running_without_heartbeat(study._storage._backend, study._study_id) == []


def test_a_trial_that_beats_is_left_to_optunas_stale_check(tmp_path: Path) -> None:
    cfg, study, _ = _study(tmp_path)
    trial = study.ask(distributions(cfg.tune.entries()))
    study._storage.record_heartbeat(trial._trial_id)
    clock = Clock()
    sweep = OrphanSweep(cfg.tune.grace_s, clock)
    sweep(study)
    clock.t += 1e6
    assert sweep(study) == [] and counts(study)["RUNNING"] == 1


def test_journal_storage_has_no_heartbeats_and_is_not_swept(tmp_path: Path) -> None:
    cfg, study, _ = _study(tmp_path, storage=f"journal:{tmp_path / 'journal.log'}")
    study.ask(distributions(cfg.tune.entries()))
    clock = Clock()
    sweep = OrphanSweep(cfg.tune.grace_s, clock)
    sweep(study)
    clock.t += 1e6
    assert sweep(study) == [] and counts(study)["RUNNING"] == 1


class FailedMidTrial(SyntheticEvaluator):
    """Its first trial is marked FAIL in the storage after fold 0, as another worker's sweep would."""

    def __init__(self, cfg: Any, study: optuna.Study) -> None:
        super().__init__(cfg)
        self.study = study
        self.calls = 0

    def evaluate(self, values: dict[str, Any], on_fold: Callable[[int, FoldScores, bool], None] | None = None) -> tuple[FoldScores, float]:
        self.calls += 1
        if self.calls == 1:
            running = self.study.get_trials(deepcopy=False, states=(RUNNING,))
            inner = on_fold

            def on_fold(k: int, scores: FoldScores, last: bool) -> None:  # noqa: F811
                if k == 1:
                    self.study._storage.set_trial_state_values(running[0]._trial_id, FAIL)
                assert inner is not None
                inner(k, scores, last)

        return super().evaluate(values, on_fold)


def test_a_trial_failed_by_another_worker_while_it_runs_is_counted_lost(tmp_path: Path) -> None:
    cfg, study, url = _study(tmp_path)
    d = tmp_path / "synthetic"
    rep = run_worker(cfg, url, d, 2, evaluator=FailedMidTrial(cfg, open_study(url, cfg.tune.study, cfg.tune, create=False)))
    assert (rep.lost, rep.finished, rep.failed) == (1, 2, 0)
    study = open_study(url, cfg.tune.study, cfg.tune, create=False)
    first = study.trials[0]
    assert first.state == FAIL and "result" not in first.user_attrs  # the worker wrote nothing more to it
    assert counts(study)["COMPLETE"] == 2
