"""Triple-barrier labels from the fused kernel equal the torch Backtester's (and so the float64
reference env's: tests/backtest/test_fidelity.py), for fixed actions and a greedy network, in both
action modes; turnover's traded notional agrees too. Small shapes: the Triton interpreter on a CPU."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.policies import ActionPolicy, GreedyPolicy  # noqa: E402
from tests.kernels.test_backtest_fused import DEV, PARAMS, STARTS, small_market, varied_net  # noqa: E402

BARRIER_PARAMS = PARAMS.model_copy(update=dict(profit_bps=300, stop_bps=300, max_holding=4))


def _same_trades(a, b) -> None:
    keys = ("window", "entry_bar", "exit_bar", "side", "barrier")
    assert [{k: t[k] for k in keys} for t in a.trades] == [{k: t[k] for k in keys} for t in b.trades]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exposure"])  # routed orders; the greedy test below is factored
def test_fused_barrier_labels_equal_the_torch_paths_for_fixed_actions(mode):
    market = small_market(7)
    params = BARRIER_PARAMS.model_copy(update=dict(action_mode=mode))
    bt = Backtester(market, params, chunk=16, cuda_graphs=False)
    rng = np.random.default_rng(7)
    acts = np.stack([np.repeat(rng.integers(0, params.n_actions, 45), rng.integers(1, 9, 45))[:45] for _ in range(3)])
    policy = ActionPolicy(torch.as_tensor(acts, device=DEV))
    lengths = [29, 17, 23]  # odd, the first past a 16-bar chunk: the interpreted kernel steps every bar
    a = bt.run(STARTS, lengths, policy, keep_curves=True, keep_trades=True, barriers=True)
    b = bt.run(STARTS, lengths, policy, keep_curves=True, keep_trades=True, barriers=True, backend="fused")
    _same_trades(a, b)
    labels = {t["barrier"] for t in a.trades}
    assert len(a.trades) >= 5 and len(labels) >= 3, labels  # several kinds of label occur
    np.testing.assert_allclose(b.metrics_tensor.cpu().numpy(), a.metrics_tensor.cpu().numpy(), rtol=1e-4, atol=1e-9)


@pytest.mark.slow
def test_fused_barrier_labels_equal_the_torch_paths_for_a_greedy_network():
    market = small_market(8)
    net = varied_net(market.obs_dim, 45, seed=8)
    bt = Backtester(market, BARRIER_PARAMS, chunk=16, cuda_graphs=False)
    lengths = [29, 17, 23]
    a = bt.run(STARTS, lengths, GreedyPolicy(net), keep_trades=True, barriers=True)
    b = bt.run(STARTS, lengths, GreedyPolicy(net), keep_trades=True, barriers=True, backend="fused")
    _same_trades(a, b)
    assert len(a.trades) >= 3
    t = [r["turnover"] for r in a.metrics]
    np.testing.assert_allclose([r["turnover"] for r in b.metrics], t, rtol=1e-5)
