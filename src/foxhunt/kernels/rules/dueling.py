"""Triton device functions: the dueling Q-network forward for a block of windows, and its argmax.

The network arrives packed by ``rules.packing.pack_dueling`` as four dense layers with transposed,
zero-padded weights ``[K, N]`` (N contiguous): trunk 1 ``[D, H1]``, trunk 2 ``[H1, H2]``, the two
head hidden layers side by side ``[H2, H3]`` (value hidden in columns [0, HH), advantage hidden in
[HH, 2·HH)), and the two head outputs in one block-diagonal ``[H3, A]`` (advantages in columns
[0, n_actions), the value in column n_actions). Zero padding is exact: padded units are
LeakyReLU(0) = 0 and padded weights add exact zeros.

Each layer is a K-loop (``tl.range`` with ``num_stages``, Triton's software-pipelined GEMM shape):
the activation of the block ([BLOCK_W, K]) sits in a per-program scratch row block in global memory
(L1/L2-resident, 2 × BLOCK_W × HMAX elements, ping-pong) because register tensors cannot be sliced
along K, and the weight tiles ``[BK, N]`` stream from L2. ``tl.debug_barrier`` orders a layer's
scratch stores before the next layer's loads (the stores and loads of one program touch the same
addresses from different threads).

This module is part of the ``foxhunt.kernels`` leaf: it imports nothing of ours.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def store_rows(buf, x, N: tl.constexpr, HMAX: tl.constexpr, BLOCK_W: tl.constexpr):
    """buf[r, :N] ← x ([BLOCK_W, N]) in the scratch's dtype, between two CTA barriers."""
    r = tl.arange(0, BLOCK_W)
    n = tl.arange(0, N)
    tl.debug_barrier()
    tl.store(buf + r[:, None] * HMAX + n[None, :], x.to(buf.dtype.element_ty))
    tl.debug_barrier()


@triton.jit
def dense(src, w_ptr, b_ptr, K: tl.constexpr, N: tl.constexpr, LD: tl.constexpr, HMAX: tl.constexpr,
          BLOCK_W: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, PREC: tl.constexpr, F32_DOT: tl.constexpr):
    """src[:, :K] @ W[K, N] + b → [BLOCK_W, N] float32 (accumulated in float32); W's rows are LD
    elements apart (LD = N for a whole packed layer, more for a block of its columns).

    F32_DOT: operands are (converted to) float32 and multiplied with input precision PREC ("ieee",
    "tf32", "tf32x3"); otherwise they are bf16 on the bf16 tensor-core path. (The interpreter
    cannot multiply bf16, so it runs bf16 weights with F32_DOT and PREC "ieee".)
    """
    r = tl.arange(0, BLOCK_W)
    kk = tl.arange(0, BK)
    n = tl.arange(0, N)
    acc = tl.zeros([BLOCK_W, N], dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = tl.load(src + r[:, None] * HMAX + (k + kk)[None, :])
        b = tl.load(w_ptr + (k + kk)[:, None] * LD + n[None, :])
        if F32_DOT:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=PREC)
        else:
            acc = tl.dot(a, b, acc)
    bias = tl.load(b_ptr + n)
    return acc + bias[None, :]


@triton.jit
def member_weights(w1, b1, w2, b2, w3, b3, w4, b4, m, D: tl.constexpr, H1: tl.constexpr, H2: tl.constexpr,
                   H3: tl.constexpr, A: tl.constexpr):
    """The pointers of member ``m``'s pack in a stack of packs [M, ...] (``DuelingWeights`` stacked; every
    member's tensors the padded (D, H1, H2, H3, A) layout): each base advanced by m times its block."""
    return (w1 + m * (D * H1), b1 + m * H1, w2 + m * (H1 * H2), b2 + m * H2, w3 + m * (H2 * H3), b3 + m * H3,
            w4 + m * (H3 * A), b4 + m * A)


@triton.jit
def leaky(x, slope):
    """LeakyReLU: x if x > 0 else x·slope (torch's CPU / CUDA formula)."""
    return tl.where(x > 0, x, x * slope)


@triton.jit
def greedy_action(x, valid, buf0, buf1, w1, b1, w2, b2, w3, b3, w4, b4, vb_ptr, slope, N_ACTIONS: tl.constexpr,
                  D: tl.constexpr, H1: tl.constexpr, H2: tl.constexpr, H3: tl.constexpr, A: tl.constexpr,
                  HMAX: tl.constexpr, BLOCK_W: tl.constexpr, BK1: tl.constexpr, BK: tl.constexpr,
                  BKH: tl.constexpr, STAGES: tl.constexpr, PREC: tl.constexpr, F32_DOT: tl.constexpr,
                  ADV: tl.constexpr):
    """argmax_a Q(x, a) for the observations x [BLOCK_W, D]; Q = V + A − mean(A) as DuelingQNet.

    ADV: the advantage head alone, with the value half computed for the whole block only when some
    row's top two advantages are too close for float32 to be sure (``greedy_action_row``'s rule;
    BKH: the K-step of the head layers, ≤ H3 / 2; padding rows, ``valid`` False, never ask for it).
    Returns int32 [BLOCK_W] (the first maximal index on exact ties, as torch.argmax).
    """
    store_rows(buf0, x, D, HMAX, BLOCK_W)
    h = leaky(dense(buf0, w1, b1, D, H1, H1, HMAX, BLOCK_W, BK1, STAGES, PREC, F32_DOT), slope)
    store_rows(buf1, h, H1, HMAX, BLOCK_W)
    h = leaky(dense(buf1, w2, b2, H1, H2, H2, HMAX, BLOCK_W, BK, STAGES, PREC, F32_DOT), slope)
    store_rows(buf0, h, H2, HMAX, BLOCK_W)  # h2 stays in buf0 for the value half
    if ADV:
        # One copy of the head layers in a loop over head halves (advantage, then value if needed):
        # an inlined second copy made the compiler spill 10x more (cf. greedy_action_row).
        h2max = tl.max(tl.abs(h), axis=1)  # [BLOCK_W]
        c = tl.arange(0, A)[None, :]
        c0 = tl.full((), H3 // 2, tl.int32)
        out_a = tl.zeros([BLOCK_W, A], dtype=tl.float32)
        a = tl.zeros([BLOCK_W], dtype=tl.int32)
        certain = valid == 0
        again = c0 > 0
        while again:
            hh = leaky(dense(buf0, w3 + c0, b3 + c0, H2, H3 // 2, H3, HMAX, BLOCK_W, BKH, STAGES, PREC, F32_DOT), slope)
            store_rows(buf1, hh, H3 // 2, HMAX, BLOCK_W)
            out = dense(buf1, w4 + c0 * A, b4, H3 // 2, A, A, HMAX, BLOCK_W, BKH, STAGES, PREC, F32_DOT)
            if c0 > 0:  # advantage half
                adv = tl.where(c < N_ACTIONS, out, float("-inf"))
                top = tl.argmax(adv, axis=1, tie_break_left=True).to(tl.int32)
                m1 = tl.max(adv, axis=1)
                m2 = tl.max(tl.where(c == top[:, None], float("-inf"), adv), axis=1)
                amax = tl.max(tl.where(c < N_ACTIONS, tl.abs(out), 0.0), axis=1)
                v_bound = tl.load(vb_ptr) * (tl.load(vb_ptr + 1) * h2max + tl.load(vb_ptr + 2)) + tl.load(vb_ptr + 3)
                certain = (m1 - m2 > ADV_SLACK * (v_bound * 1.05 + 2.0 * amax)) | (valid == 0)  # false for NaN
                out_a = out
                a = top
                again = tl.min(certain.to(tl.int32), axis=0) == 0  # some row needs V: the value half
                c0 = tl.full((), 0, tl.int32)
            else:  # value half, for the whole block: V in column N_ACTIONS
                full = tl.where(c == N_ACTIONS, out, out_a)
                a = tl.where(certain, a, dueling_argmax(full, N_ACTIONS, A))
                again = c0 > 0
    else:
        h = leaky(dense(buf0, w3, b3, H2, H3, H3, HMAX, BLOCK_W, BK, STAGES, PREC, F32_DOT), slope)
        store_rows(buf1, h, H3, HMAX, BLOCK_W)
        out = dense(buf1, w4, b4, H3, A, A, HMAX, BLOCK_W, BK, STAGES, PREC, F32_DOT)
        a = dueling_argmax(out, N_ACTIONS, A)
    return a


@triton.jit
def row_argmax(q, N: tl.constexpr, A: tl.constexpr):
    """torch.argmax over columns [0, N) of q [rows, A] (A >= N padded columns): int32 [rows], the
    first maximal column, a NaN counting as the maximum (the first NaN, as torch; a row with both
    +inf and NaN gives the first of them), always in [0, N).

    Not ``tl.argmax`` over a -inf-padded row: its combine step keeps the right operand unless
    ``left > right``, which is False for every comparison with a NaN, so on the GPU a row holding a
    NaN ends on a padding column (an action >= N: the collector's ``q.gather`` then fails with a
    device-side "index out of bounds"). The interpreter uses ``np.nanargmax`` and hides that.
    Here every reduction runs over NaN-free keys (NaN → +inf), so the GPU and the interpreter agree."""
    c = tl.arange(0, A)[None, :]
    ok = c < N
    key = tl.where(ok, tl.where(q != q, float("inf"), q), float("-inf"))
    best = tl.max(key, axis=1)
    return tl.min(tl.where(ok & (key == best[:, None]), c, N - 1), axis=1).to(tl.int32)


@triton.jit
def row_max(q, N: tl.constexpr, A: tl.constexpr):
    """torch.amax over columns [0, N) of q [rows, A]: float32 [rows], NaN when a column is NaN
    (``tl.max`` ignores or propagates NaN depending on the backend; here it never sees one)."""
    c = tl.arange(0, A)[None, :]
    ok = c < N
    nan = tl.max((ok & (q != q)).to(tl.int32), axis=1) > 0
    return tl.where(nan, float("nan"), tl.max(tl.where(ok & (q == q), q, float("-inf")), axis=1))


@triton.jit
def dueling_argmax(out, N_ACTIONS: tl.constexpr, A: tl.constexpr):
    """argmax_a of Q = V + A − mean(A) from the packed head outputs ``out`` [rows, A] (advantages in
    columns [0, N_ACTIONS), the value in column N_ACTIONS). int32 [rows], first maximum on ties, a
    NaN counting as the maximum (``row_argmax``), always in [0, N_ACTIONS)."""
    c = tl.arange(0, A)[None, :]
    is_adv = c < N_ACTIONS
    value = tl.sum(tl.where(c == N_ACTIONS, out, 0.0), axis=1)
    adv_sum = tl.sum(tl.where(is_adv, out, 0.0), axis=1)
    adv_mean = tl.div_rn(adv_sum, tl.full(adv_sum.shape, N_ACTIONS, tl.float32))
    q = (value[:, None] + out) - adv_mean[:, None]
    return row_argmax(q, N_ACTIONS, A)


@triton.jit
def _matvec(v, w_ptr, b_ptr, K: tl.constexpr, N: tl.constexpr, n0, BN: tl.constexpr, ROUND: tl.constexpr,
            CG: tl.constexpr = False):
    """v[K] @ W[:, n0:n0 + BN] + b[n0:n0 + BN] → [BN] float32 (float32 FMA; W is [K, N] row-major).

    ROUND: round the input to bf16 first (the bf16 path's layer inputs, as ``dense`` casts them).
    CG: load W through L2 only (``ld.global.cg``), leaving L1 to the weights kept there."""
    k = tl.arange(0, K)
    n = n0 + tl.arange(0, BN)
    if ROUND:
        v = v.to(tl.bfloat16).to(tl.float32)
    if CG:
        w = tl.load(w_ptr + k[:, None] * N + n[None, :], cache_modifier=".cg").to(tl.float32)
    else:
        w = tl.load(w_ptr + k[:, None] * N + n[None, :]).to(tl.float32)
    return tl.sum(v[:, None] * w, axis=0) + tl.load(b_ptr + n)


@triton.jit
def _heads_row(h1, w2, b2, w3, b3, w4, b4, slope, H1: tl.constexpr, H2: tl.constexpr, H3: tl.constexpr,
               A: tl.constexpr, BN: tl.constexpr, ROUND: tl.constexpr, C0, HC: tl.constexpr,
               L1KEEP: tl.constexpr):
    """Layers 2-4 of one window from h1 [H1]: the packed head outputs [A] of the head-hidden columns
    [C0, C0 + HC) (C0 = 0, HC = H3: both heads; C0 = H3 / 2, HC = H3 / 2: the advantage head alone,
    whose rows of W4 hold only advantages (its value column is the value bias); C0 = 0, HC = H3 / 2:
    the value head alone (its advantage columns are the advantage biases)), and max |h2| (for the
    value bound). C0 may be a runtime value.

    Layers 2 and 3 are fused over BN-wide column chunks of layer 2 (h2[c] feeds layer 3's sum
    directly), so no activation is written to memory and no register tensor is ever sliced.
    L1KEEP: W2 streams through L2 only and W3 / W4 are loaded with evict_last, so the head weights
    can stay in the SM's L1 across bars instead of being evicted by W2's stream."""
    j = C0 + tl.arange(0, HC)
    acc3 = tl.zeros([HC], dtype=tl.float32)
    h2max = tl.max(tl.zeros([HC], dtype=tl.float32), axis=0)
    for c in tl.static_range(0, H2, BN):
        h2c = leaky(_matvec(h1, w2, b2, H1, H2, c, BN, ROUND, L1KEEP), slope)  # [BN]
        if ROUND:
            h2c = h2c.to(tl.bfloat16).to(tl.float32)
        h2max = tl.maximum(h2max, tl.max(tl.abs(h2c), axis=0))
        rows3 = (c + tl.arange(0, BN))[:, None] * H3 + j[None, :]
        if L1KEEP:
            w3c = tl.load(w3 + rows3, eviction_policy="evict_last").to(tl.float32)  # [BN, HC]
        else:
            w3c = tl.load(w3 + rows3).to(tl.float32)
        acc3 += tl.sum(h2c[:, None] * w3c, axis=0)
    h3 = leaky(acc3 + tl.load(b3 + j), slope)
    if ROUND:
        h3 = h3.to(tl.bfloat16).to(tl.float32)
    n = tl.arange(0, A)
    if L1KEEP:
        w4r = tl.load(w4 + j[:, None] * A + n[None, :], eviction_policy="evict_last").to(tl.float32)  # [HC, A]
    else:
        w4r = tl.load(w4 + j[:, None] * A + n[None, :]).to(tl.float32)
    return tl.sum(h3[:, None] * w4r, axis=0) + tl.load(b4 + n), h2max


ADV_SLACK = tl.constexpr(8.0 * 2.0 ** -24 * 1.01)
"""The advantage-only argmax is certain when the top two advantages differ by more than
ADV_SLACK · (|V| bound + 2 max|A|): float32's V + A_i − mean(A) (two roundings, each at most
2^-24 relative) cannot reorder them (4u needed; 8u leaves room for V's own rounding)."""


@triton.jit
def greedy_action_row(x, h1_pre, w1, b1, w2, b2, w3, b3, w4, b4, vb_ptr, slope, N_ACTIONS: tl.constexpr,
                      D: tl.constexpr, H1: tl.constexpr, H2: tl.constexpr, H3: tl.constexpr, A: tl.constexpr,
                      BN: tl.constexpr, ROUND: tl.constexpr, PRE: tl.constexpr, ADV: tl.constexpr,
                      L1KEEP: tl.constexpr):
    """``greedy_action`` for ONE window (x: [1, D]) as matrix-vector products on the CUDA cores.

    Why: a window's bars form a dependent chain, so one window's time per bar is what counts, and
    tl.dot's smallest tile (16 rows) would leave 15 of 16 rows empty. One window per program puts
    W windows on W SMs, each streaming the weights from L2 on its own.
    PRE: layer 1's pre-activation arrives as ``h1_pre`` [H1] (its feature part precomputed for all
    bars before the loop, the portfolio part added by the caller) and ``x`` is unused.
    ADV: compute the advantage head only (Q = V + A − mean(A), so argmax Q = argmax A in exact
    arithmetic; it skips the value head's half of W3, ~28 % of the bytes per bar). Float32 rounding
    of V + A_i − mean(A) could only merge two advantages closer than ADV_SLACK · (|V| + 2 max|A|),
    with |V| ≤ vb0 · (vb1 · max|h2| + vb2) + vb3 (``value_bound``: Hölder bounds of the value head,
    LeakyReLU being 1-Lipschitz; × 1.05 covers the bf16 path's rounded inputs). When the top two
    are that close (or not finite) the bar runs layers 2-4 again for the value half and takes the
    full dueling argmax: the action is always float32's argmax of V + A − mean(A) for this
    kernel's V and A (a rounding tie included), never an artefact of skipping V.
    Returns int32 [1] (the first maximal index on exact ties).
    """
    if PRE:
        h1 = leaky(h1_pre, slope)
    else:
        xv = tl.sum(x, axis=0)  # [D]: drops the single row
        h1 = leaky(_matvec(xv, w1, b1, D, H1, 0, H1, ROUND), slope)
    if ADV:
        # One copy of the head code, run once (advantage half) or twice (then the value half): a
        # second inlined copy inside an `if` made the compile 300× slower and spilled registers.
        c = tl.arange(0, A)
        c0 = tl.full((), H3 // 2, tl.int32)
        adv_out = tl.zeros([A], dtype=tl.float32)
        a = tl.zeros([1], dtype=tl.int32)
        again = c0 > 0
        while again:
            out, h2max = _heads_row(h1, w2, b2, w3, b3, w4, b4, slope, H1, H2, H3, A, BN, ROUND, c0, H3 // 2, L1KEEP)
            if c0 > 0:  # advantage half: columns [H3/2, H3) of W3, advantage rows of W4
                adv = tl.where(c < N_ACTIONS, out, float("-inf"))
                top = tl.argmax(adv, axis=0, tie_break_left=True)
                m1 = tl.max(adv, axis=0)
                m2 = tl.max(tl.where(c == top, float("-inf"), adv), axis=0)
                amax = tl.max(tl.where(c < N_ACTIONS, tl.abs(out), 0.0), axis=0)
                v_bound = tl.load(vb_ptr) * (tl.load(vb_ptr + 1) * h2max + tl.load(vb_ptr + 2)) + tl.load(vb_ptr + 3)
                certain = m1 - m2 > ADV_SLACK * (v_bound * 1.05 + 2.0 * amax)  # false for NaN too
                adv_out = out
                a = tl.zeros([1], dtype=tl.int32) + top.to(tl.int32)
                again = not certain
                c0 = tl.full((), 0, tl.int32)
            else:  # value half: V sits in column N_ACTIONS (its advantage columns are biases only)
                full = tl.where(c == N_ACTIONS, out, adv_out)
                a = dueling_argmax(full[None, :], N_ACTIONS, A)
                again = c0 > 0
    else:
        out, h2max = _heads_row(h1, w2, b2, w3, b3, w4, b4, slope, H1, H2, H3, A, BN, ROUND, 0, H3, L1KEEP)
        a = dueling_argmax(out[None, :], N_ACTIONS, A)
    return a
