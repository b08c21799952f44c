"""compute_metrics: equal to the float64 reference, padding-blind, host-read free, defined on edge cases.

Tolerances (device vs reference; both compute in float64 from the same float32 returns, so the real
gap is ~1e-15): Sharpe rtol 1e-3 and total return rtol 1e-4 (the design's parity bound), every other
continuous metric rtol 1e-9, counts and durations exactly; NaN and ±inf must sit in the same places.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.backtest import metrics as metrics_module
from foxhunt.backtest.metrics import (
    METRIC_INDEX,
    METRIC_NAMES,
    TradeRecords,
    compute_metrics,
    metrics_to_dicts,
)
from foxhunt.backtest.metrics_reference import reference_metrics, window_metrics
from foxhunt.testing import cuda_sync_errors, forbid_host_reads

RTOL = {"sharpe": 1e-3, "total_return": 1e-4}
EXACT = {"max_drawdown_duration", "max_drawdown_recovery", "trade_count", "bars"}


def _random_case(rng: np.random.Generator, W: int = 24, T: int = 3_000, K: int = 600):
    """Windows of odd lengths 1..T (1, 2 and T included), drifts of both signs, positions, trades.
    (The traded notional per bar is ``_traded(positions)``.)"""
    lengths = rng.integers(1, T + 1, W)
    lengths[:4] = [1, 2, 3, T]
    drift = rng.uniform(-1e-3, 2e-3, (W, 1))
    returns = (drift + 0.01 * rng.standard_t(4, (W, T))).astype(np.float32)
    positions = rng.choice(np.array([-1.0, -0.5, 0.0, 0.5, 1.0], np.float32), (W, T), p=[0.1, 0.1, 0.5, 0.1, 0.2])
    positions[5] = 0.0  # never in the market
    trade_w = rng.integers(-3, W + 3, K)  # some out-of-range windows: ignored
    trade_w[trade_w == 6] = 7  # window 6 has no trades
    trade_r = (rng.normal(2e-4, 0.02, K)).astype(np.float32)
    trade_r[trade_w == 8] = np.abs(trade_r[trade_w == 8])  # window 8: only winners → profit factor inf
    trade_v = rng.random(K) < 0.85
    return lengths, returns, positions, trade_w, trade_r, trade_v


def _traded(positions: np.ndarray) -> np.ndarray:
    """A traded notional per bar (units of the initial capital): |Δ exposure| from flat."""
    return np.abs(np.diff(positions, axis=1, prepend=0.0)).astype(np.float32)


def _garbage_pad(x: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = x.copy()
    junk = np.array([np.nan, np.inf, -np.inf, 1e30, -7.0], np.float32)
    for w, n in enumerate(lengths):
        x[w, n:] = rng.choice(junk, x.shape[1] - n)
    return x


def _device_metrics(device, lengths, returns, positions, tw, tr, tv, traded=None, **kw) -> np.ndarray:
    trades = TradeRecords(torch.from_numpy(tw).to(device), torch.from_numpy(tr).to(device),
                          torch.from_numpy(tv).to(device))
    traded = _traded(positions) if traded is None else traded
    out = compute_metrics(torch.from_numpy(returns).to(device), torch.from_numpy(lengths).to(device),
                          positions=torch.from_numpy(positions).to(device), trades=trades,
                          traded=torch.from_numpy(traded).to(device), **kw)
    assert out.shape == (len(lengths), len(METRIC_NAMES)) and out.dtype == torch.float64
    return out.cpu().numpy()


def _assert_metrics_equal(got: np.ndarray, want: np.ndarray) -> None:
    for j, name in enumerate(METRIC_NAMES):
        g, w = got[:, j], want[:, j]
        if name in EXACT:
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            np.testing.assert_allclose(g, w, rtol=RTOL.get(name, 1e-9), atol=1e-14, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("kw", [{}, {"bars_per_year": 98_280.0, "risk_free": 1e-4}])
def test_device_equals_float64_reference_on_random_windows_with_garbage_padding(device, rng, kw):
    lengths, returns, positions, tw, tr, tv = _random_case(rng)
    tr_garbage = np.where(tv, tr, np.float32(np.nan))
    got = _device_metrics(device, lengths, _garbage_pad(returns, lengths, rng),
                          _garbage_pad(positions, lengths, rng), tw, tr_garbage, tv,
                          traded=_garbage_pad(_traded(positions), lengths, rng), **kw)
    want = reference_metrics(returns, lengths, positions=positions, trade_window=tw, trade_ret=tr,
                             trade_valid=tv, traded=_traded(positions), **kw)
    _assert_metrics_equal(got, want)
    col = lambda name: got[:, METRIC_INDEX[name]]  # noqa: E731
    # the random case exercises the interesting branches, not only the easy ones
    assert np.isnan(col("max_drawdown_recovery")).any() and (col("max_drawdown_recovery") > 0).any()
    assert col("trade_count")[6] == 0 and np.isnan(col("profit_factor")[6])
    assert np.isinf(col("profit_factor")[8]) and col("exposure_time")[5] == 0


def test_padding_contents_do_not_change_any_metric(device, rng):
    lengths, returns, positions, tw, tr, tv = _random_case(rng, W=9, T=500, K=50)
    zero_r, zero_p = returns.copy(), positions.copy()
    for w, n in enumerate(lengths):
        zero_r[w, n:] = 0.0
        zero_p[w, n:] = 0.0
    a = _device_metrics(device, lengths, zero_r, zero_p, tw, tr, tv, traded=_traded(zero_p))
    b = _device_metrics(device, lengths, _garbage_pad(returns, lengths, rng), _garbage_pad(positions, lengths, rng),
                        tw, tr, tv, traded=_garbage_pad(_traded(zero_p), lengths, rng))
    c = _device_metrics(device, lengths, returns, positions, tw, tr, tv,  # real data beyond the length
                        traded=_traded(positions))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_compute_metrics_does_no_host_reads(device, rng):
    lengths, returns, positions, tw, tr, tv = _random_case(rng, W=9, T=300, K=40)
    args = [torch.from_numpy(x).to(device) for x in (returns, lengths, positions, tw, tr, tv)]
    with forbid_host_reads(), cuda_sync_errors(device):
        out = compute_metrics(args[0], args[1], positions=args[2], trades=TradeRecords(*args[3:]))
    assert out.shape == (9, len(METRIC_NAMES))


@pytest.mark.parametrize("length", [1, 7, 512, 513, 1_000, 4_097])
def test_blocked_scans_equal_torch_cumprod_and_cummax_on_odd_lengths(device, length):
    g = torch.Generator().manual_seed(length)
    x = (1 + 0.01 * torch.randn(3, length, generator=g, dtype=torch.float64)).to(device)
    idx = torch.randint(0, length, (3, length), generator=g, dtype=torch.int32).to(device)
    torch.testing.assert_close(metrics_module._scan(x, "prod"), torch.cumprod(x, 1), rtol=1e-13, atol=0)
    assert torch.equal(metrics_module._scan(x, "max"), torch.cummax(x, 1).values)
    assert torch.equal(metrics_module._scan(idx, "max"), torch.cummax(idx, 1).values)


def _one(returns, **kw) -> dict[str, float]:
    r = torch.tensor([returns], dtype=torch.float32)
    return metrics_to_dicts(compute_metrics(r, torch.tensor([len(returns)]), **kw))[0]


def test_one_bar_window_is_defined_without_dispersion_metrics():
    m = _one([-0.02], positions=torch.tensor([[1.0]]), traded=torch.tensor([[0.95]]))
    r = float(np.float32(-0.02))
    assert m["total_return"] == pytest.approx(r, rel=1e-12) and m["bars"] == 1
    assert m["annual_return"] == pytest.approx((1 + r) ** 252 - 1, rel=1e-9)
    for name in ("annual_volatility", "sharpe", "sortino"):
        assert math.isnan(m[name]), name
    assert m["max_drawdown"] == pytest.approx(r, rel=1e-12)  # the first bar's loss counts
    assert m["value_at_risk"] == m["conditional_value_at_risk"] == pytest.approx(r, rel=1e-12)
    assert m["max_drawdown_duration"] == 1 and math.isnan(m["max_drawdown_recovery"])
    # opening from flat counts: 0.95 traded over the mean equity (1 + 1 + r) / 2
    assert m["turnover"] == pytest.approx(0.95 / ((2 + r) / 2), rel=1e-6) and m["exposure_time"] == 1.0
    assert m["calmar"] == pytest.approx(m["annual_return"] / abs(r), rel=1e-9)


def test_all_zero_returns_give_zero_risk_and_nan_ratios():
    m = _one([0.0] * 50)
    for name in ("total_return", "annual_return", "annual_volatility", "max_drawdown", "max_drawdown_duration",
                 "max_drawdown_recovery", "value_at_risk", "conditional_value_at_risk"):
        assert m[name] == 0.0, name
    for name in ("sharpe", "sortino", "calmar"):
        assert math.isnan(m[name]), name  # 0/0, as empyrical
    assert m["final_equity"] == 1.0


def test_zero_volatility_nonzero_mean_gives_signed_infinite_sharpe_and_exact_zero_volatility():
    up, down = _one([0.01] * 20), _one([-0.01] * 20)
    assert up["annual_volatility"] == 0.0 and down["annual_volatility"] == 0.0
    assert up["sharpe"] == math.inf and down["sharpe"] == -math.inf
    assert up["sortino"] == math.inf and down["sortino"] < 0 and math.isfinite(down["sortino"])
    assert math.isnan(up["calmar"]) and down["calmar"] < 0  # no drawdown → NaN


def test_window_that_never_recovers_reports_duration_to_the_end_and_nan_recovery():
    m = _one([0.1, -0.2, 0.05, 0.01])  # peak after bar 1, underwater to the end (points 2..4)
    assert m["max_drawdown_duration"] == 3
    assert math.isnan(m["max_drawdown_recovery"])
    e = np.cumprod(1 + np.array([0.1, -0.2, 0.05, 0.01], np.float32).astype(np.float64))
    assert m["max_drawdown"] == pytest.approx((e.min() / e.max()) - 1, rel=1e-12)


def test_drawdown_duration_is_the_longest_spell_and_recovery_is_from_the_deepest_trough():
    # spell A: points 0→3 (peak at 0, trough at 1 = -30 %, recovered at 3): duration 3, recovery 2
    # spell B: points 3→9 (shallow, -2 %; point 8 is still 1e-4 below the peak): duration 6
    r = [-0.3, 0.2, 0.25, -0.01, -0.01, 0.005, 0.005, 0.01, 0.05]
    m = _one(r)
    assert m["max_drawdown_duration"] == 6
    assert m["max_drawdown_recovery"] == 2
    assert m["max_drawdown"] == pytest.approx(float(np.float32(-0.3)), rel=1e-12)
    ref = window_metrics(np.array(r, np.float32))
    assert (ref["max_drawdown_duration"], ref["max_drawdown_recovery"]) == (6.0, 2.0)


def test_trade_metrics_no_trades_nan_only_wins_inf_mixed_ratio():
    trades = TradeRecords(torch.tensor([1, 1, 2, 2, 2, 0]), torch.tensor([0.02, 0.01, 0.03, -0.01, 0.0, 9.0]),
                          torch.tensor([True, True, True, True, True, False]))
    m = metrics_to_dicts(compute_metrics(torch.zeros(4, 3), torch.tensor([3, 3, 3, 3]), trades=trades))
    assert m[0]["trade_count"] == 0 and all(math.isnan(m[0][k]) for k in ("win_rate", "avg_trade_return", "profit_factor"))
    assert m[1]["trade_count"] == 2 and m[1]["win_rate"] == 1.0 and m[1]["profit_factor"] == math.inf
    assert m[2]["trade_count"] == 3 and m[2]["win_rate"] == pytest.approx(1 / 3)  # a 0 return is not a win
    assert m[2]["profit_factor"] == pytest.approx(3.0, rel=1e-6)
    assert m[2]["avg_trade_return"] == pytest.approx(0.02 / 3, rel=1e-6)
    zero_only = TradeRecords(torch.tensor([0]), torch.tensor([0.0]), torch.tensor([True]))
    assert math.isnan(_one([0.0, 0.0], trades=zero_only)["profit_factor"])


def test_missing_positions_and_trades_give_nan_columns():
    m = _one([0.01, -0.01, 0.02])
    for name in ("turnover", "exposure_time", "trade_count", "win_rate", "avg_trade_return", "profit_factor"):
        assert math.isnan(m[name]), name


def test_turnover_is_traded_notional_over_mean_equity_and_exposure_counts_nonzero_bars():
    pos = torch.tensor([[0.0, 1.0, 1.0, -0.5, 0.0, 0.0, 7.0, 7.0]])  # last two bars are padding
    traded = torch.tensor([[0.0, 1.0, 0.0, 1.5, 0.5, 0.0, 9.0, 9.0]])
    m = metrics_to_dicts(compute_metrics(torch.zeros(1, 8), torch.tensor([6]), positions=pos, traded=traded))[0]
    assert m["turnover"] == pytest.approx(1 + 0 + 1.5 + 0.5 + 0)  # flat equity: mean 1
    assert m["exposure_time"] == pytest.approx(3 / 6)
    # price drift is not trading: one purchase, then the equity doubles over the window
    ret = torch.tensor([[0.0, 0.25, 0.2, 1 / 6, 1 / 7, 0.125]])  # equity 1, 1, 1.25, 1.5, 1.75, 2, 2.25
    m = metrics_to_dicts(compute_metrics(ret, torch.tensor([6]), traded=torch.tensor([[0.95, 0, 0, 0, 0, 0]])))[0]
    eq = np.cumprod(np.concatenate([[1.0], 1 + ret[0].double().numpy()]))
    assert m["turnover"] == pytest.approx(0.95 / eq.mean(), rel=1e-6)


def test_var_and_cvar_follow_numpy_percentile_and_the_k_plus_one_tail_with_ties(rng):
    lengths = np.array([1, 2, 20, 21, 22, 101, 999])
    r = np.round(rng.normal(0, 0.01, (7, 999)), 3).astype(np.float32)  # many ties
    m = compute_metrics(torch.from_numpy(r), torch.from_numpy(lengths)).numpy()
    for w, n in enumerate(lengths):
        x = r[w, :n].astype(np.float64)
        assert m[w, METRIC_INDEX["value_at_risk"]] == pytest.approx(np.percentile(x, 5), rel=1e-12, abs=1e-15)
        k = int((n - 1) * 0.05)
        assert m[w, METRIC_INDEX["conditional_value_at_risk"]] == pytest.approx(np.sort(x)[: k + 1].mean(), rel=1e-12)


def test_metrics_to_dicts_names_every_column_in_order():
    rows = metrics_to_dicts(compute_metrics(torch.full((2, 4), 0.01), torch.tensor([4, 2])))
    assert [list(r) for r in rows] == [list(METRIC_NAMES)] * 2
    assert rows[1]["bars"] == 2 and rows[0]["total_return"] == pytest.approx(1.01**4 - 1, rel=1e-6)


def test_bad_shapes_are_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="returns"):
        compute_metrics(torch.zeros(5), torch.tensor([5]))
    with pytest.raises(ValueError, match="lengths"):
        compute_metrics(torch.zeros(2, 5), torch.tensor([5]))
    with pytest.raises(ValueError, match="positions"):
        compute_metrics(torch.zeros(2, 5), torch.tensor([5, 5]), positions=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="TradeRecords"):
        TradeRecords(torch.zeros(3, dtype=torch.int64), torch.zeros(2), torch.ones(3, dtype=torch.bool))


# Wipe-outs (issue 30): a bar return of -1 (the capital lost) or below (a leveraged loss beyond it).
WIPE_OUTS = {
    "wipe-out mid-window": [0.01, -0.02, -1.0, 0.0, 0.01],
    "wipe-out then gains": [0.01, -0.02, -1.0, 0.05, 0.01],
    "ends on the wipe-out": [0.01, -0.02, 0.03, -1.0],
    "starts with the wipe-out": [-1.0, 0.01, -0.02, 0.03],
    "one-bar wipe-out": [-1.0],
    "two wipe-outs (zero dispersion)": [-1.0, -1.0],
    "beyond the wipe-out mid-window": [0.01, -0.02, -1.5, 0.0, 0.01],
    "beyond the wipe-out then gains": [0.01, -0.02, -1.5, 0.05, 0.01],
    "ends beyond the wipe-out": [0.01, 0.02, -1.5],
    "starts beyond the wipe-out": [-1.5, 0.01, -0.02, 0.03],
    "one-bar beyond the wipe-out": [-1.5],
    "twice beyond: the equity turns positive again": [0.01, -1.5, -1.5, 0.03],
    "beyond, then a second loss beyond lifts the equity back to the peak": [-1.5, -3.0, 0.01],
    "beyond to a mean equity of exactly 0": [-2.0],
}


def _wipe_out_batch(rng: np.random.Generator, T: int = 3_000):
    """The WIPE_OUTS series plus two long windows (blocked scans) with a wipe-out / a -1.5 inside,
    as one [W, T] float32 batch with their lengths, positions, traded notionals and trade records
    (round trips of -1 and -1.5 among them)."""
    series = [np.array(r, np.float32) for r in WIPE_OUTS.values()]
    for at, loss in ((1_500, -1.0), (700, -1.5)):
        long = (0.01 * rng.standard_t(4, T)).astype(np.float32)
        long[at] = loss
        series.append(long)
    W = len(series)
    lengths = np.array([len(s) for s in series])
    returns = np.zeros((W, T), np.float32)
    for w, s in enumerate(series):
        returns[w, : len(s)] = s
    positions = rng.choice(np.array([-1.0, 0.0, 1.0, 2.5], np.float32), (W, T))
    traded = np.full((W, T), 0.5, np.float32)
    tw = np.repeat(np.arange(W), 3)
    tr = np.tile(np.array([-1.0, -1.5, 0.02], np.float32), W)
    tv = np.ones(len(tw), bool)
    return lengths, returns, positions, traded, tw, tr, tv


def test_reference_equals_device_on_every_metric_of_wipe_out_and_beyond_windows_with_nan_in_the_same_places(
        device, rng):
    lengths, returns, positions, traded, tw, tr, tv = _wipe_out_batch(rng)
    got = _device_metrics(device, lengths, _garbage_pad(returns, lengths, rng), _garbage_pad(positions, lengths, rng),
                          tw, tr, tv, traded=_garbage_pad(traded, lengths, rng))
    want = reference_metrics(returns, lengths, positions=positions, trade_window=tw, trade_ret=tr, trade_valid=tv,
                             traded=traded)  # issue 30: this raised "math domain error"
    _assert_metrics_equal(got, want)  # NaN and ±inf in the same places, every column
    col = lambda name: want[:, METRIC_INDEX[name]]  # noqa: E731
    assert np.isnan(col("stability")).all()
    below = col("final_equity") < 0
    assert below.any() and np.isnan(col("annual_return")[below]).all() and np.isnan(col("calmar")[below]).all()
    assert (col("max_drawdown") <= -1).all()
    assert np.isinf(col("turnover")).any() and (col("turnover") < 0).any()  # mean equity 0, and below 0
    assert (col("max_drawdown_recovery") == 1).any()  # the sign flip back to the peak recovers


def test_wipe_out_gives_total_loss_cagr_minus_one_and_nan_stability_and_beyond_gives_nan_cagr():
    """The issue's window, then the same with a -1.5: reference and device agree on the documented
    values (the reference raised ValueError: math domain error on both)."""
    wipe, beyond = WIPE_OUTS["wipe-out mid-window"], WIPE_OUTS["beyond the wipe-out mid-window"]
    for m in (window_metrics(np.array(wipe, np.float32)), _one(wipe)):
        assert m["final_equity"] == 0.0 and m["total_return"] == -1.0 and m["annual_return"] == -1.0
        assert m["max_drawdown"] == -1.0 and m["calmar"] == -1.0 and m["conditional_value_at_risk"] == -1.0
        assert m["max_drawdown_duration"] == 4 and math.isnan(m["max_drawdown_recovery"])  # 0 never recovers
        assert math.isnan(m["stability"])  # log(1 + -1) = -inf
        assert all(math.isfinite(m[k]) for k in ("annual_volatility", "sharpe", "sortino", "omega_ratio", "tail_ratio"))
    e = np.cumprod(1 + np.array(beyond, np.float32).astype(np.float64))
    for m in (window_metrics(np.array(beyond, np.float32)), _one(beyond)):
        assert m["final_equity"] == pytest.approx(e[-1], rel=1e-12) and m["final_equity"] < 0
        assert math.isnan(m["annual_return"]) and math.isnan(m["calmar"])  # no real CAGR below 0
        assert m["max_drawdown"] == pytest.approx(e[-1] / e[0] - 1, rel=1e-12)  # -1.49: beyond -1
        assert math.isnan(m["stability"])  # log(1 + -1.5) is undefined
        assert m["conditional_value_at_risk"] == -1.5


def test_turnover_over_a_zero_mean_equity_is_inf_with_trading_and_nan_without_in_reference_and_device():
    r = WIPE_OUTS["beyond to a mean equity of exactly 0"]  # equity points 1, -1
    for traded, want in ((0.5, math.inf), (0.0, math.nan)):
        ref = window_metrics(r, traded=[traded])["turnover"]
        dev = _one(r, traded=torch.tensor([[traded]]))["turnover"]
        np.testing.assert_array_equal([ref, dev], [want, want], err_msg=f"traded {traded}")  # NaN == NaN here
