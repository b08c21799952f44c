"""The vectorised backtester against a float64 reference built from the oracle env and metric set."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agents.networks import DuelingQNet
from foxhunt.backtest.evaluator import Backtester, execution_params
from foxhunt.backtest.metrics import METRIC_INDEX
from foxhunt.backtest.metrics_reference import reference_metrics
from foxhunt.backtest.policies import ActionPolicy, EnsemblePolicy, ExposurePolicy, GreedyPolicy
from foxhunt.env import EnvParams
from foxhunt.env.reference import ReferenceEnv
from foxhunt.env.reference_market import ReferenceMarket
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.testing import forbid_host_reads
from tests.env.test_parity import parity_market
from tests.helpers import random_feature_set

PARAMS = EnvParams(cost_bps=2.0, spread_bps=3.0, impact_eta=0.2, profit_bps=30, stop_bps=30, max_holding=20)


def _reference_backtest(market: MarketData, starts, lengths, actions: np.ndarray, params: EnvParams):
    """float64: the oracle env steps each window with the same actions; returns [W, T] etc."""
    ref_m = ReferenceMarket.from_market(market)
    p = execution_params(params).model_dump()
    w, t = actions.shape
    rets = np.zeros((w, t))
    pos = np.zeros((w, t))
    traded = np.zeros((w, t))
    trades = []
    for i in range(w):
        env = ReferenceEnv(ref_m, {**p, "episode_length": int(lengths[i])})
        env.reset(int(starts[i]))
        for k in range(int(lengths[i])):
            e0, q0, fill_bar = env.equity, env.position, int(starts[i]) + k + 1
            _, done, info = env.step(int(actions[i, k]))
            rets[i, k] = env.equity / e0 - 1.0
            pos[i, k] = env.portfolio_features()[0]
            traded[i, k] = abs(env.position - q0) * ref_m.open[fill_bar] / p["capital"]  # units at the fill bar's open
            if info["trade_closed"]:
                trades.append((i, info["trade_entry_bar"], info["trade_exit_bar"], info["trade_side"], info["trade_return"]))
            if done:
                break
    return rets, pos, trades, traded


@pytest.mark.parametrize("seed", [0, 1])
def test_device_backtest_matches_the_float64_reference_on_random_policies(seed):
    market = parity_market(seed)
    rng = np.random.default_rng(seed)
    f = market.fold
    starts = rng.integers(f.train_start, f.val_end - 400, 5)
    lengths = np.array([1, 2, 37, 211, 399])
    actions = rng.integers(0, 45, (5, 399))
    # Hold actions for a few bars so that positions live long enough to trade round trips.
    actions = np.repeat(actions[:, ::7], 7, axis=1)[:, :399]
    res = Backtester(market, PARAMS, chunk=16).run(starts, lengths, ActionPolicy(torch.as_tensor(actions)),
                                                   keep_curves=True, keep_trades=True)
    rets, pos, trades, traded = _reference_backtest(market, starts, lengths, actions, PARAMS)
    tw = np.array([t[0] for t in trades], dtype=np.int64)
    tr = np.array([t[4] for t in trades])
    ref = reference_metrics(rets, lengths, bars_per_year=Backtester(market).bars_per_year, positions=pos,
                            trade_window=tw, trade_ret=tr, trade_valid=np.ones(len(trades), bool), traded=traded)
    dev = res.metrics_tensor.cpu().numpy()
    assert (ref[:, METRIC_INDEX["turnover"]] > 0).sum() >= 3  # the random policies do trade
    for w in range(5):
        assert dev[w, METRIC_INDEX["turnover"]] == pytest.approx(ref[w, METRIC_INDEX["turnover"]], rel=1e-4, abs=1e-7)
        assert dev[w, METRIC_INDEX["total_return"]] == pytest.approx(ref[w, METRIC_INDEX["total_return"]], rel=1e-4, abs=1e-7)
        if lengths[w] > 2 and np.isfinite(ref[w, METRIC_INDEX["sharpe"]]):
            assert dev[w, METRIC_INDEX["sharpe"]] == pytest.approx(ref[w, METRIC_INDEX["sharpe"]], rel=1e-3)
        assert dev[w, METRIC_INDEX["trade_count"]] == ref[w, METRIC_INDEX["trade_count"]]
    # identical trade lists (window, entry bar, exit bar, side), returns within float32 tolerance
    got = [(t["window"], t["entry_bar"], t["exit_bar"], t["side"]) for t in res.trades]
    assert got == [t[:4] for t in trades]
    np.testing.assert_allclose([t["return"] for t in res.trades], tr, rtol=1e-4, atol=1e-7)
    # final PnL per window within 0.01 %
    for w in range(5):
        np.testing.assert_allclose(res.equity(w)[-1], np.prod(1 + rets[w, : lengths[w]]), rtol=1e-4)


def test_finished_windows_stop_changing_and_padding_is_zero():
    m = MarketData(random_feature_set(3_000, 5))
    m.set_fold(FoldRange(0, 0, 2_000, 2_010, 3_000))
    res = Backtester(m, chunk=8).run([2_010, 2_020], [5, 50], ExposurePolicy(torch.ones(2, 50), 45), keep_curves=True)
    assert np.all(res.returns[0, 5:] == 0.0)
    assert np.all(res.positions[0, 5:] == 0.0)
    assert res.metrics[0]["bars"] == 5 and res.metrics[1]["bars"] == 50


def test_buy_and_hold_earns_the_price_return_times_the_invested_fraction():
    m = MarketData(random_feature_set(3_000, 5, seed=3))
    m.set_fold(FoldRange(0, 0, 2_000, 2_010, 3_000))
    p = EnvParams(cost_bps=0.0, spread_bps=0.0, impact_eta=0.0, reserve=0.0)
    res = Backtester(m, p).run([2_010], [900], ExposurePolicy(torch.ones(1, 900), 45))
    o = m.ohlc.double()
    # q = E / C_2010 units bought at the next open O_2011 and marked at the last close C_2910.
    expect = float((o[2_910, 3] - o[2_011, 0]) / o[2_010, 3])
    assert res.metrics[0]["total_return"] == pytest.approx(expect, rel=1e-5)
    assert res.metrics[0]["exposure_time"] == 1.0


def test_an_ensemble_of_one_model_acts_exactly_like_the_model():
    m = MarketData(random_feature_set(3_000, 5, seed=4))
    m.set_fold(FoldRange(0, 0, 2_000, 2_010, 3_000))
    torch.manual_seed(0)
    net = DuelingQNet(m.obs_dim, 45, (16, 16), 8)
    bt = Backtester(m, PARAMS)
    args = ([2_010, 2_300], [300, 123])
    base = bt.run(*args, GreedyPolicy(net), keep_curves=True)
    for mode in ("vote", "mean"):
        ens = bt.run(*args, EnsemblePolicy([net], [3.0], mode=mode), keep_curves=True)
        assert np.array_equal(ens.returns, base.returns)


def test_ensemble_vote_follows_the_weighted_majority():
    torch.manual_seed(1)
    nets = [DuelingQNet(4, 5, (8,), 4) for _ in range(3)]
    obs = torch.randn(64, 4)
    greedy = torch.stack([n(obs).argmax(1) for n in nets])
    heavy = EnsemblePolicy(nets, [0.1, 0.1, 5.0], mode="vote")(obs, torch.zeros((), dtype=torch.int64))
    assert torch.equal(heavy, greedy[2])
    mean = EnsemblePolicy(nets, None, mode="mean")(obs, torch.zeros((), dtype=torch.int64))
    assert torch.equal(mean, torch.stack([n(obs) for n in nets]).mean(0).argmax(1))


def test_each_window_uses_its_own_fold_normalisation():
    m = MarketData(random_feature_set(3_000, 5, seed=5))
    m.set_fold(FoldRange(0, 0, 2_000, 2_010, 3_000))
    n1 = m.norm_stats(0, 1_000)
    n2 = m.norm_stats(1_000, 2_000)
    seen = []

    def spy(obs, t):
        seen.append(obs.clone())
        return torch.full((obs.shape[0],), 22, dtype=torch.int64)

    Backtester(m, cuda_graphs=False, chunk=1).run([2_010, 2_010], [1, 1], spy, norms=[n1, n2])
    f = m.features[2_010].double()
    np.testing.assert_allclose(seen[0][0, :5].double(), (f - n1.mean) / n1.std, rtol=1e-5)
    np.testing.assert_allclose(seen[0][1, :5].double(), (f - n2.mean) / n2.std, rtol=1e-5)


def test_exposure_policy_rounds_to_the_five_levels_and_rejects_bad_values():
    pol = ExposurePolicy(torch.tensor([[-1.0, -0.6, -0.2, 0.2, 0.3, 0.9]]), 45)
    assert (pol.actions // 9).tolist() == [[0, 1, 2, 2, 3, 4]]
    assert (pol.actions % 9).tolist() == [[1] * 6]
    with pytest.raises(ValueError):
        ExposurePolicy(torch.tensor([[1.5]]), 45)


def test_the_step_loop_does_no_host_reads():
    m = MarketData(random_feature_set(2_000, 4))
    m.set_fold(FoldRange(0, 0, 1_500, 1_510, 2_000))
    from foxhunt.backtest.evaluator import _Run

    bt = Backtester(m, cuda_graphs=False, chunk=4)
    torch.manual_seed(0)
    run = _Run(bt, np.array([1_510, 1_600]), np.array([30, 20]), GreedyPolicy(DuelingQNet(m.obs_dim, 45, (8,), 4)), None, True)
    with torch.no_grad(), forbid_host_reads():
        for _ in range(run.t_pad // bt.chunk):
            run.chunk_body()
