"""GraphedMetrics: a replayed CUDA graph equals eager compute_metrics on new inputs every call; on a CPU it
is compute_metrics itself; inputs that do not match how it was built are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.backtest.graphed_metrics import GraphedMetrics
from foxhunt.backtest.metrics import TradeRecords, compute_metrics
from tests.backtest.test_metrics import _garbage_pad, _random_case, _traded


def _inputs(rng: np.random.Generator, device: str, W: int, T: int, K: int):
    lengths, returns, positions, tw, tr, tv = _random_case(rng, W=W, T=T, K=K)
    args = [torch.from_numpy(x).to(device) for x in (_garbage_pad(returns, lengths, rng), lengths, positions, tw, tr, tv)]
    traded = torch.from_numpy(_traded(positions)).to(device)
    return args[0], args[1], args[2], TradeRecords(*args[3:]), traded


def test_cpu_graphed_metrics_are_compute_metrics_on_new_inputs_each_call(rng):
    W, T, K = 6, 500, 80
    gm = GraphedMetrics(W, T, "cpu", with_positions=True, trade_capacity=K, with_traded=True, bars_per_year=252.0)
    assert gm.graph is None
    for _ in range(2):
        returns, lengths, positions, trades, traded = _inputs(rng, "cpu", W, T, K)
        eager = compute_metrics(returns, lengths, positions=positions, trades=trades, traded=traded, bars_per_year=252.0)
        torch.testing.assert_close(gm(returns, lengths, positions, trades, traded), eager, rtol=0, atol=0, equal_nan=True)


def test_graphed_metrics_refuse_inputs_that_do_not_match_how_they_were_built(rng):
    gm = GraphedMetrics(10, 100, "cpu", with_positions=True, trade_capacity=10)
    returns, lengths, positions, trades, _ = _inputs(rng, "cpu", 10, 100, 10)
    with pytest.raises(ValueError, match="positions/trades/traded given must match"):
        gm(returns, lengths, None, trades)
    short = TradeRecords(trades.window[:5], trades.ret[:5], trades.valid[:5])
    with pytest.raises(ValueError, match="built for 10 trade records, got 5"):
        gm(returns, lengths, positions, short)


@pytest.mark.gpu
def test_cuda_graphed_metrics_equal_eager_on_new_inputs_each_replay(rng):
    W, T, K = 7, 2_000, 300
    gm = GraphedMetrics(W, T, "cuda", with_positions=True, trade_capacity=K, with_traded=True, bars_per_year=252.0)
    for _ in range(3):  # the graph reads new inputs on every call
        returns, lengths, positions, trades, traded = _inputs(rng, "cuda", W, T, K)
        eager = compute_metrics(returns, lengths, positions=positions, trades=trades, traded=traded, bars_per_year=252.0)
        graphed = gm(returns, lengths, positions, trades, traded).clone()
        torch.testing.assert_close(graphed, eager, rtol=1e-12, atol=1e-15, equal_nan=True)
