"""A model decides every ``decision_interval`` bars in a backtest and the backtester holds its action.

The torch Backtester is held to a plain Python hold loop around the per-bar greedy policy; the fused
kernel's hold is tests/kernels/test_backtest_fused.py's (``test_fused_kernel_holds_a_decision_*``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agents.networks import DuelingQNet
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import EnsemblePolicy, GreedyPolicy, decision_interval
from foxhunt.backtest.sampled import SampledPolicy
from foxhunt.env import EnvParams
from tests.env.env_helpers import random_market


class HoldEveryK:
    """The reference: a host-side counter; the net's argmax on steps 0, k, 2k, … and the last one kept."""

    decision_interval = 1

    def __init__(self, net, k: int) -> None:
        self.net, self.k, self.i, self.a = net, k, 0, None

    @torch.no_grad()
    def __call__(self, obs, t):
        if self.i % self.k == 0:
            self.a = self.net(obs).argmax(dim=1)
        self.i += 1
        return self.a


def _net(obs_dim: int, seed: int) -> DuelingQNet:
    torch.manual_seed(seed)
    net = DuelingQNet(obs_dim, 45, hidden=(32, 32), head_hidden=16)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0 if p.dim() == 2 else 0.05)  # greedy actions that change from bar to bar
    return net


@pytest.mark.parametrize("k", [2, 7])
def test_a_greedy_policy_at_k_decides_every_k_bars_and_holds_in_between(k):
    market = random_market(1_200, seed=3)
    net = _net(market.obs_dim, 3)
    bt = Backtester(market, EnvParams(cost_bps=2.0), chunk=16, cuda_graphs=False)
    starts, lengths = [100, 400, 951], [90, 61, 200]
    got = bt.run(starts, lengths, GreedyPolicy(net, decision_interval=k), keep_curves=True, keep_trades=True)
    want = bt.run(starts, lengths, HoldEveryK(net, k), keep_curves=True, keep_trades=True)
    np.testing.assert_array_equal(got.returns, want.returns)
    np.testing.assert_array_equal(got.positions, want.positions)
    assert got.trades == want.trades
    every_bar = bt.run(starts, lengths, GreedyPolicy(net), keep_curves=True)
    assert not np.array_equal(every_bar.positions, got.positions)  # the hold changed what was traded
    assert sum(r["turnover"] for r in got.metrics) < sum(r["turnover"] for r in every_bar.metrics)


def test_ensembles_and_sampled_policies_carry_the_interval_and_fixed_arrays_act_every_bar():
    market = random_market(800, seed=1)
    nets = [_net(market.obs_dim, s) for s in (1, 2)]
    assert decision_interval(EnsemblePolicy(nets, decision_interval=5)) == 5
    assert decision_interval(SampledPolicy(nets[0], seed=1, decision_interval=4)) == 4
    assert decision_interval(object()) == 1
    bt = Backtester(market, EnvParams(), chunk=8, cuda_graphs=False)
    ens = bt.run([50], [100], EnsemblePolicy(nets, decision_interval=5), keep_curves=True)
    ref = bt.run([50], [100], _EnsHold(nets, 5), keep_curves=True)
    np.testing.assert_array_equal(ens.positions, ref.positions)
    with pytest.raises(ValueError, match="decision_interval = 0: must be a whole number >= 1"):
        GreedyPolicy(nets[0], decision_interval=0)


class _EnsHold(HoldEveryK):
    def __init__(self, nets, k: int) -> None:
        super().__init__(None, k)
        self.ens = EnsemblePolicy(nets)

    def __call__(self, obs, t):
        if self.i % self.k == 0:
            self.a = self.ens(obs, t)
        self.i += 1
        return self.a
