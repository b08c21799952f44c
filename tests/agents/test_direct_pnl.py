"""The direct learner trains on what the backtester trades: its training P&L of the env's exposure
levels equals the torch backtester's returns for the same levels (market orders of normal urgency),
and its greedy network, backtested, trades the levels the training forward pass holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.pnl import LEVELS, Execution, gather_bars, window_returns
from foxhunt.agents.direct.policy import DirectPolicy
from foxhunt.agents.direct.trainer import DirectTrainer
from foxhunt.backtest.evaluator import Backtester, execution_params
from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.env import EnvParams
from foxhunt.env.params import EnvTensors
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set

ATOL = 1e-6  # per-bar returns ~1e-3; the two orderings of the same float32 sums differ by ~1.4e-7


def _market(has_volume: bool = True, seed: int = 0) -> MarketData:
    fs = random_feature_set(1_500, 6, seed=seed)
    if not has_volume:
        fs = dataclasses.replace(fs, has_volume=False)
    m = MarketData(fs, "cpu")
    m.set_fold(FoldRange(0, 0, 1_000, 1_010, 1_500))
    return m


def _levels(w: int, t: int, seed: int) -> torch.Tensor:
    """Random level paths that hold for random stretches (so that holds, adds, reductions and reversals occur)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((w, t), dtype=np.float32)
    for i in range(w):
        cur = 0.0
        for j in range(t):
            if rng.random() < 0.3:
                cur = float(rng.choice(LEVELS))
            out[i, j] = cur
    return torch.from_numpy(out)


@pytest.mark.parametrize("env,volume", [
    (EnvParams(), True),
    (EnvParams(capital=1e8, cost_bps=2.5, spread_bps=3.0, impact_eta=0.2, max_impact=0.002), True),  # the impact cap binds
    (EnvParams(max_position=2.0, reserve=0.2, cost_bps=0.5), True),
    (EnvParams(capital=1e5), False),  # no volume: no impact
], ids=["default", "capped-impact", "leverage", "no-volume"])
def test_the_training_pnl_of_levels_equals_the_torch_backtesters_returns(env, volume):
    m = _market(volume)
    w, t = 12, 90
    starts = torch.tensor([0, 17, 101, 250, 333, 480, 512, 640, 700, 777, 850, 905])
    x = _levels(w, t, seed=3)
    res = Backtester(m, env, chunk=16, cuda_graphs=False).run(starts.numpy(), [t] * w, ExposurePolicy(x), keep_curves=True)
    idx = starts[:, None] + torch.arange(t)
    ex = Execution.of(EnvTensors.build(execution_params(env), 1, "cpu"))
    ours = window_returns(x, gather_bars(m, idx), ex, m.median_abs_return)
    assert res.returns is not None
    np.testing.assert_allclose(ours.numpy(), res.returns, rtol=0, atol=ATOL)
    assert np.abs(res.returns).max() > 1e-4 and (np.diff(x.numpy(), axis=1) != 0).sum() > 100  # it traded


@pytest.mark.parametrize("relaxation", ["softmax", "straight_through", "continuous"])
def test_the_greedy_network_sends_a_market_order_of_normal_urgency_at_the_policys_level(relaxation):
    torch.manual_seed(1)
    pol = DirectPolicy(6, (16, 16), 8, relaxation, position_input=True)
    with torch.no_grad():
        pol.head[2].weight.mul_(300.0)  # spread the outputs so that every level occurs
    net = pol.greedy_net()
    obs = torch.randn(4_000, 9)
    obs[:, 6] = torch.rand(4_000) * 2 - 1  # exposure
    out = pol(obs[:, :6], obs[:, 6])
    level = pol.level(out)
    assert torch.equal(net(obs).argmax(1), 9 * level + 1)  # 9·e + 3·market + normal
    assert set(level.tolist()) == set(range(5))
    moved = obs.clone()
    moved[:, 7:] = torch.randn(4_000, 2) * 10  # unrealised return, bars in position: not read
    assert torch.equal(net(moved).argmax(1), net(obs).argmax(1))
    if relaxation == "continuous":  # the level nearest tanh(u)
        x = torch.tanh(out[:, 0])
        assert torch.equal(level, (x[:, None] - torch.tensor(LEVELS)).abs().argmin(1))


@pytest.mark.parametrize("k,position_input", [(1, True), (3, True), (1, False)])
def test_the_training_forward_pass_holds_the_levels_the_backtested_greedy_network_trades(k, position_input):
    """straight_through trains on the argmax levels themselves: with the training costs at 1×, its
    forward pass's per-bar returns are the validation backtest's for the same windows."""
    m = _market()
    env = EnvParams(decision_interval=k, episode_length=64)
    cfg = DirectConfig(window=64, batch_windows=10, steps_per_epoch=1, hidden=(16, 16), head_hidden=8,
                       relaxation="straight_through", position_input=position_input)
    tr = DirectTrainer(m, env, cfg, seed=2, cuda_graphs=False)
    with torch.no_grad():
        tr.learner.net.head[2].weight.mul_(300.0)  # a random policy that trades often
    starts = torch.tensor([3, 50, 120, 200, 310, 400, 555, 600, 777, 900])
    with torch.no_grad():
        path = tr.learner.forward(starts)
    res = Backtester(m, env, chunk=16, cuda_graphs=False).run(starts.numpy(), [64] * 10, GreedyPolicy(tr.policy_net(), k),
                                                             keep_curves=True)
    assert res.positions is not None and res.returns is not None
    np.testing.assert_allclose(path["ret"].numpy(), res.returns, rtol=0, atol=ATOL)
    held = torch.tensor(LEVELS)[path["level"]] * (1 - env.reserve)  # target exposure of the level held
    assert (np.sign(res.positions) == np.sign(held.numpy())).all()
    assert len(set(path["level"].flatten().tolist())) >= 3
