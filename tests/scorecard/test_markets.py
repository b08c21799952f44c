"""Scorecard markets: each generator's oracle rule, backtested by the device backtester, equals the
float64 oracle env stepping the same actions; and each planted relation holds in the bars."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.backtest.evaluator import Backtester, execution_params
from foxhunt.backtest.policies import ExposurePolicy
from foxhunt.env import EnvParams
from foxhunt.env.reference import ReferenceEnv
from foxhunt.env.reference_market import ReferenceMarket
from foxhunt.features.extra import append_columns
from foxhunt.features.spec import build_features
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.scorecard.build import SCENARIO_ENV
from foxhunt.scorecard.markets import GENERATORS, make_scenario

SYNTHETIC = [n for n in GENERATORS if n not in ("sp500", "nasdaq")]
N, START, LEN = 600, 460, 100


def _market(name: str):
    sc = make_scenario(name, N)
    fs = append_columns(build_features(sc.bars), sc.extra)
    m = MarketData(fs)
    m.set_fold(FoldRange(0, fs.warmup, START - 20, START - 10, N))
    return sc, m


def _float64_backtest(market: MarketData, params: EnvParams, start: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[len] per-bar equity returns and exposures of the float64 oracle env stepping ``actions`` from ``start``."""
    ref = ReferenceEnv(ReferenceMarket.from_market(market), {**execution_params(params).model_dump(), "episode_length": len(actions)})
    ref.reset(start)
    out, pos = np.zeros(len(actions)), np.zeros(len(actions))
    for k, a in enumerate(actions):
        e0 = ref.equity
        ref.step(int(a))
        out[k] = ref.equity / e0 - 1.0
        pos[k] = ref.portfolio_features()[0]
    return out, pos


@pytest.mark.parametrize("name", SYNTHETIC)
def test_oracle_backtest_matches_the_float64_oracle_env(name):
    sc, market = _market(name)
    params = EnvParams(**SCENARIO_ENV, action_mode="exposure")
    rule = next(iter(sc.oracles.values()))
    ex = rule[START : START + LEN]
    assert set(np.unique(ex)) <= {-1.0, 0.0, 1.0}
    res = Backtester(market, params, chunk=16).run([START], [LEN], ExposurePolicy(torch.tensor(ex[None], dtype=torch.float32), 5),
                                                   keep_curves=True)
    # Baselines trade at market, normal urgency, whatever the env's action mode (issue 14): the
    # float64 env steps the same factored actions.
    from foxhunt.backtest.policies import _MARKET_NORMAL

    levels = np.rint((ex + 1.0) * 2.0).astype(np.int64) * 9 + _MARKET_NORMAL
    ref, pos = _float64_backtest(market, params.model_copy(update={"action_mode": "factored"}), START, levels)
    np.testing.assert_allclose(res.returns[0, :LEN], ref, rtol=1e-3, atol=2e-6)
    assert res.metrics[0]["total_return"] == pytest.approx(np.prod(1 + ref) - 1, rel=1e-4, abs=1e-6)
    # the same exposures held bar by bar
    np.testing.assert_allclose(res.positions[0, :LEN], pos, rtol=1e-4, atol=1e-5)
    assert np.mean(np.sign(pos) == ex) > 0.8  # after each step: mostly the level the rule asked for


def test_planted_relations_hold_in_the_bars():
    n = 20_000
    lr = lambda sc: np.diff(np.log(sc.bars.close), prepend=np.log(100.0))  # noqa: E731
    # leak: the extra column is exactly the next bar's close-to-close log return
    sc = make_scenario("leak", 3_000)
    np.testing.assert_allclose(sc.extra["leak_next_return"][:-1], lr(sc)[1:], rtol=1e-9, atol=1e-12)
    # edge_daily: following sign(r_t) earns on bar t+1 (planted drift, per-bar Sharpe ~ signal)
    sc = make_scenario("edge_daily", n)
    r = lr(sc)
    assert np.mean(sc.oracles["oracle"][:-1] * r[1:]) / np.std(r) > 0.15
    # edge_minute: x_t predicts r_{t+1}; the per-bar edge at |x| = 1 is below a round trip's cost (~3 bps)
    sc = make_scenario("edge_minute", n)
    r, x = lr(sc), sc.extra["signal_x"]
    assert np.corrcoef(x[:-1], r[1:])[0, 1] > 0.1
    assert np.mean(np.abs(r)) * 0.2 < 3e-4
    # regime: the hidden drift's sign separates the mean returns; mean reversion: the deviation's sign
    sc = make_scenario("regime", n)
    r, s = lr(sc), sc.oracles["oracle"]
    assert r[1:][s[:-1] > 0].mean() > 0 > r[1:][s[:-1] < 0].mean()
    sc = make_scenario("mean_revert", n)
    r = lr(sc)
    assert np.mean(sc.oracles["oracle_theta0"][:-1] * r[1:]) > 0
    # no edge: nothing planted (flat oracle), the same arguments give the same bars
    a, b = make_scenario("no_edge", 500), make_scenario("no_edge", 500)
    assert not a.oracles["oracle_flat"].any() and np.array_equal(a.bars.close, b.bars.close)


def test_regime_filter_is_a_probability_that_tracks_the_hidden_state():
    """The forward filter LEARNING.md uses for the causal ceiling: P(next drift up) in [0, 1], its
    sign agreeing with the hidden state most of the time (regimes last ~400 bars)."""
    import numpy as np

    from foxhunt.data import synthetic as syn
    from foxhunt.scorecard.markets import REGIME_BARS, regime, regime_filter

    s = regime(20_000)
    r = np.diff(np.log(s.bars.close), prepend=np.log(syn.START_PRICE))
    sigma = np.full(r.shape[0], float(np.std(r)))
    p = regime_filter(r, sigma, 0.12 * syn.ANNUAL_VOL / np.sqrt(252.0), 1.0 / REGIME_BARS)
    assert np.all((p >= 0.0) & (p <= 1.0))
    assert np.mean(np.sign(p - 0.5) == s.oracles["oracle"]) > 0.75
