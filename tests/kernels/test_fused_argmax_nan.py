"""NaN rows in the fused dueling kernels: the greedy action is torch's (a NaN counts as the maximum,
so a NaN row gives its first NaN), never a padding column; the row max is NaN as ``torch.amax``'s.

Why: the GPU evaluates ``tl.argmax`` with its combine function, which keeps the right operand
unless ``left > right``, False for every comparison with a NaN, so a Q row holding a NaN ended on
one of the -inf padding columns: action n_actions, and the collector's ``q.gather`` failed with a
device-side "index out of bounds" (the H200 scorecard stop of configs/h200-fast.toml). The Triton
interpreter shortcuts ``tl.argmax`` / ``tl.max`` to ``np.nanargmax`` / ``np.nanmax`` and hid it.
``reduction_order = "combine"`` makes the interpreter fold every reduction with the kernel's own combine
function, as the GPU does (its order is a tree; a NaN loses every comparison either way): under it
the old kernel returned action 5 of 5 for a NaN row. On a GPU both orders are the GPU's.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.kernels.acting import kernel as dmf  # noqa: E402
from foxhunt.kernels.rules.dueling import dueling_argmax, row_max  # noqa: E402
from foxhunt.kernels.rules import packing as pk  # noqa: E402
from tests.agents.dqn_helpers import small_market, small_trainer  # noqa: E402
from tests.kernels.test_dueling_mlp_fused import DEV, acting_pack, varied_net  # noqa: E402

NAN = float("nan")


@pytest.fixture(params=["combine", "numpy"])  # not "gpu": conftest skips items with a gpu keyword
def reduction_order(request, monkeypatch):
    """"combine": reductions folded with their combine functions (the interpreter's slow path, the
    GPU's semantics); "numpy": the interpreter's numpy shortcuts (as the other kernel tests run)."""
    if dmf.is_interpreted() and request.param == "combine":
        from triton.runtime import interpreter

        if not hasattr(interpreter.ReduceOps, "generic_reduce"):
            pytest.skip("this Triton interpreter has no combine-function reduction")
        monkeypatch.setattr(interpreter.ReduceOps, "apply_impl", lambda self, inputs: self.generic_reduce(inputs))
    return request.param


@pytest.mark.parametrize("precision", ["ieee", "bf16"])
def test_a_nan_q_row_gets_torchs_greedy_action_and_a_nan_max(reduction_order, precision):
    net = varied_net(55, 5, (32, 32), 16, seed=1)
    obs = torch.randn(24, 55, device=DEV)
    obs[3, 7] = NAN  # one NaN feature: the whole Q row is NaN
    obs[5] = NAN
    obs[9, 54] = float("inf")  # an infinite input: inf − inf inside the net, NaN again
    out = dmf.fused_dueling_q(acting_pack(net, precision), obs, precision=precision, q=True, q_max=True, argmax=True)
    nan_rows = out.q.isnan().any(1)
    assert nan_rows[[3, 5, 9]].all() and int(nan_rows.sum()) == 3
    assert int(out.argmax.max()) < 5  # never a padding column
    assert torch.equal(out.argmax, out.q.argmax(dim=1))
    assert torch.equal(out.q_max.isnan(), nan_rows)
    assert torch.equal(out.q_max[~nan_rows], out.q.amax(dim=1)[~nan_rows])


@triton.jit
def _probe(out_p, arg_p, max_p, N_ACTIONS: tl.constexpr, A: tl.constexpr, R: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, A)
    out = tl.load(out_p + r[:, None] * A + c[None, :])
    tl.store(arg_p + r, dueling_argmax(out, N_ACTIONS, A))
    tl.store(max_p + r, row_max(out, N_ACTIONS, A))


def test_the_backtest_kernels_dueling_argmax_and_row_max_follow_torch_on_nan_inf_and_ties(reduction_order):
    """``rules.dueling.dueling_argmax`` (the fused backtest's greedy action) and ``row_max`` on packed
    head outputs [R, A]: advantages in columns [0, 5), the value in column 5, padding after."""
    n, a_cols = 5, 8
    g = torch.Generator().manual_seed(0)
    out = torch.randn(16, a_cols, generator=g)
    out[:, n + 1:] = 0.0  # padding columns are 0 in the packed net
    out[1, 2] = NAN
    out[2, 4] = NAN  # the last advantage: the old combine kept the padding column after it
    out[3, n] = NAN  # a NaN value: every Q of the row is NaN
    out[4, :n] = float("-inf")  # all -inf advantages: Q = NaN (-inf − -inf)
    out[5, :n] = 1.0  # a tie everywhere: the first action
    out[6, 1] = float("inf")
    out = out.to(DEV)
    arg = torch.empty(16, dtype=torch.int32, device=DEV)
    mx = torch.empty(16, dtype=torch.float32, device=DEV)
    _probe[(1,)](out, arg, mx, N_ACTIONS=n, A=a_cols, R=16)
    adv = out[:, :n]
    q = (out[:, n:n + 1] + adv) - adv.mean(dim=1, keepdim=True)
    assert torch.equal(arg.long(), q.argmax(dim=1)), (arg.tolist(), q.argmax(dim=1).tolist())
    ref = out[:, :n].amax(dim=1)
    assert torch.equal(mx.isnan(), ref.isnan()) and torch.equal(mx[~ref.isnan()], ref[~ref.isnan()])


def test_a_collection_round_with_nan_weights_keeps_every_action_in_range(reduction_order):
    """The collector with fused acting and a NaN weight (every Q row NaN): the round runs (before the
    fix the collector's q.gather raised "index 45 is out of bounds for dimension 1 with size 45"
    under the combine order: the CPU form of the GPU's device-side assert) and the
    stored actions are the torch path's (argmax of a NaN row: its first NaN, action 0)."""
    tr = small_trainer(small_market(device=DEV), acting="fused", eps_start=0.0, eps_end=0.0, hidden=(16, 16),
                       head_hidden=8, matmul_precision="fp32")
    with torch.no_grad():
        tr.learner.flat.data[0] = NAN
    tr.collector.round()
    c = tr.collector
    assert c._fused.q.isnan().all()
    assert int(c.r_action.min()) == 0 and int(c.r_action.max()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_gpu_default_net_nan_rows_get_in_range_greedy_actions(precision):
    """On the H200 (the real reduction order): configs/h200-fast.toml's net, 55 → 256 → 256 →
    {128, 128} → 5 exposure actions (the leak scenario's obs width), 4,096 rows, some NaN."""
    if dmf.is_interpreted():
        pytest.skip("compiled Triton only")
    torch.manual_seed(0)
    net = DuelingQNet(55, 5, (256, 256), 128).cuda()
    obs = torch.randn(4096, 55, device="cuda")
    obs[::97, 11] = NAN
    out = dmf.fused_dueling_q(acting_pack(net, precision), obs, precision=precision, q=True, q_max=True, argmax=True)
    nan_rows = out.q.isnan().any(1)
    assert int(nan_rows.sum()) == len(range(0, 4096, 97))
    assert int(out.argmax.max()) < 5 and torch.equal(out.argmax, out.q.argmax(dim=1))
    assert torch.equal(out.q_max.isnan(), nan_rows)
    test_the_backtest_kernels_dueling_argmax_and_row_max_follow_torch_on_nan_inf_and_ties("gpu-order")
