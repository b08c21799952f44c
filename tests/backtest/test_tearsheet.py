"""The tearsheet's statistics (foxhunt.backtest.tearsheet) agree with the float64 metrics reference
on random and odd-shaped returns; monthly returns and the join against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.backtest.metrics_reference import window_metrics
from foxhunt.backtest.tearsheet import (SUMMARY_KEYS, drawdown, equity, holding_bars, join, monthly_returns, rolling_sharpe,
                                        rolling_window, summary)

DAY = 86_400 * 10**9


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == pytest.approx(b, rel=1e-9, abs=1e-12)


ODD = [np.zeros(5), np.full(4, 0.01), np.array([0.02]), np.array([0.01, -0.01]), np.array([-1.0, 0.5, 0.1]),
       np.array([0.1, -1.5, 0.2]), np.array([1e-9, 2e-9, 1e-9]), np.array([5.0, 5.0, -0.5])]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-0.2, 0.2, allow_nan=False), min_size=1, max_size=300), st.sampled_from([252.0, 8766.0, 98_280.0]))
def test_summary_equals_the_float64_reference_on_random_returns(r: list[float], bpy: float) -> None:
    ours = summary(np.array(r), bpy)
    ref = window_metrics(r, bars_per_year=bpy)
    assert all(same(ours[k], ref[k]) for k in SUMMARY_KEYS), (ours, {k: ref[k] for k in SUMMARY_KEYS})


@pytest.mark.parametrize("r", ODD, ids=range(len(ODD)))
def test_summary_equals_the_reference_on_odd_windows(r: np.ndarray) -> None:
    ours, ref = summary(r, 252.0), window_metrics(r.tolist(), bars_per_year=252.0)
    assert all(same(ours[k], ref[k]) for k in SUMMARY_KEYS), (ours, {k: ref[k] for k in SUMMARY_KEYS})


def test_equity_and_drawdown_follow_their_definitions() -> None:
    r = np.array([0.1, -0.2, 0.05, 0.3])
    eq = equity(r)
    assert eq.tolist() == pytest.approx([1.0, 1.1, 0.88, 0.924, 1.2012])
    assert drawdown(eq).tolist() == pytest.approx([0.0, 0.0, -0.2, -0.16, 0.0])
    assert drawdown(eq).min() == pytest.approx(window_metrics(r.tolist())["max_drawdown"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-50_000, 50_000).map(lambda i: i / 1e6), min_size=2, max_size=120), st.integers(2, 40))
def test_rolling_sharpe_is_the_reference_sharpe_of_each_trailing_window(r: list[float], window: int) -> None:
    """Returns on a 1e-6 grid (real returns). The running sums' stated precision: a window's variance is good to
    about n * 1e-16 of the series' largest squared deviation from its mean, relative to that window's variance
    (hypothesis found [0, 1e-6, 0.004299]: the first window's Sharpe 1.4e-9 off, within that bound)."""
    got = rolling_sharpe(np.array(r), window, 252.0)
    if len(r) < window:
        assert got.shape == (0,)
        return
    x = np.array(r)
    scale = float(((x - x.mean()) ** 2).max())
    starts = range(len(r) - window + 1)
    want = [window_metrics(r[i : i + window], bars_per_year=252.0)["sharpe"] for i in starts]
    assert got.shape == (len(want),)
    for i, a, b in zip(starts, got.tolist(), want):
        var = float(np.var(x[i : i + window], ddof=1))
        if var == 0.0 or math.isnan(b) or math.isinf(b):
            assert same(a, b), (i, a, b)
            continue
        assert a == pytest.approx(b, rel=1e-9 + 1e-15 * len(r) * scale / var, abs=1e-12), (i, a, b)


def test_rolling_sharpe_of_equal_returns_is_infinite_or_nan_as_the_reference() -> None:
    r = np.array([0.01, 0.01, 0.01, 0.0, 0.0, 0.0, 0.02])
    got = rolling_sharpe(r, 3, 252.0)
    want = [window_metrics(r[i : i + 3].tolist())["sharpe"] for i in range(5)]
    assert all(same(a, b) for a, b in zip(got.tolist(), want)) and got[0] == math.inf and math.isnan(got[3])


def test_rolling_sharpe_keeps_its_digits_under_a_large_common_mean() -> None:
    rng = np.random.default_rng(0)
    r = 0.5 + rng.normal(0, 1e-6, 500)
    got = rolling_sharpe(r, 50, 252.0)
    want = [window_metrics(r[i : i + 50].tolist())["sharpe"] for i in range(0, 451, 50)]
    assert got[::50].tolist() == pytest.approx(want, rel=1e-6)


def test_rolling_window_is_a_quarter_year_bounded_by_the_series() -> None:
    assert rolling_window(252.0, 5000) == 63 and rolling_window(8766.0, 100_000) == 2192
    assert rolling_window(525_960.0, 10_000) == 5000 and rolling_window(252.0, 30) == 20 and rolling_window(252.0, 10) == 10


def test_monthly_returns_compound_each_calendar_month_as_a_loop_does() -> None:
    rng = np.random.default_rng(1)
    times = np.datetime64("2023-12-20", "ns").astype(np.int64) + np.arange(80) * DAY
    r = rng.normal(0, 0.01, 80)
    got = monthly_returns(times, r)
    want: dict[tuple[int, int], float] = {}
    for t, x in zip(times, r):
        d = np.datetime64(int(t), "ns").astype("datetime64[us]").astype(object)
        key = (d.year, d.month)
        want[key] = (1 + want.get(key, 0.0)) * (1 + x) - 1
    assert list(got) == [(2023, 12), (2024, 1), (2024, 2), (2024, 3)]
    assert all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)
    assert math.prod(1 + v for v in got.values()) - 1 == pytest.approx(window_metrics(r.tolist())["total_return"])


def test_join_concatenates_windows_in_order_and_marks_their_bounds() -> None:
    w0 = (np.array([0, 1, 2]) * DAY, {"agent": np.array([0.1, 0.2]), "bh": np.array([0.0, 0.0])})
    w1 = (np.array([3, 4, 5, 6]) * DAY, {"agent": np.array([0.3, 0.4, 0.5]), "bh": np.array([1.0, 1.0, 1.0]), "x": np.ones(3)})
    j = join([w0, w1])
    assert j.start == 0 and j.times.tolist() == [DAY, 2 * DAY, 4 * DAY, 5 * DAY, 6 * DAY] and j.bounds == [2]
    assert list(j.returns) == ["agent", "bh"] and j.returns["agent"].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert j.equity_times().tolist() == [0, DAY, 2 * DAY, 4 * DAY, 5 * DAY, 6 * DAY]


def test_holding_bars_is_the_mean_of_exit_minus_entry() -> None:
    assert holding_bars([10, 20], [13, 30]) == 6.5 and math.isnan(holding_bars([], []))
