"""K models' votes inside the fused kernel equal the torch EnsemblePolicy's (row path), with each
member's own normalisation; mean-Q ensembles fall back. Small shapes: the Triton interpreter."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.fused import unsupported as fused_unsupported  # noqa: E402
from foxhunt.backtest.policies import EnsemblePolicy  # noqa: E402
from foxhunt.kernels.backtest.kernel import is_interpreted  # noqa: E402
from foxhunt.market import NormStats  # noqa: E402
from tests.kernels.test_backtest_fused import DEV, PARAMS, STARTS, small_market, varied_net  # noqa: E402


@pytest.mark.slow
def test_fused_ensemble_votes_equal_the_torch_ensemble_with_member_norms():
    if not is_interpreted():
        pytest.skip("bar-level equality at the default precision is the GPU CLI test's (near-ties)")
    market = small_market(9)
    nets = [varied_net(market.obs_dim, 45, seed=s) for s in (9, 10, 11)]
    f = market.n_features
    g = torch.Generator().manual_seed(9)
    member_norms = [(torch.randn(f, generator=g, dtype=torch.float64).to(DEV) * 0.1,
                     (torch.rand(f, generator=g, dtype=torch.float64) + 0.5).to(DEV)) for _ in nets]
    ens = EnsemblePolicy(nets, weights=[0.3, 0.35, 0.35], norms=member_norms)
    ident = NormStats(torch.zeros(f, dtype=torch.float64, device=DEV), torch.ones(f, dtype=torch.float64, device=DEV))
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    lengths = [24, 13, 17]
    a = bt.run(STARTS, lengths, ens, norms=[ident] * 3, keep_curves=True, keep_trades=True)
    b = bt.run(STARTS, lengths, ens, norms=[ident] * 3, keep_curves=True, keep_trades=True, backend="fused")
    np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.positions, a.positions, rtol=1e-5, atol=1e-7)
    assert [(t["entry_bar"], t["exit_bar"], t["side"]) for t in b.trades] == \
           [(t["entry_bar"], t["exit_bar"], t["side"]) for t in a.trades]
    assert len(a.trades) >= 3
    # the vote is not one member's policy (members 1 and 2 outweigh member 0; their exact ties go to the
    # lower action index, on both paths)
    solo = bt.run(STARTS, lengths, EnsemblePolicy(nets[:1], norms=member_norms[:1]), norms=[ident] * 3, keep_curves=True)
    assert not np.array_equal(solo.positions, a.positions)


def test_mean_q_ensembles_and_unsupported_members_are_not_fused():
    market = small_market(0)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    nets = [varied_net(market.obs_dim, 45, seed=s) for s in (1, 2)]
    assert "mode is 'mean'" in fused_unsupported(bt, EnsemblePolicy(nets, mode="mean"))
    with pytest.raises(ValueError, match="mode is 'mean'"):
        bt.run(STARTS, [5, 3, 7], EnsemblePolicy(nets, mode="mean"), backend="fused")
    assert bt.run(STARTS, [5, 3, 7], EnsemblePolicy(nets, mode="mean")).metrics[2]["bars"] == 7
    deep = [varied_net(market.obs_dim, 45, seed=s, hidden=(16, 16, 16)) for s in (3, 4)]
    assert "ensemble member: the fused kernels need two trunk layers" in fused_unsupported(bt, EnsemblePolicy(deep))
    assert fused_unsupported(bt, EnsemblePolicy(nets)) is None
