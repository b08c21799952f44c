"""A universe's walk-forward as one UniverseRun (foxhunt.backtest.universe_walk): each fold's portfolios use that
fold's training volatilities and members only, the stitched portfolio is the folds joined in time order, and every
portfolio metric equals a plain float64 computation (portfolio_reference, metrics_reference.window_metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.backtest.metrics import METRIC_NAMES
from foxhunt.backtest.metrics_reference import window_metrics
from foxhunt.backtest.portfolio import portfolio_reference, training_volatility
from foxhunt.backtest.universe_walk import FoldWindows, fold_training_vols, walk_forward_run
from tests.backtest.test_portfolio import _close

DAY = 86_400 * 10**9
SYMBOLS = ("AAA", "BBB", "CCC")


def _fold(rng: np.random.Generator, k: int, members: list[int], first_day: int, n: int) -> FoldWindows:
    """Fold k: each member's window of n bars from first_day (BBB skips every 4th day: its own calendar)."""
    times, rets, metrics = [], {"agent": [], "buy & hold": []}, {"agent": [], "buy & hold": []}
    for s in members:
        days = np.arange(first_day, first_day + 2 * n)
        if s == 1:
            days = days[days % 4 != 0]
        t = days[: n + 1].astype(np.int64) * DAY
        times.append(t)
        for lab in rets:
            r = rng.normal(0.0004, 0.01 * (s + 1), n)
            rets[lab].append(r)
            metrics[lab].append({"sharpe": float(k + s), "total_return": float(np.prod(1 + r) - 1)})
    vol = rng.uniform(0.005, 0.03, len(members))
    return FoldWindows(k, np.asarray(members), times, rets, metrics, vol)


def _reference(symbols: int, folds: list[FoldWindows], label: str, rule: str) -> list[float]:
    """The stitched portfolio as a float64 loop: per fold, its own grid on its dates and its own vols."""
    out: list[float] = []
    for fw in folds:
        axis = sorted({int(x) for t in fw.times for x in t[1:]})
        grid = np.full((symbols, len(axis)), np.nan)
        vol = [1.0] * symbols
        for w, s in enumerate(fw.members):
            for x, r in zip(fw.times[w][1:], fw.returns[label][w]):
                grid[s, axis.index(int(x))] = r
            vol[s] = float(fw.training_vol[w])
        out += portfolio_reference(grid, rule, vol, bars_per_year=252.0)[0]
    return out


@pytest.mark.parametrize("rule", ["equal", "inverse_vol"])
def test_stitched_portfolio_is_each_folds_own_portfolio_joined_and_its_metrics_equal_the_float64_reference(rule):
    rng = np.random.default_rng(7)
    folds = [_fold(rng, 0, [0, 1], 1000, 40), _fold(rng, 1, [0, 1, 2], 1200, 50), _fold(rng, 2, [1, 2], 1400, 30)]
    run = walk_forward_run(SYMBOLS, folds, "agent", 252.0)
    for label in ("agent", "buy & hold"):
        ref = _reference(3, folds, label, rule)
        got = run.portfolios[(label, rule)]
        np.testing.assert_allclose(got.returns, ref, rtol=1e-12, atol=1e-15)
        ref_m = window_metrics(ref, bars_per_year=252.0)
        bad = {k: (got.metrics[k], ref_m[k]) for k in ("sharpe", "total_return", "max_drawdown", "annual_volatility",
                                                        "sortino", "calmar") if not _close(got.metrics[k], ref_m[k], 1e-9)}
        assert not bad
        assert set(got.metrics) == set(METRIC_NAMES)
        # weights: 0 outside a fold's members, each date's sum 1
        np.testing.assert_allclose(got.weights.sum(0), 1.0, rtol=1e-12)
        assert (got.weights[2, : run.axis.searchsorted(folds[1].times[0][1])] == 0).all()  # CCC joins at fold 1
    rows = [r for r in run.rows if r["symbol"] == "portfolio"]
    assert {(r["window"], r["weights"], r["label"]) for r in rows} == {
        (w, rule_, lab) for w in (0, 1, 2, "all") for rule_ in ("equal", "inverse_vol") for lab in ("agent", "buy & hold")}
    assert [r["symbols"] for r in rows if r["window"] in (0, 1, 2) and r["weights"] == rule and r["label"] == "agent"] == [2, 3, 2]


def test_symbol_fold_sharpe_grid_and_joined_returns_follow_the_folds_members():
    rng = np.random.default_rng(3)
    folds = [_fold(rng, 0, [0, 1], 1000, 20), _fold(rng, 1, [0, 2], 1100, 20)]
    run = walk_forward_run(SYMBOLS, folds, "agent", 252.0)
    assert run.sharpe[0].tolist() == [0.0, 1.0] and run.sharpe[1, 0] == 1.0 and math.isnan(run.sharpe[1, 1])
    assert math.isnan(run.sharpe[2, 0]) and run.sharpe[2, 1] == 3.0
    np.testing.assert_array_equal(run.returns["agent"][0], np.concatenate([folds[0].returns["agent"][0],
                                                                          folds[1].returns["agent"][0]]))
    assert len(run.times[0]) == 41 and run.times[0][0] == folds[0].times[0][0]  # first bar, then 40 return bars
    per_symbol = [r for r in run.rows if r["symbol"] != "portfolio"]
    assert len(per_symbol) == 4 * 2 and {r["symbol"] for r in per_symbol} == set(SYMBOLS)


def test_overlapping_validation_dates_are_refused():
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="overlap"):
        walk_forward_run(SYMBOLS, [_fold(rng, 0, [0], 1000, 20), _fold(rng, 1, [0], 1010, 20)], "agent", 252.0)


def test_fold_training_vols_read_each_members_own_training_rows_only():
    close = [np.linspace(1, 2, 50), np.exp(np.linspace(0, 1, 30)) * (1 + 0.01 * np.sin(np.arange(30)))]
    offsets = np.array([0, 50, 80])
    bounds = np.array([[10, 40, 40, 50], [55, 75, 75, 80]])
    got = fold_training_vols(close, offsets, bounds, np.array([0, 1]))
    assert got[0] == training_volatility(close[0][10:40]) and got[1] == training_volatility(close[1][5:25])
