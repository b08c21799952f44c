"""Portfolios of per-symbol strategies (``foxhunt.backtest.portfolio``) against the float64 loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.backtest.metrics import METRIC_NAMES
from foxhunt.backtest.portfolio import portfolio, portfolio_reference, portfolios, training_volatility, union_axis


def _grid(rng: np.random.Generator, s: int, t: int) -> np.ndarray:
    """[S, T] returns with late starts, early ends, gaps and scattered missing dates (NaN)."""
    g = rng.normal(0.0005, 0.01, (s, t)) * rng.uniform(0.3, 3.0, (s, 1))
    for k in range(s):
        start, end = int(rng.integers(0, t // 3 + 1)), int(rng.integers(2 * t // 3, t + 1))
        g[k, :start] = np.nan
        g[k, end:] = np.nan
        if t > 10:
            a = int(rng.integers(start, max(start + 1, end - 5)))
            g[k, a: a + int(rng.integers(1, 6))] = np.nan  # a gap
        g[k, rng.random(t) < 0.05] = np.nan  # holidays
    g[0, :] = np.where(np.isnan(g).all(0), 0.001, g[0, :])  # every date has some symbol (as union_axis makes)
    return g


def _close(a: float, b: float, rtol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rtol * max(abs(b), 1e-12) + 1e-12


@pytest.mark.parametrize("s,t,seed", [(1, 2, 0), (3, 1000, 1), (5, 37, 2), (7, 253, 3), (2, 5, 4)])
@pytest.mark.parametrize("rule", ["equal", "inverse_vol"])
def test_portfolio_returns_and_metrics_equal_the_float64_loop_on_grids_with_gaps_and_late_starts(s, t, seed, rule):
    rng = np.random.default_rng(seed)
    g = _grid(rng, s, t)
    vol = rng.uniform(0.005, 0.03, s)
    got = portfolio(g, rule, vol, bars_per_year=252.0)
    ref_r, ref_m = portfolio_reference(g, rule, vol, bars_per_year=252.0)
    np.testing.assert_allclose(got.returns, ref_r, rtol=1e-12, atol=1e-15)
    assert set(got.metrics) == set(METRIC_NAMES)
    bad = {k: (got.metrics[k], ref_m[k]) for k in METRIC_NAMES if not _close(got.metrics[k], ref_m[k], 1e-9)}
    assert not bad
    present = ~np.isnan(g)
    np.testing.assert_allclose(got.weights.sum(0), 1.0, rtol=1e-12)
    assert (got.weights[~present] == 0).all() and (got.present == present.sum(0)).all()


def test_inverse_vol_weights_are_one_over_training_vol_renormalised_over_the_symbols_present():
    g = np.array([[0.01, np.nan, 0.02], [0.03, 0.04, np.nan], [np.nan, -0.01, 0.0]])
    vol = np.array([0.01, 0.02, 0.04])  # base weights 100, 50, 25
    p = portfolio(g, "inverse_vol", vol, bars_per_year=252.0)
    np.testing.assert_allclose(p.weights[:, 0], [100 / 150, 50 / 150, 0])
    np.testing.assert_allclose(p.weights[:, 1], [0, 50 / 75, 25 / 75])
    np.testing.assert_allclose(p.returns, [(100 * 0.01 + 50 * 0.03) / 150, (50 * 0.04 - 25 * 0.01) / 75, 100 * 0.02 / 125])
    e = portfolio(g, "equal", vol, bars_per_year=252.0)
    np.testing.assert_allclose(e.returns, [0.02, 0.015, 0.01])


def test_a_date_without_any_symbol_earns_zero_and_bad_inputs_are_refused():
    g = np.array([[0.01, np.nan, 0.02]])
    assert portfolio(g, "equal", [0.01], bars_per_year=252.0).returns.tolist() == [0.01, 0.0, 0.02]
    with pytest.raises(ValueError, match="symbol 1's training volatility is 0.0"):
        portfolio(np.zeros((2, 3)), "inverse_vol", [0.01, 0.0], bars_per_year=252.0)
    with pytest.raises(ValueError, match="weights_rule 'cap': expected one of equal, inverse_vol"):
        portfolio(np.zeros((1, 3)), "cap", [0.01], bars_per_year=252.0)
    with pytest.raises(ValueError, match="'b' has bars where the first grid has none"):
        portfolios({"a": np.zeros((1, 2)), "b": np.array([[0.0, np.nan]])}, [0.01], bars_per_year=252.0)


def test_union_axis_places_each_symbols_returns_on_its_own_dates():
    axis, grids = union_axis([np.array([1, 3, 5]), np.array([2, 3, 9])],
                             {"m": [np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])]})
    assert axis.tolist() == [1, 2, 3, 5, 9]
    np.testing.assert_array_equal(grids["m"], [[0.1, np.nan, 0.2, 0.3, np.nan], [np.nan, 1.0, 2.0, np.nan, 3.0]])


def test_training_volatility_is_the_std_of_simple_close_to_close_returns():
    c = np.array([100.0, 101.0, 99.0, 100.0])
    assert training_volatility(c) == pytest.approx(np.std([0.01, 99 / 101 - 1, 100 / 99 - 1], ddof=1), rel=1e-14)
    assert math.isnan(training_volatility(c[:2]))
