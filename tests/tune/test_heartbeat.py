"""Trial liveness (foxhunt.tune.heartbeat.Liveness, Optuna's public storage API only): a sweeping
process beats once for a trial it has seen RUNNING for the grace period plus a margin, never twice;
so a trial that never beat (its worker died between ask and first beat) gets a heartbeat row and is
then failed by Optuna's stale check and re-queued by the storage's retry callback with its
parameters, exactly once across sweeping workers; a dead worker's trial that had beaten is failed
on its own schedule, before any sweep beats for it; a trial whose worker beats is never failed;
journal storage is never swept. A trial failed by another worker while it runs is counted as lost
by its own worker, which writes nothing more to it.

The timeline test waits for real (Optuna reads heartbeat times on the database's clock, SQLite's in
whole seconds): grace 2 s, about 7 s in all, hence ``slow``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import optuna
import pytest

from foxhunt.tune.heartbeat import ADOPT_MARGIN_S, Heartbeat, Liveness, first_beat
from foxhunt.tune.objective import FoldScores
from foxhunt.tune.space import distributions
from foxhunt.tune.study import counts, make_storage, open_study, storage_url
from foxhunt.tune.worker import run_worker
from tests.tune.synthetic import SyntheticEvaluator, synthetic_config

RUNNING, FAIL, WAITING = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING
GRACE_S = 2  # the smallest tune.grace_s
ADOPT_S = GRACE_S + ADOPT_MARGIN_S


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _study(tmp_path: Path, storage: str = "") -> tuple[Any, optuna.Study, str]:
    d = tmp_path / "synthetic"
    d.mkdir(parents=True, exist_ok=True)
    cfg = synthetic_config(d, heartbeat_s=1, grace_s=GRACE_S, storage=storage)
    url = storage_url(cfg.tune.storage, d)
    return cfg, open_study(url, cfg.tune.study, cfg.tune, create=True), url


def _process(cfg: Any, url: str, clock: Callable[[], float] = time.monotonic) -> Liveness:
    """What one worker process holds: its own storage, study and Liveness."""
    storage = make_storage(url, cfg.tune)
    study = open_study(url, cfg.tune.study, cfg.tune, create=False, storage=storage)
    return Liveness(storage, study, cfg.tune.grace_s, clock)


def test_a_sweep_beats_once_for_a_trial_seen_running_for_the_grace_period_plus_margin(tmp_path: Path) -> None:
    cfg, study, url = _study(tmp_path)
    study.ask(distributions(cfg.tune.entries()))
    clock = Clock()
    live = _process(cfg, url, clock)
    assert live.sweep() == []  # first sight: the wait starts
    clock.t += ADOPT_S - 0.1
    assert live.sweep() == []
    clock.t += 0.1
    assert live.sweep() == [0]
    clock.t += 1e6
    assert live.sweep() == [] and study.trials[0].state == RUNNING  # never a second beat (and no real time passed)


@pytest.mark.slow
def test_orphaned_and_dead_trials_are_failed_and_retried_once_live_ones_never(tmp_path: Path) -> None:
    cfg, study, url = _study(tmp_path)
    dists = distributions(cfg.tune.entries())
    orphan = study.ask(dists)  # what a worker killed right after ask leaves: no heartbeat row
    dead_worker = _process(cfg, url)
    dead = study.ask(dists)
    first_beat(dead_worker, dead)  # beat once, then its worker died
    live_worker = _process(cfg, url)
    live = study.ask(dists)
    first_beat(live_worker, live)
    hb = Heartbeat(live_worker, live)  # beats every second
    try:
        a, b = _process(cfg, url), _process(cfg, url)  # two sweeping workers
        t0 = time.monotonic()
        beaten: dict[int, list[float]] = {}
        failed_at: dict[int, float] = {}
        while len(failed_at) < 2 and time.monotonic() - t0 < ADOPT_S + GRACE_S + 6:
            for w in (a, b):
                for n in w.sweep():
                    beaten.setdefault(n, []).append(time.monotonic() - t0)
            for t in study.get_trials(deepcopy=False):
                if t.state == FAIL and t.number not in failed_at:
                    failed_at[t.number] = time.monotonic() - t0
            time.sleep(0.25)
        assert set(failed_at) == {0, 1}
        assert failed_at[1] < ADOPT_S and 1 not in beaten  # the dead trial: its own schedule, never beaten
        assert len(beaten[0]) == 2 and min(beaten[0]) >= ADOPT_S  # the orphan: one beat per sweeping worker ...
        assert failed_at[0] > min(beaten[0]) + GRACE_S - 1  # ... then failed a grace period later (whole seconds)
        for _ in range(3):
            a.sweep(), b.sweep()  # more looks by both workers: nothing more happens
        trials = study.get_trials()
        assert [t.state for t in trials] == [FAIL, FAIL, RUNNING, WAITING, WAITING]
        retried = {t.system_attrs["failed_trial"]: t for t in trials[3:]}
        assert set(retried) == {0, 1}  # one retry each, with the same parameters
        assert retried[0].params == orphan.params and retried[1].params == dead.params
    finally:
        hb.stop()


def test_journal_storage_has_no_heartbeats_and_is_not_swept(tmp_path: Path) -> None:
    cfg, study, url = _study(tmp_path, storage=f"journal:{tmp_path / 'journal.log'}")
    study.ask(distributions(cfg.tune.entries()))
    clock = Clock()
    live = _process(cfg, url, clock)
    live.sweep()
    clock.t += 1e6
    assert live.interval is None and live.sweep() == [] and counts(study)["RUNNING"] == 1


class FailedMidTrial(SyntheticEvaluator):
    """Its first trial is marked FAIL in the storage after fold 0, as another worker's sweep would."""

    def __init__(self, cfg: Any, other: Liveness) -> None:
        super().__init__(cfg)
        self.other, self.study = other, other.study
        self.calls = 0

    def evaluate(self, values: dict[str, Any], on_fold: Callable[[int, FoldScores, bool], None] | None = None) -> tuple[FoldScores, float]:
        self.calls += 1
        if self.calls == 1:
            running = self.study.get_trials(deepcopy=False, states=(RUNNING,))
            inner = on_fold

            def on_fold(k: int, scores: FoldScores, last: bool) -> None:  # noqa: F811
                if k == 1:
                    self.other.storage.set_trial_state_values(self.other.trial_id(running[0].number), FAIL)
                assert inner is not None
                inner(k, scores, last)

        return super().evaluate(values, on_fold)


def test_a_trial_failed_by_another_worker_while_it_runs_is_counted_lost(tmp_path: Path) -> None:
    cfg, study, url = _study(tmp_path)
    d = tmp_path / "synthetic"
    rep = run_worker(cfg, url, d, 2, evaluator=FailedMidTrial(cfg, _process(cfg, url)))
    assert (rep.lost, rep.finished, rep.failed) == (1, 2, 0)
    study = open_study(url, cfg.tune.study, cfg.tune, create=False)
    first = study.trials[0]
    assert first.state == FAIL and "result" not in first.user_attrs  # the worker wrote nothing more to it
    assert counts(study)["COMPLETE"] == 2
