"""Several networks in one backtest (MemberGreedyPolicy: network m greedy on its own block of windows), as
the epoch selector scores a fold's members on one held-back window: every window trades exactly what
its network trades in a backtest of its own, in torch and in the fused kernel (window w reads its
member's block of the stacked weights); refusals name the rule. Small shapes: the Triton interpreter."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.fused import unsupported as fused_unsupported  # noqa: E402
from foxhunt.backtest.policies import GreedyPolicy, MemberGreedyPolicy  # noqa: E402
from foxhunt.train.selection import HeldBackScore  # noqa: E402
from tests.kernels.test_backtest_fused import PARAMS, small_market, varied_net  # noqa: E402

STARTS, LENGTHS = [100, 1070, 1500], [23, 11, 17]  # one member's windows (odd lengths)


def _members(market, k: int = 3):
    return [varied_net(market.obs_dim, 45, seed=s) for s in range(20, 20 + k)]


def _blocks(m: int, n: int) -> list[tuple[int, int]]:
    return [(i * n, (i + 1) * n) for i in range(m)]


@pytest.mark.parametrize("k", [1, 3])
def test_each_block_of_windows_trades_what_its_network_trades_alone_in_torch(k: int) -> None:
    market = small_market(3)
    nets = _members(market)
    bt = Backtester(market, PARAMS, chunk=8, cuda_graphs=False)
    together = bt.run(STARTS * 3, LENGTHS * 3, MemberGreedyPolicy(nets, _blocks(3, 3), k), keep_curves=True)
    for m, net in enumerate(nets):
        alone = bt.run(STARTS, LENGTHS, GreedyPolicy(net, k), keep_curves=True)
        np.testing.assert_array_equal(together.returns[3 * m: 3 * m + 3], alone.returns)
        np.testing.assert_array_equal(together.positions[3 * m: 3 * m + 3], alone.positions)
    assert not np.array_equal(together.positions[0:3], together.positions[3:6])  # the members differ


@pytest.mark.slow
def test_the_fused_kernel_gives_each_window_its_members_network_as_a_fused_run_of_that_network_alone() -> None:
    market = small_market(4)
    nets = _members(market)
    bt = Backtester(market, PARAMS, chunk=8, cuda_graphs=False)
    policy = MemberGreedyPolicy(nets, _blocks(3, 3), 2)
    assert fused_unsupported(bt, policy) is None
    fused = bt.run(STARTS * 3, LENGTHS * 3, policy, keep_curves=True, backend="fused")
    torch_run = bt.run(STARTS * 3, LENGTHS * 3, policy, keep_curves=True)
    np.testing.assert_allclose(fused.returns, torch_run.returns, rtol=1e-5, atol=1e-7)
    from foxhunt.backtest.fused import run_fused

    for m, net in enumerate(nets):  # without the layer-1 precompute, the same kernel arithmetic: bit for bit
        alone = run_fused(bt, STARTS, LENGTHS, GreedyPolicy(net, 2), keep_curves=True, precompute=False, block_w=1)
        np.testing.assert_array_equal(fused.returns[3 * m: 3 * m + 3], alone.returns)
        np.testing.assert_array_equal(fused.positions[3 * m: 3 * m + 3], alone.positions)


def test_member_scores_of_one_backtest_equal_each_members_own_held_back_score() -> None:
    market = small_market(5)
    nets = _members(market, 4)
    bt = Backtester(market, PARAMS, chunk=8, cuda_graphs=False)
    for score in ("sharpe", "timing"):
        held = HeldBackScore(bt, "torch", 252.0, score)
        together = held.score_members(400, 150, nets, 3)
        alone = [held(400, 150, GreedyPolicy(net, 3)) for net in nets]
        assert together == alone


def test_member_policies_refuse_what_they_cannot_run_in_one_line() -> None:
    market = small_market(0)
    nets = _members(market, 2)
    with pytest.raises(ValueError, match=r"blocks \[\(0, 2\), \(3, 4\)\] must be contiguous, non-empty and in order"):
        MemberGreedyPolicy(nets, [(0, 2), (3, 4)])
    with pytest.raises(ValueError, match="one block of windows per network"):
        MemberGreedyPolicy(nets, [(0, 2)])
    bt = Backtester(market, PARAMS, chunk=8, cuda_graphs=False)
    mixed = [nets[0], varied_net(market.obs_dim, 45, seed=7, hidden=(16, 16))]
    assert fused_unsupported(bt, MemberGreedyPolicy(mixed, _blocks(2, 1))) == \
        "the member networks differ in shape (the kernel strides one stacked layout)"
    with pytest.raises(ValueError, match="its blocks cover 4 windows, the run has 3"):
        bt.run(STARTS, [5, 3, 7], MemberGreedyPolicy(nets, _blocks(2, 2)), backend="fused")
