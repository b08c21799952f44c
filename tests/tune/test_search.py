"""The search machinery on a synthetic objective (no training): it finds a known best parameter,
the fold pruner prunes, and a resumed study continues without counting a trial twice."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from foxhunt.tune.study import counts, open_study, storage_url
from foxhunt.tune.worker import run_worker
from tests.tune.synthetic import N_FOLDS, SyntheticEvaluator, synthetic_config


def _study(tmp_path: Path, **kw: object) -> tuple[object, str, Path]:
    d = tmp_path / "synthetic"
    d.mkdir(parents=True, exist_ok=True)
    cfg = synthetic_config(d, **kw)  # type: ignore[arg-type]
    url = storage_url(cfg.tune.storage, d)
    open_study(url, cfg.tune.study, cfg.tune, create=True)
    return cfg, url, d


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_study_finds_the_known_best_parameter(tmp_path: Path, sampler: str) -> None:
    cfg, url, d = _study(tmp_path, sampler=sampler)
    rep = run_worker(cfg, url, d, 20, evaluator=SyntheticEvaluator(cfg))
    study = open_study(url, "synthetic", cfg.tune, create=False)
    assert rep.finished == 20 and counts(study)["COMPLETE"] == 20
    best = study.best_trial
    assert abs(math.log10(best.params["dqn.lr"]) + 3.0) < 0.35  # the optimum is lr = 1e-3 (10^±0.35 ≈ ×2.2)
    # the best score is the objective of its folds: mean − 0.5·std of 2 − x² + 0.1k
    x = math.log10(best.params["dqn.lr"]) + 3.0
    fs = [2.0 - x * x + 0.1 * k for k in range(N_FOLDS)]
    mean = sum(fs) / len(fs)
    std = math.sqrt(sum((f - mean) ** 2 for f in fs) / len(fs))
    assert best.value == pytest.approx(mean - 0.5 * std)
    assert best.user_attrs["result"]["fold_sharpe"] == pytest.approx(fs)


def test_the_same_seed_gives_the_same_trials(tmp_path: Path) -> None:
    out = []
    for name in ("a", "b"):
        cfg, url, d = _study(tmp_path / name)
        run_worker(cfg, url, d, 4, evaluator=SyntheticEvaluator(cfg))
        out.append([t.params["dqn.lr"] for t in open_study(url, "synthetic", cfg.tune, create=False).trials])
    assert out[0] == out[1]


@pytest.mark.parametrize("pruner", ["median", "wilcoxon"])
def test_fold_pruner_stops_clearly_worse_trials_early(tmp_path: Path, pruner: str) -> None:
    # Wilcoxon's signed-rank test needs enough paired folds to reach p < 0.1 (three pairs cannot)
    n_folds = 4 if pruner == "median" else 8
    cfg, url, d = _study(tmp_path, pruner=pruner, sampler="random")
    ev = SyntheticEvaluator(cfg, n_folds=n_folds)
    rep = run_worker(cfg, url, d, 16, evaluator=ev)
    study = open_study(url, "synthetic", cfg.tune, create=False)
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert rep.pruned == len(pruned) > 0 and rep.finished + rep.pruned == 16
    assert all(t.user_attrs["result"]["folds_run"] < n_folds for t in pruned)
    assert ev.folds_run < 16 * n_folds  # folds saved by pruning
    # a pruned trial is worse than the best complete trial on the folds it ran
    best = study.best_trial
    for t in pruned:
        k = t.user_attrs["result"]["folds_run"] - 1
        assert t.user_attrs["result"]["fold_sharpe"][k] < best.user_attrs["result"]["fold_sharpe"][k]


def test_resume_continues_the_study_without_repeating_trials(tmp_path: Path) -> None:
    cfg, url, d = _study(tmp_path)
    run_worker(cfg, url, d, 4, evaluator=SyntheticEvaluator(cfg))
    first = [(t.number, t.params["dqn.lr"], t.value) for t in open_study(url, "synthetic", cfg.tune, create=False).trials]
    rep = run_worker(cfg, url, d, 7, evaluator=SyntheticEvaluator(cfg))
    again = run_worker(cfg, url, d, 7, evaluator=SyntheticEvaluator(cfg))  # already done: runs nothing
    trials = open_study(url, "synthetic", cfg.tune, create=False).trials
    assert rep.finished == 3 and again.finished == 0
    assert [(t.number, t.params["dqn.lr"], t.value) for t in trials[:4]] == first
    assert [t.number for t in trials] == list(range(7))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
