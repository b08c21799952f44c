"""The dueling Q-network forward for a batch of observations as ONE Triton kernel (the acting pass).

``fused_dueling_q(net, obs, precision=…)`` computes Q(obs) = V + A − mean(A) of a network packed by
``rules.packing.pack_dueling`` (four dense layers, transposed zero-padded weights [K, N]; see
``rules/dueling.py``), and optionally each row's max and first argmax, so that an ε-greedy step needs
no separate argmax / amax kernels. Shapes and units:

  obs      [N, obs_dim] float32, row stride free, columns contiguous (read with a column mask: the
           padding obs_dim → D, e.g. 54 → 64, is never materialised);
  q        [N, n_actions] float32 (Q-values, the reward's units);
  q_max    [N] float32, max_a Q;   argmax  [N] int64, the first maximal index (torch.argmax's rule:
           a NaN counts as the maximum, so a NaN row gives its first NaN, never a padding column).

Each program owns BLOCK_M rows and keeps every activation on chip:
  h1  = leaky(x @ W1 + b1)                                   [BLOCK_M, H1]
  for each BN-wide column chunk c of layer 2 (a pipelined ``tl.range``):
      h2c  = leaky(h1 @ W2[:, c] + b2[c])                   [BLOCK_M, BN]
      acc3 += h2c @ W3[c, :]                                 [BLOCK_M, H3]   (layers 2 and 3 fused)
  h3  = leaky(acc3 + b3);  out = h3 @ W4 + b4                [BLOCK_M, A]
  Q   = (V + out) − mean(out[:, :n_actions])                 (``dueling_argmax``'s formula, div_rn)
so HBM sees only obs in and Q (and / or max, argmax) out.

Precision ("bf16" / "tf32" / "ieee"): bf16 weights and bf16 layer inputs (obs included) with float32
accumulation on the bf16 tensor cores; or float32 weights with ``tl.dot(input_precision="tf32")``
(tensor cores, 10-bit mantissa inputs) / "ieee" (exact float32 FMA, the reference; slow). Bias,
LeakyReLU and the dueling head are float32 in every mode. The Triton interpreter cannot multiply
bf16, so there "bf16" runs float32 dots on bf16-rounded operands (the interpreter truncates where
the GPU rounds to nearest: the tests' emulation follows it), and "tf32" computes float32.

Performance model (H200: 132 SMs, ~1.98 GHz, ~990 dense bf16 / ~495 tf32 TFLOP/s; default net
54 → 256 → 256 → {128, 128} → 45, padded D = 64, A = 64; leads for bench/bench_dqn.py to check)
---------------------------------------------------------------------------------------------
  * FLOPs: 2 · (64·256 + 256·256 + 256·256 + 256·64) = 328 K per row; 21.5 GFLOP per forward at
    N = 65,536: ~22 µs (bf16) / ~43 µs (tf32) at peak, ~2× that at the ~50 % Triton reaches with
    K-tiles this small. ieee runs on the CUDA cores (~67 TFLOP/s FMA): ~0.3 ms, a reference only.
  * HBM bytes: obs 216 B/row in; Q 180 B + max 4 B + argmax 8 B out (online), max only (target):
    ~26 MB online / ~14 MB target at 64 K rows, 3-6 µs at ~4.5 TB/s. The unfused torch pass
    moves ~8 × 64 MB of [N, 256] float32 activations (a write and a read per Linear / LeakyReLU).
  * Weights are re-read from L2 by every tile (the 0.33 MB bf16 / 0.66 MB float32 net never leaves
    the 50 MB L2, but does not fit one SM's 227 KB of shared memory, so it cannot stay resident):
    0.33 MB × N / BLOCK_M = 168 MB per forward at BLOCK_M = 128 (bf16), ~30 µs at an aggregate
    ~5.5 TB/s of L2, overlapped with the MMAs by the pipelined chunk loop; per SM, 0.33 MB at
    ~125 GB/s (64 B/clk) is 2.6 µs beside 5.6 µs of MMA per 128-row tile, so a tile is MMA-bound.
    BLOCK_M = 64 doubles the L2 traffic (336 MB): the reason for 128 rows where registers allow.
  * Registers: the layer-3 accumulator [BLOCK_M, H3] float32 takes BLOCK_M·H3 / (32·num_warps)
    per thread (128 rows × 256 over 8 warps: 128), and h1, the A operand of every layer-2 chunk,
    stays in registers in wgmma's operand layout: 64 more in bf16, 128 in float32. So bf16 fits
    BLOCK_M 128 / 8 warps; tf32 cannot fit both (any BLOCK_M / num_warps) and spills part of h1.
    64 K rows / 128 = 512 tiles = 3.9 waves of 132 SMs at one CTA per SM.
  Cross-compiled for sm_90 with Triton 3.9 on a CPU (the device runs 3.6; resource use may differ):
    bf16 128 rows / 8 warps / BN 32 / 3 stages: wgmma, cp.async weight tiles, 250 registers, no
    spills, 96 KB of shared memory (BN 64 / 2 stages: 32 B of spills outside the loop; BN 128 needs
    256 KB of shared memory, over the 227 KB limit). tf32 128 / 8 / 32 / 2: ~300 B of spills, h1
    fragments reloaded inside the chunk loop (~45 local loads per chunk; 64 rows / 4 warps is no
    better); tf32 wgmma also wants its B operand K-major, so the N-major weight tiles are copied
    into shared memory 4 bytes at a time. ieee (FMA dots) spills kilobytes: a reference only.
    One detail matters: row offsets are int32 from a scalar per-tile base, because int64 per-row
    pointers shared between the obs load and the Q store (CSE) stayed live across the whole
    kernel and spilled (~300 B at 128 rows).
  Expected: ~30-50 µs (bf16) / ~100-150 µs (tf32) per 64 K-row forward vs ~165 µs unfused; the
  bench runs variants of BLOCK_M / num_warps / BN / stages (``DEFAULTS`` holds the defaults).

``rules.packing.pack_dueling_into(trunk, value, advantage, out)`` refreshes preallocated packed weights in place
(copies only: no allocation, CUDA-graph safe), for networks that change between collection rounds.
This module is part of the ``foxhunt.kernels`` leaf: it imports nothing of ours outside it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted

from foxhunt.kernels.rules.dueling import leaky, member_weights, row_argmax, row_max
from foxhunt.kernels.rules.packing import DuelingWeights

PRECISIONS = ("bf16", "tf32", "ieee")
MIN_HEAD = 64
"""The smallest output block A the collector packs for this kernel (``pack_net(..., min_head=MIN_HEAD)``):
the 5-action nets pack to A = 16 by default (a 16-wide last ``tl.dot``), which on the H200 (Triton
3.6) gave wrong bf16 Q and an illegal memory access; 45-action nets (A = 64) were right (docs/DESIGN.md,
"Fused acting")."""
MIN_WIDTH = 64
"""The smallest padded input and hidden block (D, H1, H2, H3) of a net on the compiled tensor-core
paths (``pack_net(..., min_width=MIN_WIDTH)``). On the H200 (Triton 3.6) a 32-wide layer-2 block gave
wrong bf16 Q at the default launch (its chunk loop then runs once and is not pipelined), and any
64-wide one did with a 1-stage loop; every net padded to 64 was right at the default launch
(bench/results/acting_shapes_cuda.json, scripts/acting_shape_sweep.py; docs/DESIGN.md, "Fused acting")."""
MIN_COMPILED_STAGES = 2
"""Fewest software-pipeline stages of the layer-2 chunk loop on the compiled paths: 1 stage gave
wrong bf16 Q for the shipped [64, 64] net on the H200 (the same sweep)."""
DEFAULTS: dict[str, dict[str, int]] = {
    "bf16": dict(block_m=128, num_warps=8, bn=32, stages=3),
    "tf32": dict(block_m=128, num_warps=8, bn=32, stages=2),
    "ieee": dict(block_m=16, num_warps=4, bn=32, stages=1),
}
"""Launch parameters per precision for the default 256-wide net (see the module docstring; wider
nets get proportionally fewer rows per program); bench/bench_dqn.py overrides them per variant.
bn: layer-2 column chunk; stages: software-pipelining depth of the chunk loop (weight tiles in
flight). Read at every launch, so a change applies to the next capture."""

class FusedQ(NamedTuple):
    """Kernel outputs (None where not requested): q [N, n_actions] f32, q_max [N] f32, argmax [N] i64."""

    q: torch.Tensor | None
    q_max: torch.Tensor | None
    argmax: torch.Tensor | None


@triton.jit
def _as_input(x, F32_DOT: tl.constexpr, ROUND: tl.constexpr):
    """A layer input in the dot's operand type: bf16 (tensor cores), or float32 — bf16-rounded
    first when ROUND (the interpreter's stand-in for the bf16 path)."""
    if F32_DOT:
        if ROUND:
            x = x.to(tl.bfloat16).to(tl.float32)
        return x.to(tl.float32)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def _mm(a, b, acc, PREC: tl.constexpr, F32_DOT: tl.constexpr):
    """acc + a @ b, float32 accumulation (a already in the operand type, see ``_as_input``)."""
    if F32_DOT:
        return tl.dot(a, b.to(tl.float32), acc, input_precision=PREC)
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _dueling_q_kernel(
    obs_ptr, obs_stride, n_rows, obs_dim,
    w1, b1, w2, b2, w3, b3, w4, b4, slope,
    q_ptr, max_ptr, arg_ptr,
    N_ACTIONS: tl.constexpr, D: tl.constexpr, H1: tl.constexpr, H2: tl.constexpr, H3: tl.constexpr,
    A: tl.constexpr, BLOCK_M: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr,
    PREC: tl.constexpr, F32_DOT: tl.constexpr, ROUND: tl.constexpr,
    STORE_Q: tl.constexpr, STORE_MAX: tl.constexpr, STORE_ARG: tl.constexpr,
    rows_per_member=1, MEMBERS: tl.constexpr = False,
):
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    if MEMBERS:  # a stack of members' packs [M, ...]: this tile's rows are member row0 // rows_per_member's
        w1, b1, w2, b2, w3, b3, w4, b4 = member_weights(w1, b1, w2, b2, w3, b3, w4, b4, row0 // rows_per_member,
                                                        D, H1, H2, H3, A)
    r = tl.arange(0, BLOCK_M)  # rows of the tile, relative to row0 (int32 offsets from scalar bases)
    rmask = r < (n_rows - row0).to(tl.int32)
    d = tl.arange(0, D)
    n1 = tl.arange(0, H1)
    nb = tl.arange(0, BN)
    n3 = tl.arange(0, H3)
    na = tl.arange(0, A)
    # Layer 1. Rows past N and columns past obs_dim read 0 (W1's padded rows are 0 too).
    x = tl.load(obs_ptr + row0 * obs_stride + r[:, None] * obs_stride + d[None, :],
                mask=rmask[:, None] & (d[None, :] < obs_dim), other=0.0)
    wt1 = tl.load(w1 + d[:, None] * H1 + n1[None, :])
    h1 = _mm(_as_input(x, F32_DOT, ROUND), wt1, tl.zeros([BLOCK_M, H1], dtype=tl.float32), PREC, F32_DOT)
    h1 = _as_input(leaky(h1 + tl.load(b1 + n1)[None, :], slope), F32_DOT, ROUND)  # cast once, used per chunk
    # Layers 2 and 3, fused over BN-wide chunks of layer 2: h2 never exists as a whole, and the
    # weight tiles of chunk c + 1 stream from L2 while chunk c multiplies (num_stages).
    acc3 = tl.zeros([BLOCK_M, H3], dtype=tl.float32)
    for c in tl.range(0, H2, BN, num_stages=STAGES):
        wt2 = tl.load(w2 + n1[:, None] * H2 + (c + nb)[None, :])  # [H1, BN]
        h2c = _mm(h1, wt2, tl.zeros([BLOCK_M, BN], dtype=tl.float32), PREC, F32_DOT)
        h2c = leaky(h2c + tl.load(b2 + c + nb)[None, :], slope)
        wt3 = tl.load(w3 + (c + nb)[:, None] * H3 + n3[None, :])  # [BN, H3]
        acc3 = _mm(_as_input(h2c, F32_DOT, ROUND), wt3, acc3, PREC, F32_DOT)
    h3 = _as_input(leaky(acc3 + tl.load(b3 + n3)[None, :], slope), F32_DOT, ROUND)
    wt4 = tl.load(w4 + n3[:, None] * A + na[None, :])
    out = _mm(h3, wt4, tl.zeros([BLOCK_M, A], dtype=tl.float32), PREC, F32_DOT) + tl.load(b4 + na)[None, :]
    # Dueling head (as rules.dueling.dueling_argmax): advantages in [0, N_ACTIONS), V in N_ACTIONS.
    col = na[None, :]
    is_adv = col < N_ACTIONS
    value = tl.sum(tl.where(col == N_ACTIONS, out, 0.0), axis=1)
    adv_sum = tl.sum(tl.where(is_adv, out, 0.0), axis=1)
    adv_mean = tl.div_rn(adv_sum, tl.full(adv_sum.shape, N_ACTIONS, tl.float32))
    q = (value[:, None] + out) - adv_mean[:, None]
    if STORE_Q:
        tl.store(q_ptr + row0 * N_ACTIONS + r[:, None] * N_ACTIONS + col, q, mask=rmask[:, None] & is_adv)
    # torch's max / argmax semantics, NaN included: the greedy action is always in [0, N_ACTIONS).
    if STORE_MAX:
        tl.store(max_ptr + row0 + r, row_max(q, N_ACTIONS, A), mask=rmask)
    if STORE_ARG:
        tl.store(arg_ptr + row0 + r, row_argmax(q, N_ACTIONS, A).to(tl.int64), mask=rmask)


def _out(arg: torch.Tensor | bool, shape: tuple[int, ...], dtype: torch.dtype, dev: torch.device,
         name: str) -> torch.Tensor | None:
    if arg is False:
        return None
    if arg is True:
        return torch.empty(shape, dtype=dtype, device=dev)
    if tuple(arg.shape) != shape or arg.dtype != dtype or not arg.is_contiguous() or arg.device != dev:
        raise ValueError(f"fused_dueling_q: {name} must be a contiguous {list(shape)} {dtype} tensor on {dev}")
    return arg


MIN_COMPILED_BLOCK_M = 128
"""Fewest rows a program may own on a GPU's tensor-core paths (bf16, tf32): the only tiles the H200 has
shown right for every tested net. At 64 rows the kernel's own test of a 45-action net (hidden 48 / 32,
heads of 16) gave wrong bf16 Q on the H200 (Triton 3.6; 97.8 % of the values off, by up to 24) at 4
warps, and an illegal memory access at 8 (bench/results/sanitizer_cuda.json, BENCHMARKS.md); 128 rows
at 8 warps (two warpgroups, 64 rows each) is the launch of every shipped network. ``fused_dueling_q``
refuses fewer rows there rather than compute them; the interpreter and "ieee" take any block."""
MAX_COMPILED_WIDTH = 256 * DEFAULTS["bf16"]["block_m"] // MIN_COMPILED_BLOCK_M
"""Widest trunk layer / pair of heads (2 · head_hidden) whose default tile keeps MIN_COMPILED_BLOCK_M
rows (wider nets get fewer rows: see ``fused_dueling_q``); the backend resolver keeps wider nets'
acting in torch (``foxhunt.accel.backend``)."""


def default_block_m(rows: int, dims: tuple[int, ...], precision: str) -> int:
    """Rows per program of a launch on ``rows`` rows of a pack of ``dims`` (D, H1, H2, H3, A) by default: the
    interpreter's cost is per program and per operation, not per row (few big programs); on the GPU registers
    hold [BLOCK_M, width] tiles, so wider nets get fewer rows."""
    _, h1, _, h3, _ = dims
    if is_interpreted():
        return max(16, min(256, triton.next_power_of_2(max(rows, 1))))
    return max(16, DEFAULTS[precision]["block_m"] * 256 // max(256, h1, h3))


def launch_warps(block_m: int, precision: str, num_warps: int | None = None, interpreted: bool = False) -> int:
    """The warps a program of ``block_m`` rows launches with: ``num_warps`` (default ``DEFAULTS``),
    capped on a GPU's tensor-core paths so that every warpgroup (4 warps) owns >= 64 rows.

    Why: a Hopper wgmma is issued per warpgroup over 64 rows. At BLOCK_M 64 with 8 warps (the default
    for nets wider than 256, and any explicit block_m = 64) two warpgroups share 64 rows; Triton 3.6
    compiled that launch of a 45-action net into an illegal memory access on the H200, and the PTX
    check of tests/kernels/test_fused_acting_compiled.py finds a wgmma operand descriptor outside every
    tensor there (none at 4 warps). docs/DESIGN.md, "Fused acting"."""
    warps = num_warps or DEFAULTS[precision]["num_warps"]
    if interpreted or precision == "ieee":
        return warps
    return min(warps, max(4, 4 * (block_m // 64)))


def fused_dueling_q(
    net: DuelingWeights, obs: torch.Tensor, *, precision: str = "bf16",
    q: torch.Tensor | bool = True, q_max: torch.Tensor | bool = False, argmax: torch.Tensor | bool = False,
    block_m: int | None = None, num_warps: int | None = None, bn: int | None = None, stages: int | None = None,
    rows_per_member: int | None = None,
) -> FusedQ:
    """Q of ``net`` (``pack_dueling`` output: bf16 weights for "bf16", float32 for "tf32" / "ieee")
    on obs [N, obs_dim] float32. q / q_max / argmax: a preallocated output (written in place, no
    allocation: CUDA-graph safe), True (allocated here) or False (not computed). Launch parameters
    default to ``DEFAULTS[precision]``; block_m: rows per program, a power of two >= 16.

    rows_per_member: ``net`` is a stack of M members' packs (every tensor [M, ...]) and obs holds M blocks of
    that many rows, block m for member m: one launch for all of them, each tile with its own member's weights.
    The default tile is the one a launch on one member's rows takes (so each row's Q is bit for bit that
    launch's), and it must divide the block."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {PRECISIONS}")
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    if net.w1.dtype != want:
        raise ValueError(f"precision {precision!r} needs {want} weights, got {net.w1.dtype}")
    if obs.dim() != 2 or obs.shape[1] != net.obs_dim or obs.dtype != torch.float32 or obs.stride(1) != 1:
        raise ValueError(f"fused_dueling_q: obs must be [N, {net.obs_dim}] float32 with contiguous columns, "
                         f"got {list(obs.shape)} {obs.dtype} strides {obs.stride()}")
    dev, n = obs.device, int(obs.shape[0])
    m_count = net.members
    if rows_per_member is not None and (m_count * rows_per_member != n or rows_per_member < 1):
        raise ValueError(f"fused_dueling_q: {m_count} members x {rows_per_member} rows != {n} obs rows")
    if rows_per_member is None and m_count != 1:
        raise ValueError(f"fused_dueling_q: a stack of {m_count} packs needs rows_per_member")
    if net.w1.device != dev:
        raise ValueError(f"fused_dueling_q: weights on {net.w1.device}, obs on {dev}")
    outs = (_out(q, (n, net.n_actions), torch.float32, dev, "q"), _out(q_max, (n,), torch.float32, dev, "q_max"),
            _out(argmax, (n,), torch.int64, dev, "argmax"))
    if all(o is None for o in outs):
        raise ValueError("fused_dueling_q: request at least one of q, q_max, argmax")
    cfg = DEFAULTS[precision]
    interp = is_interpreted()
    D, H1, H2, H3, A = net.dims
    default_tile = block_m is None
    if block_m is None:  # a stack's members: the tile a launch on one member's rows takes
        block_m = default_block_m(rows_per_member or n, net.dims, precision)
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"block_m = {block_m}: must be a power of two >= 16 (tl.dot's smallest M)")
    if rows_per_member is not None and rows_per_member % block_m:
        raise ValueError(f"fused_dueling_q: block_m = {block_m} does not divide a member's {rows_per_member} rows "
                         "(a tile would read two members' weights)")
    if not interp and precision != "ieee" and block_m < MIN_COMPILED_BLOCK_M:
        why = (f"; a net wider than {MAX_COMPILED_WIDTH} units (here {max(H1, H3)}) gets fewer by default: run its "
               "acting in torch") if default_tile else ""
        raise ValueError(f"block_m = {block_m}: the compiled {precision} kernel runs tiles of at least "
                         f"{MIN_COMPILED_BLOCK_M} rows (64-row tiles gave wrong Q on the H200; MIN_COMPILED_BLOCK_M){why}")
    warps = launch_warps(block_m, precision, num_warps, interp)
    bn = min(bn or cfg["bn"], H2)
    if bn < 16 or bn & (bn - 1):
        raise ValueError(f"bn = {bn}: must be a power of two >= 16")
    stages = stages or cfg["stages"]
    if not interp and precision != "ieee":
        if min(D, H1, H2, H3) < MIN_WIDTH or A < MIN_HEAD:
            raise ValueError(f"the compiled {precision} kernel needs every block at least {MIN_WIDTH} wide and the head "
                             f"{MIN_HEAD} (this pack: D, H1, H2, H3, A = {D}, {H1}, {H2}, {H3}, {A}; narrower blocks gave "
                             f"wrong Q on the H200): pack with pack_net(..., min_head=MIN_HEAD, min_width=MIN_WIDTH)")
        if stages < MIN_COMPILED_STAGES:
            raise ValueError(f"stages = {stages}: the compiled {precision} kernel pipelines its chunk loop over at least "
                             f"{MIN_COMPILED_STAGES} stages (1 gave wrong Q on the H200; MIN_COMPILED_STAGES)")
    if n == 0:
        return FusedQ(*outs)
    dummy = obs  # never written: the STORE_* flags are off for missing outputs
    _dueling_q_kernel[(triton.cdiv(n, block_m),)](
        obs, obs.stride(0), n, net.obs_dim,
        net.w1, net.b1, net.w2, net.b2, net.w3, net.b3, net.w4, net.b4, net.slope,
        outs[0] if outs[0] is not None else dummy, outs[1] if outs[1] is not None else dummy,
        outs[2] if outs[2] is not None else dummy,
        N_ACTIONS=net.n_actions, D=D, H1=H1, H2=H2, H3=H3, A=A, BLOCK_M=block_m, BN=bn,
        STAGES=stages, PREC="ieee" if precision == "bf16" else precision,
        F32_DOT=want == torch.float32 or interp, ROUND=want == torch.bfloat16,
        STORE_Q=outs[0] is not None, STORE_MAX=outs[1] is not None, STORE_ARG=outs[2] is not None,
        rows_per_member=rows_per_member or 1, MEMBERS=rows_per_member is not None, num_warps=warps,
    )
    return FusedQ(*outs)


__all__ = ["default_block_m", "DEFAULTS", "MAX_COMPILED_WIDTH", "MIN_COMPILED_BLOCK_M", "MIN_COMPILED_STAGES", "MIN_HEAD", "MIN_WIDTH", "PRECISIONS", "FusedQ", "fused_dueling_q",
           "is_interpreted", "launch_warps"]
