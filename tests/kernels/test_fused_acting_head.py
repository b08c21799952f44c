"""The case that exposed the fused acting kernel's fault (issue 27): the collector's two launches
(online: Q + greedy action; target: row max only) on 5-action nets at the learning configurations'
widths, bf16 and tf32, with the head block packed as the collector packs it (``MIN_HEAD``).

On the H200 (Triton 3.6) the 5-action nets packed to a 16-wide head (A = 16) gave wrong bf16 Q and
then an illegal memory access; 45-action nets (A = 64) were right. The collector packs every net to
A >= ``MIN_HEAD``. Here the kernel's outputs (poisoned with NaN before each launch: every element
must be written) are compared with torch on fresh random inputs, in the Triton interpreter (CI, small
N; A = 16 as well, whose arithmetic is right there) and compiled on a GPU (N = 4,096, the collector's
row count, production packing only: an illegal access would end the test process).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.kernels.acting import kernel as dmf  # noqa: E402
from foxhunt.kernels.rules.packing import pack_net  # noqa: E402
from tests.kernels.test_dueling_mlp_fused import bf16_q  # noqa: E402

DEV = torch.device("cpu" if dmf.is_interpreted() else "cuda")
N = 256 if dmf.is_interpreted() else 4096
SHAPES = [  # obs_dim, n_actions, trunk, head hidden: h200-fast's net (54 or 55 features + portfolio), the older width
    (54, 5, (64, 64), 32),
    (55, 5, (256, 256), 128),
    (54, 45, (64, 64), 32),
]
HEADS = [dmf.MIN_HEAD, 16] if dmf.is_interpreted() else [dmf.MIN_HEAD]


def _launch_pair(pk, obs, precision):
    n = obs.shape[0]
    q = torch.full((n, pk.n_actions), float("nan"), device=obs.device)
    greedy = torch.full((n,), -1, dtype=torch.int64, device=obs.device)
    qmax = torch.full((n,), float("nan"), device=obs.device)
    dmf.fused_dueling_q(pk, obs, precision=precision, q=q, argmax=greedy)  # the online pass, then the target pass
    dmf.fused_dueling_q(pk, obs, precision=precision, q=False, q_max=qmax)
    if obs.is_cuda:
        torch.cuda.synchronize()
    return q, greedy, qmax


@pytest.mark.parametrize("min_head", HEADS)
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"obs{s[0]}_a{s[1]}_h{s[2][0]}")
def test_the_collectors_two_launches_write_every_output_and_agree_with_torch(shape, precision, min_head):
    obs_dim, n_actions, trunk, head = shape
    torch.manual_seed(obs_dim + n_actions)
    net = DuelingQNet(obs_dim, n_actions, list(trunk), head).to(DEV)
    with torch.no_grad():
        for p in net.parameters():  # weights large enough that actions differ clearly
            p.mul_(2.0 if p.dim() == 2 else 0.1)
    pk = pack_net(net, "bf16" if precision == "bf16" else "tf32", min_head)
    assert pk.w4.shape[1] >= min_head
    for trial in range(2):  # fresh inputs each time, scaled differently
        obs = torch.randn(N, obs_dim, device=DEV) * (1 + 3 * trial)
        q, greedy, qmax = _launch_pair(pk, obs, precision)
        assert not q.isnan().any() and not qmax.isnan().any() and bool(((greedy >= 0) & (greedy < n_actions)).all())
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.no_grad():
                ref = bf16_q(net, obs) if precision == "bf16" else net(obs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        scale = float(ref.abs().max())
        # bf16: a sum in another order may round a hidden unit to the neighbouring bf16 value
        # compiled: bf16 against its emulation (summation order, rounding-boundary flips); tf32 against float32
        # (10-bit mantissa inputs through four layers: ~3e-3 measured on the H200)
        tol = (2e-3 if precision == "bf16" else 1e-5) if dmf.is_interpreted() else (5e-3 if precision == "bf16" else 1e-2)
        err = float((q - ref).abs().max())
        assert err <= tol * scale, f"max |dQ| {err:.3g} of max |Q| {scale:.3g}"
        assert torch.equal(greedy, q.argmax(dim=1)) and torch.equal(qmax, q.amax(dim=1))
        agree = float((greedy == ref.argmax(dim=1)).float().mean())
        assert agree >= 0.99, f"greedy action agrees with torch on {agree:.1%} of rows"


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_one_launch_over_a_stack_of_members_packs_equals_each_members_own_launch_bit_for_bit(precision):
    """rows_per_member: M members' packs stacked [M, ...] and their M blocks of rows in one launch (a stack's
    batched collection); every tile reads its own member's weights, so each block's Q, greedy action and row max
    are bit for bit that member's own launch on its rows (the same tile)."""
    from foxhunt.agents.dqn.stacked_collection import stacked_packs
    from foxhunt.kernels.rules.packing import WEIGHT_FIELDS, DuelingWeights

    obs_dim, n_actions, trunk, head = SHAPES[0]
    m, n = 3, N // 2
    packs = []
    for k in range(m):
        torch.manual_seed(100 + k)
        net = DuelingQNet(obs_dim, n_actions, list(trunk), head).to(DEV)
        packs.append(pack_net(net, "bf16" if precision == "bf16" else "tf32", dmf.MIN_HEAD))
    obs = torch.randn(m * n, obs_dim, device=DEV)
    own = [_launch_pair(pk, obs[k * n:(k + 1) * n], precision) for k, pk in enumerate(packs)]

    class _Acting:  # what stacked_packs reads of each member's FusedActing (its target pack: a copy)
        def __init__(self, pk):
            self.online, self.precision, self.k = pk, precision, dmf
            self.target = DuelingWeights(*(getattr(pk, f).clone() for f in WEIGHT_FIELDS), obs_dim=pk.obs_dim,
                                         n_actions=pk.n_actions, slope=pk.slope)

    online, _ = stacked_packs([_Acting(pk) for pk in packs], n)
    assert online.members == m and all(pk.w1.data_ptr() == online.w1[k].data_ptr() for k, pk in enumerate(packs))
    q, greedy, qmax = _launch_pair_members(online, obs, precision, n)
    for k, (q_k, g_k, mx_k) in enumerate(own):
        rows = slice(k * n, (k + 1) * n)
        assert torch.equal(q[rows], q_k) and torch.equal(greedy[rows], g_k) and torch.equal(qmax[rows], mx_k)
    assert not torch.equal(q[:n], q[n:2 * n])  # the members' weights differ, and so do their Q
    with pytest.raises(ValueError, match="3 members x 7 rows"):
        dmf.fused_dueling_q(online, obs, precision=precision, rows_per_member=7)
    single = DuelingWeights(*(getattr(online, f) for f in WEIGHT_FIELDS), obs_dim=obs_dim, n_actions=n_actions,
                            slope=online.slope)
    with pytest.raises(ValueError, match="a stack of 3 packs needs rows_per_member"):
        dmf.fused_dueling_q(single, obs, precision=precision)


def _launch_pair_members(pk, obs, precision, n):
    rows = obs.shape[0]
    q = torch.full((rows, pk.n_actions), float("nan"), device=obs.device)
    greedy = torch.full((rows,), -1, dtype=torch.int64, device=obs.device)
    qmax = torch.full((rows,), float("nan"), device=obs.device)
    dmf.fused_dueling_q(pk, obs, precision=precision, q=q, argmax=greedy, rows_per_member=n)
    dmf.fused_dueling_q(pk, obs, precision=precision, q=False, q_max=qmax, rows_per_member=n)
    if obs.is_cuda:
        torch.cuda.synchronize()
    return q, greedy, qmax
