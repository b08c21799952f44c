"""The fused acting kernel with every tensor inside a guard band: nothing outside is read or written.

Why: the H200 faults (docs/DESIGN.md "Fused acting" and BENCHMARKS.md "Kernels under compute-sanitizer") could come from an out-of-bounds store of
the online variant (Q + argmax) or an over-read past obs or the packed weights (W2, b2, W3 border
the pipeline's prefetches). ``test_fused_acting_bounds.py`` checks addresses against the storages;
this checks VALUES: each input and output is a view into a larger buffer whose other elements are
sentinels (NaN for float inputs, so a stray read poisons the result; a bit pattern for outputs),
and the results must equal an unguarded launch bit for bit with every sentinel intact. Obs 54 / 55
(row stride 216 / 220 bytes: only 8 / 4-byte aligned rows), 256 / 256 / 128, 5 actions, both launch
variants the collector uses, a partial last tile (N = 40 of 64 rows), Triton interpreter.
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

pytestmark = pytest.mark.skipif(not dmf.is_interpreted(), reason="CPU check under the Triton interpreter")

PACKED = ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")
BAND = 4096  # elements of guard before and after each tensor (more than W3's 32 KB of prefetch past its end)
N = 40


def _guarded(t: torch.Tensor, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): ``t`` copied into the middle of a ``fill``-ed buffer BAND elements wider on each side."""
    buf = torch.full((t.numel() + 2 * BAND,), fill, dtype=t.dtype)
    view = buf[BAND:BAND + t.numel()].view(t.shape)
    view.copy_(t)
    return buf, view


def _outputs(n: int, n_actions: int, guard: bool):
    shapes = {"q": ((n, n_actions), torch.float32), "q_max": ((n,), torch.float32), "argmax": ((n,), torch.int64)}
    bufs, views = {}, {}
    for name, (shape, dtype) in shapes.items():
        t = torch.zeros(shape, dtype=dtype)
        if guard:
            bufs[name], views[name] = _guarded(t, -12345)  # a float / int bit pattern no kernel writes
        else:
            views[name] = t
    return bufs, views


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
@pytest.mark.parametrize("obs_dim", [54, 55])
def test_guard_bands_around_every_acting_tensor_stay_untouched_and_change_no_result(obs_dim, precision):
    torch.manual_seed(obs_dim)
    net = DuelingQNet(obs_dim, 5, [256, 256], 128)
    pk = pack_net(net, precision)
    obs = torch.randn(N, obs_dim)
    plain_bufs, plain = _outputs(N, 5, guard=False)
    dmf.fused_dueling_q(pk, obs, precision=precision, q=plain["q"], argmax=plain["argmax"])
    dmf.fused_dueling_q(pk, obs, precision=precision, q=False, q_max=plain["q_max"])

    guard_bufs = {}
    for name in PACKED:  # NaN around each packed tensor: a read past its ends would poison Q
        guard_bufs[name], view = _guarded(getattr(pk, name), float("nan"))
        setattr(pk, name, view)
    guard_bufs["obs"], obs_g = _guarded(obs, float("nan"))
    out_bufs, outs = _outputs(N, 5, guard=True)
    before = {k: b.clone() for k, b in {**guard_bufs, **out_bufs}.items()}
    dmf.fused_dueling_q(pk, obs_g, precision=precision, q=outs["q"], argmax=outs["argmax"])
    dmf.fused_dueling_q(pk, obs_g, precision=precision, q=False, q_max=outs["q_max"])

    for name in ("q", "q_max", "argmax"):
        assert torch.equal(outs[name], plain[name]), name  # NaN neighbours leaked into no result
    for name, buf in {**guard_bufs, **out_bufs}.items():  # compared as bytes: NaN-safe, bit for bit
        b, a = buf.view(torch.uint8), before[name].view(torch.uint8)
        w = BAND * buf.element_size()
        if name in out_bufs:
            assert torch.equal(b[:w], a[:w]) and torch.equal(b[-w:], a[-w:]), f"{name}: a guard band was written"
        else:
            assert torch.equal(b, a), f"{name}: an input (or its guard band) was written"
