"""Deflated Sharpe ratio and PBO (float64) against the papers' worked example and hand cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from foxhunt.tune.objective import FoldScores, PowerSums, aggregate, trial_score, violations
from foxhunt.tune.stats import deflated_sharpe, expected_max_sharpe, pbo_cscv, probabilistic_sharpe


def test_deflated_sharpe_matches_the_papers_numerical_example() -> None:
    # Bailey & López de Prado (2014), "A numerical example": N = 100 trials, V[SR_n] = 1/2 annualised,
    # 5 years of daily returns (T = 1250), annualised SR = 2.5, skew −3, kurtosis 10:
    # SR0 = 0.1132 (daily) and DSR = 0.9004.
    var_daily = 0.5 / 250
    sr_daily = 2.5 / math.sqrt(250)
    dsr, sr0 = deflated_sharpe(sr_daily, 1250, 100, var_daily, skew=-3.0, kurtosis=10.0)
    assert sr0 == pytest.approx(0.1132, abs=5e-5)
    assert dsr == pytest.approx(0.9004, abs=5e-5)
    assert expected_max_sharpe(100, var_daily) == sr0


def test_probabilistic_sharpe_is_one_half_at_the_benchmark_and_one_trial_has_no_deflation() -> None:
    assert probabilistic_sharpe(0.1, 0.1, 500, skew=-1.0, kurtosis=6.0) == pytest.approx(0.5)
    assert expected_max_sharpe(1, 0.3) == 0.0
    # Normal returns: PSR = Φ(SR √(T−1) / √(1 + SR²/2)) by hand.
    sr, t = 0.05, 1001
    assert probabilistic_sharpe(sr, 0.0, t) == pytest.approx(0.5 * (1 + math.erf(sr * math.sqrt(t - 1) / math.sqrt(1 + sr**2 / 2) / math.sqrt(2))))


def test_pbo_is_one_when_the_in_sample_winner_always_loses_out_of_sample() -> None:
    # Two folds, two trials: trial 0 wins fold 0, trial 1 wins fold 1. Either split picks the winner of
    # its in-sample fold, which is last out of sample: ω = 1/3, λ = ln(1/2) < 0 in both splits.
    res = pbo_cscv([[1.0, 0.0], [0.0, 1.0]])
    assert res.pbo == 1.0 and res.n_splits == 2
    assert np.allclose(res.logits, math.log(0.5))


def test_pbo_is_zero_when_one_trial_dominates_every_fold() -> None:
    res = pbo_cscv([[2.0, 1.0, 0.0], [3.0, 1.0, 2.0], [1.5, 1.0, 0.5], [2.5, 0.0, 1.0]])
    # 4 folds → C(4,2) = 6 splits; trial 0 is best in and out of sample: ω = 3/4, λ = ln 3.
    assert res.pbo == 0.0 and res.n_splits == 6
    assert np.allclose(res.logits, math.log(3.0))


def test_pbo_hand_computed_mixed_case() -> None:
    # Folds (rows) × trials A, B, C:
    m = [[4.0, 0.0, 2.0],
         [3.0, 1.0, 2.5],
         [0.0, 4.0, 2.2],
         [1.0, 3.0, 1.9]]
    # IS {0,1}: A 3.5 B 0.5 C 2.25 → A; OOS {2,3}: A 0.5 B 3.5 C 2.05 → A rank 1 → ω 1/4 → λ<0 (overfit)
    # IS {2,3}: B wins; OOS {0,1}: B 0.5 is last → overfit
    # IS {0,2}: A 2.0 B 2.0 C 2.1 → C; OOS {1,3}: A 2.0 B 2.0 C 2.2 → C rank 3 → ω 3/4 → λ>0
    # IS {1,3}: A 2.0 B 2.0 C 2.2 → C; OOS {0,2}: C 2.1 best → λ>0
    # IS {0,3}: A 2.5 B 1.5 C 1.95 → A; OOS {1,2}: A 1.5 B 2.5 C 2.35 → A last → overfit
    # IS {1,2}: A 1.5 B 2.5 C 2.35 → B; OOS {0,3}: B 1.5 last → overfit
    res = pbo_cscv(m)
    assert res.pbo == pytest.approx(4 / 6)
    assert sorted(np.round(res.logits, 12)) == sorted(np.round([math.log(1 / 3)] * 4 + [math.log(3.0)] * 2, 12))


def test_pbo_drops_the_oldest_fold_when_the_count_is_odd_and_rejects_bad_input() -> None:
    m = np.array([[9.0, -9.0], [1.0, 0.0], [0.0, 1.0]])
    assert pbo_cscv(m).pbo == pbo_cscv(m[1:]).pbo == 1.0
    assert pbo_cscv(m).blocks == 2
    with pytest.raises(ValueError):
        pbo_cscv([[1.0, 2.0]])
    with pytest.raises(ValueError):
        pbo_cscv([[1.0, float("nan")], [0.0, 1.0]])


def test_power_sums_give_scipy_moments_across_merged_folds() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_t(5, 301), rng.standard_t(5, 77) * 0.5 + 0.1
    ps = PowerSums()
    ps.add(a)
    ps.add(b)
    m = ps.moments()
    x = np.concatenate([a, b])
    assert m["n"] == 378
    assert m["sharpe"] == pytest.approx(x.mean() / x.std(), rel=1e-9)
    assert m["skew"] == pytest.approx(sps.skew(x), rel=1e-7)
    assert m["kurtosis"] == pytest.approx(sps.kurtosis(x, fisher=False), rel=1e-7)


def test_objective_aggregates_fold_sharpes_with_the_spread_penalty_and_constraints() -> None:
    s = [1.0, 2.0, 6.0]  # mean 3, median 2, worst 1, std (ddof 0) √(14/3)
    sd = math.sqrt(14 / 3)
    assert aggregate(s, "mean", 0.5) == pytest.approx(3 - 0.5 * sd)
    assert aggregate(s, "median", 0.0) == 2.0
    assert aggregate(s, "worst", 1.0) == pytest.approx(1 - sd)
    assert aggregate([float("nan"), 2.0], "mean", 0.0) == 1.0  # a flat window (no variance) scores 0

    class T:
        objective, spread_penalty, min_trades, max_drawdown, constraint_penalty = "mean", 0.0, 5.0, 0.3, 10.0

    fs = FoldScores()
    fs.add({"sharpe": 1.0, "trade_count": 2.0, "max_drawdown": 0.4, "total_return": 0.1}, None)
    assert len(violations(fs, 5.0, 0.3)) == 2
    score, bad = trial_score(fs, T)
    assert score == pytest.approx(1.0 - 10.0) and len(bad) == 2


def test_the_drawdown_constraint_reads_drawdowns_as_the_metrics_give_them() -> None:
    # foxhunt.backtest.metrics: max_drawdown = min(E_i / peak - 1) <= 0 (a 40 % drawdown is -0.4)
    deep, shallow = FoldScores(), FoldScores()
    deep.add({"sharpe": 1.0, "trade_count": 9.0, "max_drawdown": -0.1, "total_return": 0.1}, None)
    deep.add({"sharpe": 1.0, "trade_count": 9.0, "max_drawdown": -0.4, "total_return": 0.1}, None)
    shallow.add({"sharpe": 1.0, "trade_count": 9.0, "max_drawdown": -0.2, "total_return": 0.1}, None)
    assert violations(deep, 0.0, 0.3) == ["max drawdown 40.0% > 30.0%"]
    assert violations(shallow, 0.0, 0.3) == []


def test_an_infeasible_trial_is_never_the_best_while_a_feasible_one_exists() -> None:
    import optuna

    from foxhunt.tune.outputs import best_trial

    study = optuna.create_study(direction="maximize")
    for value, broken in ((3.0, ["max drawdown 40.0% > 30.0%"]), (1.0, []), (0.5, [])):
        study.add_trial(optuna.create_trial(value=value, user_attrs={"result": {"constraints_broken": broken}}))
    assert best_trial(study).number == 1
    only_bad = optuna.create_study(direction="maximize")
    only_bad.add_trial(optuna.create_trial(value=-2.0, user_attrs={"result": {"constraints_broken": ["x"]}}))
    assert best_trial(only_bad).number == 0  # none feasible: the best of the infeasible ones
