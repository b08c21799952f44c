"""Timing apart from holding (foxhunt.backtest.timing): the beta / timing decomposition against a
float64 least-squares regression, its degenerate cases, and the holding verdict on real backtests of
a policy that holds and one that times a planted drift."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.agents.networks import DuelingQNet, action_bias_
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.metrics_reference import window_metrics
from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.backtest.timing import (CONSTANT_MARKET_NOTE, HOLDING_R_SQUARED, TIMING_KEYS, row_fields, timing_block,
                                     timing_text, window_timing)
from foxhunt.env import EnvParams
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set

BPY = 98_280.0  # minute bars of a 252-day, 6.5-hour year


def _numbers(block: dict) -> list[float]:
    return [v for k, v in block.items() if isinstance(v, float)]


def test_beta_and_timing_equal_a_float64_lstsq_regression_on_random_inputs_of_odd_lengths(rng):
    for n in (2, 3, 7, 101, 1_001, 4_097):
        m = rng.standard_t(4, n) * 1e-3
        r = 2e-5 + rng.uniform(-1.5, 1.5) * m + rng.normal(0, 7e-4, n)
        pos = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], n)
        (alpha, slope), *_ = np.linalg.lstsq(np.stack([np.ones(n), m], 1), r, rcond=None)
        residual = r - alpha - slope * m
        t = timing_block(r.astype(np.float32), pos, m.astype(np.float32), BPY, trades=3.0)
        r32, m32 = r.astype(np.float32).astype(np.float64), m.astype(np.float32).astype(np.float64)  # what it read
        (alpha32, slope32), *_ = np.linalg.lstsq(np.stack([np.ones(n), m32], 1), r32, rcond=None)
        assert t["beta"] == pytest.approx(slope32, rel=1e-9, abs=1e-12)
        assert abs(slope32 - slope) < 1e-3 * (abs(slope) + 1.0)  # float32 inputs: the same regression
        timing = r32 - slope32 * m32  # the intercept stays in the timing returns
        assert t["timing_total_return"] == pytest.approx(np.prod(1.0 + timing) - 1.0, rel=1e-9, abs=1e-15)
        assert np.allclose(residual + alpha, r - slope * m)  # lstsq's residual + intercept is r - beta m
        assert t["time_in_market"] == pytest.approx(np.mean(pos != 0)) and t["long_share"] == pytest.approx(np.mean(pos > 0))
        assert t["short_share"] == pytest.approx(np.mean(pos < 0)) and t["trades"] == 3.0 and t["bars"] == n
        assert t["standard_error"] == pytest.approx(math.sqrt(BPY / n)) and t["note"] is None and tuple(t) == TIMING_KEYS
        if n == 2:  # a line through two points: the timing returns are the intercept twice, a Sharpe of rounding
            assert abs(t["timing_sharpe"]) > 1e12 and t["verdict"] in ("timing", "mistiming", "holding")
            continue
        assert t["timing_sharpe"] == pytest.approx(window_metrics(timing.tolist(), bars_per_year=BPY)["sharpe"], rel=1e-7)
        res32 = r32 - alpha32 - slope32 * m32
        assert t["r_squared"] == pytest.approx(1.0 - res32 @ res32 / np.sum((r32 - r32.mean()) ** 2), rel=1e-7, abs=1e-9)
        assert all(math.isfinite(v) for v in _numbers(t))  # NaN-free


def test_a_buy_and_hold_that_does_not_vary_gives_beta_0_the_agents_returns_as_timing_and_a_note(rng):
    r = rng.normal(1e-4, 1e-3, 500)
    for market in (np.zeros(500), np.full(500, 3e-4, np.float32)):
        t = timing_block(r, np.ones(500), market, BPY)
        assert t["beta"] == 0.0 and t["note"] == CONSTANT_MARKET_NOTE
        assert t["timing_sharpe"] == pytest.approx(window_metrics(r.tolist(), bars_per_year=BPY)["sharpe"], rel=1e-9)
        assert all(math.isfinite(v) for v in _numbers(t))
    flat = timing_block(np.zeros(50), np.zeros(50), np.zeros(50), BPY)  # nothing anywhere: no NaN either
    assert flat["verdict"] == "flat" and flat["timing_sharpe"] == 0.0 and flat["r_squared"] is None
    assert all(math.isfinite(v) for v in _numbers(flat))


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^timing_returns: returns \(3,\) and market returns \(4,\) differ$"):
        timing_block(np.zeros(3), np.zeros(3), np.zeros(4), BPY)
    with pytest.raises(ValueError, match=r"^timing: returns holds a non-finite value at bar 1$"):
        timing_block(np.array([0.0, np.nan]), np.zeros(2), np.zeros(2), BPY)
    with pytest.raises(ValueError, match=r"^timing: positions \(2,\) and returns \(3,\) differ$"):
        timing_block(np.zeros(3), np.zeros(2), None, BPY)
    with pytest.raises(ValueError, match=r"^timing: a window of 0 bars has no returns to regress$"):
        timing_block(np.zeros(0), np.zeros(0), np.zeros(0), BPY)


def _market(n: int = 1_500, drift: np.ndarray | None = None, seed: int = 5) -> MarketData:
    """random_feature_set's bars, with a planted per-bar log drift when given."""
    fs = random_feature_set(n, 4, seed=seed)
    if drift is not None:
        ohlc = fs.ohlc.numpy().copy()
        lift = np.exp(np.cumsum(drift))[:, None]
        fs = FeatureSet(**{**fs.__dict__, "ohlc": torch.from_numpy(ohlc * lift)})
    m = MarketData(fs)
    m.set_fold(FoldRange(0, 0, 1_000, 1_000, n))
    return m


def test_a_policy_that_holds_long_has_beta_1_no_timing_and_is_flagged_holding():
    """A network that always asks for full long (routed to limit / IoC orders by the exposure action
    mode, so its fills differ from buy-and-hold's market order) and the fixed exposures +1, +0.5, -1:
    each is holding. The network's timing Sharpe is above one SE on these bars, the Sharpe of a
    residue of 0.01 % that buy-and-hold's exposure leaves: the R² clause is what calls it holding."""
    m = _market()
    env = EnvParams(action_mode="exposure")
    bt = Backtester(m, env, cuda_graphs=False)
    net = DuelingQNet(m.obs_dim, env.n_actions, (8,), 4)
    for p in net.parameters():
        p.data.zero_()
    action_bias_(net, 4, 10.0)  # exposure level +1: always full long
    starts, lengths = [1_001, 1_250], [241, 241]
    bh = bt.run(starts, lengths, ExposurePolicy(torch.ones(2, 241)), keep_curves=True)
    held = bt.run(starts, lengths, GreedyPolicy(net), keep_curves=True)
    for i in range(2):
        t = window_timing(held, i, bh, i)
        assert abs(t["beta"] - 1.0) < 0.01 and abs(t["timing_total_return"]) < 1e-3 and t["r_squared"] >= HOLDING_R_SQUARED
        assert (t["time_in_market"], t["long_share"], t["short_share"], t["trades"]) == (1.0, 1.0, 0.0, 0.0)
        assert t["verdict"] == "holding" and "(holding)" in timing_text(t)
    assert window_timing(held, 0, bh, 0)["timing_sharpe"] > window_timing(held, 0, bh, 0)["standard_error"]
    for level, beta in ((1.0, 1.0), (0.5, 0.5), (-1.0, -1.0)):
        res = bt.run(starts, lengths, ExposurePolicy(torch.full((2, 241), level)), keep_curves=True)
        t = window_timing(res, 0, bh, 0)
        assert t["beta"] == pytest.approx(beta, abs=0.05) and t["verdict"] == "holding", (level, t)
        assert t["time_in_market"] == res.metrics[0]["exposure_time"] == 1.0  # the metrics' exposure time
    exact = window_timing(bt.run(starts, lengths, ExposurePolicy(torch.ones(2, 241)), keep_curves=True), 1, bh, 1)
    assert exact["beta"] == 1.0 and exact["timing_sharpe"] == 0.0 and exact["timing_total_return"] == 0.0  # bar for bar
    row = row_fields(exact)
    assert row["timing_note"] is None and "timing_standard_error" in row and "trades" not in row and "bars" not in row


def test_a_policy_long_while_a_planted_drift_is_positive_times_the_market():
    """Bars 1,000-1,500 carry a drift of ±0.05 % a bar whose sign flips every 60 bars; a policy long
    while it is positive and short while it is negative times it (beta near 0, timing Sharpe several
    SE above 0); holding long on the same bars does not."""
    n = 1_500
    sign = np.where((np.arange(n) // 60) % 2 == 0, 1.0, -1.0)
    m = _market(n, drift=np.where(np.arange(n) >= 1_000, 5e-4 * sign, 0.0))
    bt = Backtester(m, EnvParams(action_mode="factored"), cuda_graphs=False)
    start, steps = 1_001, 480
    ex = torch.from_numpy(sign[start + 1 : start + 1 + steps].astype(np.float32))[None]  # the bar the position earns on
    timed = bt.run([start], [steps], ExposurePolicy(ex), keep_curves=True, keep_trades=True)
    bh = bt.run([start], [steps], ExposurePolicy(torch.ones(1, steps)), keep_curves=True)
    t = window_timing(timed, 0, bh, 0)
    assert t["timing_sharpe"] > 3 * t["standard_error"] and t["verdict"] == "timing", t
    assert abs(t["beta"]) < 0.3 and t["timing_total_return"] > 0.05
    assert 0.4 < t["long_share"] < 0.6 and t["long_share"] + t["short_share"] == t["time_in_market"] == 1.0
    assert t["trades"] == timed.metrics[0]["trade_count"] >= 7
    assert window_timing(bh, 0, bh, 0)["verdict"] == "holding"
