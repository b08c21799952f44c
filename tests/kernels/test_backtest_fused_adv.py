"""The advantage-only argmax (row and tile paths): the value-head bound it relies on, and its fallback to both
heads where float32 rounding of V + A − mean(A) decides the action.

Interpreted without CUDA (TRITON_INTERPRET=1, set by ``test_backtest_fused`` before Triton loads).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels.test_backtest_fused import (  # noqa: F401  (sets TRITON_INTERPRET first)
    DEV, PARAMS, STARTS, small_market, torch_run, varied_net,
)
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.fused import check_windows, launch  # noqa: E402
from foxhunt.kernels.rules.packing import pack_net  # noqa: E402
from foxhunt.kernels.backtest.host import value_bound  # noqa: E402

# The windows of test_backtest_fused at about half their lengths (odd, the first longer than a 16-bar chunk):
# the interpreted kernel steps every bar of every path compared below.
LENGTHS = [23, 11, 17]


def _leaky(x: torch.Tensor, slope: float) -> torch.Tensor:
    return torch.where(x > 0, x, x * slope)


@pytest.mark.parametrize("seed,hidden,head", [(0, (32, 32), 16), (1, (20, 24), 12), (2, (64, 48), 40)])
def test_value_bound_bounds_the_value_head_for_any_trunk_output(seed, hidden, head):
    """|V(h2)| ≤ b0 · (b1 · max|h2| + b2) + b3 for random trunk outputs of every scale (float64 V)."""
    net = varied_net(51 + 3, 45, seed=seed, hidden=hidden, head_hidden=head)
    packed = pack_net(net, "ieee")
    b = value_bound(packed).double().cpu()
    hp, n = packed.dims[3] // 2, packed.n_actions
    w3v = packed.w3[:, :hp].double().cpu()
    w4v = packed.w4[:hp, n].double().cpu()
    b3v, b4v = packed.b3[:hp].double().cpu(), packed.b4[n].double().cpu()
    gen = torch.Generator().manual_seed(seed)
    for scale in (1e-3, 1.0, 1e3):
        h2 = torch.randn(2_000, packed.w3.shape[0], generator=gen, dtype=torch.float64) * scale
        h2[:100] = scale * torch.sign(w3v[:, 0])  # rows aligned with a column: near the Hölder bound
        v = _leaky(h2 @ w3v + b3v, packed.slope) @ w4v + b4v
        bound = b[0] * (b[1] * h2.abs().max(dim=1).values + b[2]) + b[3]
        assert (v.abs() <= bound).all(), float((v.abs() / bound).max())
        assert float((v.abs() / bound).max()) > 1e-3, "a bound that loose would send every bar to the fallback"


def _rounding_tie_net(obs_dim: int):
    """A net whose advantages are constant (0, 1e-3, −1, …, −1) and whose value is 1e6: argmax A = 1,
    but float32 rounds 1e6 + 0 and 1e6 + 1e-3 to the same Q (ulp(1e6) = 0.0625), so the dueling
    argmax (first maximal index) is 0."""
    net = varied_net(obs_dim, 45, seed=5)
    with torch.no_grad():
        net.value[-1].weight.zero_()
        net.value[-1].bias.fill_(1e6)
        net.advantage[-1].weight.zero_()
        bias = torch.full((45,), -1.0)
        bias[0], bias[1] = 0.0, 1e-3
        net.advantage[-1].bias.copy_(bias)
    return net


def test_advantage_only_path_falls_back_to_both_heads_where_rounding_decides_the_argmax():
    market = small_market(4)
    net = _rounding_tie_net(market.obs_dim)
    q = net(torch.zeros(1, market.obs_dim, device=DEV))
    assert int(q.argmax()) == 0 and int(net.advantage(net.trunk(torch.zeros(1, market.obs_dim, device=DEV))).argmax()) == 1
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    ref = torch_run(bt, STARTS, LENGTHS, net)
    st, ln = check_windows(market, STARTS, LENGTHS)
    for path in (dict(block_w=1), dict(block_w=1, precompute=False), dict(block_w=1, adv_only=False),
                 dict(block_w=16), dict(block_w=16, adv_only=False)):
        out = launch(bt, st, ln, net, precision="ieee", store_debug=True, **path)
        acts = out.actions.cpu().numpy()
        for w in range(len(STARTS)):
            np.testing.assert_array_equal(acts[w, : ln[w]], ref["actions"][w, : ln[w]], err_msg=str(path))
        assert (ref["actions"][ref["stepped"]] == 0).all()


def test_advantage_only_path_takes_the_same_actions_as_both_heads_on_random_nets():
    market = small_market(6)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    st, ln = check_windows(market, STARTS, LENGTHS)
    for seed, block_w in ((6, 1), (7, 1), (6, 16)):
        net = varied_net(market.obs_dim, 45, seed=seed, hidden=(24, 40), head_hidden=20)
        a = launch(bt, st, ln, net, precision="ieee", store_debug=True, block_w=block_w, adv_only=True)
        b = launch(bt, st, ln, net, precision="ieee", store_debug=True, block_w=block_w, adv_only=False)
        np.testing.assert_array_equal(a.actions.cpu().numpy(), b.actions.cpu().numpy())
        np.testing.assert_array_equal(a.returns.cpu().numpy(), b.returns.cpu().numpy())
        assert len(np.unique(a.actions.cpu().numpy())) >= 5
