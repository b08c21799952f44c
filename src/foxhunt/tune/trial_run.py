"""A trial of a worker from its ask to its tell: heartbeat, pruning callback, result attribute,
tell, and the worker's counts (``WorkerReport``); ``run_trial`` runs one trial, ``run_population``
several asked together (``tune.population``, foxhunt.tune.population). The ask-and-tell loop that
calls them is ``foxhunt.tune.worker.run_worker``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna

from foxhunt.errors import FoxhuntError
from foxhunt.tune.heartbeat import Heartbeat, Liveness
from foxhunt.tune.objective import FoldScores, running_value, trial_score
from foxhunt.tune.space import decode


@dataclass
class WorkerReport:
    """What one worker did (returned by run_worker, printed by the worker process as JSON)."""

    finished: int = 0
    pruned: int = 0
    failed: int = 0
    lost: int = 0
    trial_s: list[float] = field(default_factory=list)
    overhead_s: list[float] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


EXPECTED = (optuna.TrialPruned, FoxhuntError, optuna.exceptions.UpdateFinishedTrialError)
"""What ends a trial without ending its worker: pruned, failed (a one-line error) or lost."""


class TrialRun:
    """One trial's bookkeeping from its ask to its tell: its heartbeat, the pruning callback, the
    result attribute (written once) and the tell."""

    def __init__(self, study: optuna.Study, live: Liveness, trial: optuna.Trial, tcfg: Any, index: int,
                 on_event: Callable[[str, Any], None] | None) -> None:
        self.study, self.trial, self.tcfg, self.on_event = study, trial, tcfg, on_event
        self.hb = Heartbeat(live, trial)
        self.t0 = time.perf_counter()
        self.info: dict[str, Any] = {"worker": index}
        self.state: optuna.trial.TrialState | None = optuna.trial.TrialState.FAIL  # None: lost (failed by another worker)
        self.value: float | None = None

    def on_fold(self, k: int, scores: FoldScores, last: bool) -> None:
        """After fold k: report the running value; TrialPruned if the pruner says so."""
        v = running_value(scores, self.tcfg)
        self.trial.report(v, k)
        if self.on_event is not None:
            self.on_event("fold", (self.trial.number, k, v))
        if not last and self.trial.should_prune():  # after the last fold there is nothing left to save
            self.info.update(scores.to_attrs(), folds_run=k + 1)
            raise optuna.TrialPruned()

    def complete(self, scores: FoldScores, overhead: float, rep: WorkerReport) -> None:
        """Every fold ran: the trial's score (FAIL when it is not finite)."""
        self.value, bad = trial_score(scores, self.tcfg)
        self.info.update(scores.to_attrs(), folds_run=len(scores.sharpe), constraints_broken=bad, overhead_s=overhead)
        rep.overhead_s.append(overhead)
        self.state = optuna.trial.TrialState.COMPLETE if math.isfinite(self.value) else optuna.trial.TrialState.FAIL

    def stopped(self, exc: BaseException) -> None:
        """What an exception of ``EXPECTED`` means for the trial (anything else leaves it FAIL)."""
        if isinstance(exc, optuna.TrialPruned):
            self.state = optuna.trial.TrialState.PRUNED
        elif isinstance(exc, FoxhuntError):
            self.info["error"] = str(exc)
        elif isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
            self.state = None  # failed by another worker while it ran (report on a finished trial)

    def tell(self, rep: WorkerReport, times: dict[str, float]) -> None:
        """Stop the heartbeat, write the result attribute, tell the study, count the trial."""
        self.hb.stop()
        self.info["duration_s"] = time.perf_counter() - self.t0
        self.info.update(times)  # train_s, eval_s of the folds run
        frozen = None
        if self.state is not None:
            try:
                self.trial.set_user_attr("result", self.info)
                frozen = self.study.tell(self.trial, self.value if self.state == optuna.trial.TrialState.COMPLETE else None,
                                         state=self.state, skip_if_finished=True)  # the same race, in the microseconds after the write
            except optuna.exceptions.UpdateFinishedTrialError:
                self.state = None  # failed by another worker after its last fold: its retry is queued
        rep.trial_s.append(time.perf_counter() - self.t0)
        if self.state is None:
            rep.lost += 1
            return
        if self.state == optuna.trial.TrialState.COMPLETE:
            rep.finished += 1
        elif self.state == optuna.trial.TrialState.PRUNED:
            rep.pruned += 1
        else:
            rep.failed += 1
        if self.on_event is not None:
            self.on_event("trial", frozen)


def run_trial(study: optuna.Study, live: Liveness, trial: optuna.Trial, ev: Any, tcfg: Any, rep: WorkerReport,
              index: int, on_event: Callable[[str, Any], None] | None) -> None:
    """Run and record one trial (``ev.evaluate``, a ``foxhunt.tune.worker.TrialEvaluator``)."""
    run = TrialRun(study, live, trial, tcfg, index, on_event)
    try:
        scores, overhead = ev.evaluate(decode(ev.entries, trial.params), run.on_fold)
        run.complete(scores, overhead, rep)
    except EXPECTED as exc:
        run.stopped(exc)
    finally:  # an unexpected exception: told FAIL, then it ends the worker
        run.tell(rep, ev.times)


def run_population(study: optuna.Study, live: Liveness, trials: list[optuna.Trial], ev: Any, tcfg: Any,
                   rep: WorkerReport, index: int, on_event: Callable[[str, Any], None] | None) -> None:
    """Trials asked together (``tune.population``), run as populations (``foxhunt.tune.population``),
    each recorded and told as ``_run_trial`` records it. An unexpected exception fails its trial
    alone; once every trial is told, the first one is raised (it ends the worker, as it would alone)."""
    runs = [TrialRun(study, live, t, tcfg, index, on_event) for t in trials]
    outcomes: list[Any] = []
    try:
        outcomes = ev.evaluate_population([decode(ev.entries, t.params) for t in trials], [r.on_fold for r in runs],
                                          [f"trial {t.number}" for t in trials])
    finally:
        unexpected: BaseException | None = None
        for i, run in enumerate(runs):
            out = outcomes[i] if i < len(outcomes) else None
            if out is not None and out.error is None:
                run.complete(out.scores, out.overhead_s, rep)
            elif out is not None and isinstance(out.error, EXPECTED):
                run.stopped(out.error)
            elif out is not None:
                run.info["error"] = f"{type(out.error).__name__}: {out.error}"
                unexpected = unexpected or out.error
            run.tell(rep, out.times if out is not None else {})
    if unexpected is not None:
        raise unexpected


__all__ = ["EXPECTED", "TrialRun", "WorkerReport", "run_population", "run_trial"]
