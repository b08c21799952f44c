"""Prioritised-replay sum / min trees as Triton kernels: the batched prefix descent (sampling) and
the leaf write + ancestor rebuild (priority updates), each ONE launch. The torch reference is
``foxhunt.agents.replay.sum_tree.SegmentTree``; it (and ``ProportionalPER``) dispatches here when
built with ``backend="fused"``, and the two must give the same bits.

Tree layout (``SegmentTree``'s): a flat heap ``tree`` [2 · n_leaves], n_leaves = 2**depth, float32
or float64; tree[1] the root, node n's children at 2n and 2n + 1, leaf i at n_leaves + i, tree[0]
unused. Sum trees hold priorities (unitless, >= 0), min trees the same leaves with +inf padding.

``find_prefix(tree, prefix, out, depth=, search_level=, value_out=None)``
    prefix [B] float64 in [0, total) → out [B] int64 leaf indices (value_out [B] float64: the
    leaves' priorities). Bitwise the same as ``SegmentTree.find_prefix`` with the same
    search_level s, by construction: the float64 running sum of level s is computed with the very
    torch expression the reference uses (``torch.cumsum(level.to(float64), 0)``: its association
    order is torch's business, e.g. a parallel scan on CUDA, so the kernel does not redo it), then
    one kernel does, per sample, torch's own searchsorted binary search (``cus_upper_bound`` /
    ``cus_lower_bound``: mid = lo + ((hi - lo) >> 1), the tests ``!(mid > u)`` / ``!(mid >= u)``,
    s + 1 masked steps; so even a cumsum that is not monotone, or a NaN, lands where torch's
    does), the clamp to the last node with positive mass, then to the next node with mass (a
    zero node can own an ulp of a parallel scan's running sum), u -= incl[j] - level[j], and the
    remaining depth - s levels with the reference's float ops: go right iff (u >= left, compared in
    float64, or the left child is empty) and right > 0, u -= float64(left · go) (the product in the tree dtype, as torch's
    ``left * go_right``). One lane per sample, BLOCK samples per program.
    Determinism: torch documents ``cumsum`` of a floating CUDA tensor as nondeterministic (CUB's
    decoupled look-back scan may associate a tile's prefix differently from run to run), so for
    s > 0 on CUDA the torch reference itself can differ from run to run in the last bits of the
    running sum, hence in the leaf of a prefix within an ulp of a segment boundary; the fused path
    inherits exactly that (it is equal to torch given the same running sum). With s = 0 (a pure
    level-by-level descent) both paths are deterministic and bitwise equal, and the kernel needs
    no running sum at all: the searchsorted top only saved torch launches, so for the fused path
    s = 0 costs depth dependent loads against (s + 1) + (depth - s) plus the 2-3 cumsum kernels.
``write_rebuild(tree, indices, values, depth=, op=, other=None, other_op=None, running_max=None)``
    leaves[indices] := values (duplicates keep their max, like ``scatter_reduce_(amax,
    include_self=False)``), then every ancestor of a touched leaf is recomputed from its two
    children, level by level (never accumulated): the tree ends bitwise equal to the reference's
    ``assign`` + ``rebuild_partial`` (= ``rebuild_full``). ``other`` (the min tree of a
    proportional sampler) gets the same leaves and its own rebuild in the same launch;
    ``running_max`` (0-d, the sampler's max priority) := max(running_max, max(values)).
    Duplicates: the touched leaves are set to -inf, then ``atomic_max`` (max is exact and
    order-free, so the result does not depend on which write lands first; the sums never use
    atomics). Values must be NaN-free (the sampler cleans TD errors), as torch's amax would
    propagate a NaN and atomic max does not.

Both read no tensor on the host and have fixed shapes: CUDA-graph capturable.

Single CTA vs one launch per level (the rebuild): the levels must be done in order, so the kernel
runs as ONE program (up to 4096 lanes, 32 warps) that loops over the levels with a CTA barrier
(``tl.debug_barrier``: bar.sync makes a level's stores visible to every thread of the CTA) between
them; the other design, one launch per level over many CTAs, costs depth launches (~2.5 µs each
graphed) but spreads a level's loads over the GPU. Here a level is B = 4096 nodes: its cost is
one dependent L2/HBM round trip (~1 µs), so one CTA is latency-, not bandwidth-bound, and wins.

Performance model (H200, capacity 1 M = depth 20, B = 4096, s = 16; leads for bench/bench_replay.py
to check). Torch: the descent is ~9 kernels for the searchsorted top plus ~7 per binary level
(~37), the update 2 scatter-max + 20 levels × (1 full-level op, or 3 partial ops) per tree + 2 for
the max (44 with the full rebuild that "auto" picks on CUDA): ~80 launches, ~200 µs graphed.
Fused: sampling = level.to(f64) + cumsum (torch, 2-3 kernels over 64 K nodes, 512 KB) + 1 kernel
whose lanes do s + 1 dependent 8-byte loads in that L2-resident array and 2 · (depth - s) tree
loads (~20 dependent L2 round trips, ~10 µs); update = 1 kernel of ~depth + 3 barriered steps,
each one dependent load of 4 children per lane (~1 µs): ~25 µs. Bytes moved are negligible
(< 1 MB); both kernels are latency-bound.

``is_interpreted()`` says whether Triton runs in the interpreter (TRITON_INTERPRET=1 at import);
there the launchers use one program of next_pow2(B) lanes. This module is part of the
``foxhunt.kernels`` leaf: it imports nothing of ours.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted
from foxhunt.kernels.rules.prefix import next_positive

OPS = {"sum": 0, "min": 1}
MAX_REBUILD_BLOCK = 4096
"""Lanes of the single rebuild program (larger batches loop over chunks of this many)."""


@triton.jit
def _search(incl_p, val, N: tl.constexpr, STEPS: tl.constexpr, RIGHT: tl.constexpr):
    """torch.searchsorted(incl[:N], val, right=RIGHT) per lane, with torch's own loop (see the
    module docstring); STEPS = log2(N) + 1 masked iterations cover every interval length."""
    lo = tl.zeros(val.shape, tl.int64)
    hi = tl.full(val.shape, N, tl.int64)
    for _ in range(STEPS):
        active = lo < hi
        mid = lo + ((hi - lo) >> 1)
        mv = tl.load(incl_p + mid, mask=active, other=0.0)
        if RIGHT:
            below = ~(mv > val)  # torch: if (!(mid_val > val)) start = mid + 1
        else:
            below = ~(mv >= val)  # torch: if (!(mid_val >= val)) start = mid + 1
        lo = tl.where(active & below, mid + 1, lo)
        hi = tl.where(active & ~below, mid, hi)
    return lo


@triton.jit
def _find_prefix_kernel(tree_p, incl_p, next_p, prefix_p, out_p, value_p, n,
                        S: tl.constexpr, DEPTH: tl.constexpr, HAS_VALUE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    u = tl.load(prefix_p + offs, mask=valid, other=0.0).to(tl.float64)
    if S > 0:
        TOP: tl.constexpr = 1 << S
        j = _search(incl_p, u, TOP, S + 1, True)
        # The last node with positive mass (the same value in every lane; L1 hits after the first).
        total = tl.load(incl_p + tl.full([BLOCK], TOP - 1, tl.int64))
        last = _search(incl_p, total, TOP, S + 1, False)
        j = tl.minimum(j, last)
        # Memory safety only: j = TOP needs a NaN total, where torch's index_select raises instead.
        j = tl.minimum(j, TOP - 1)
        j = tl.minimum(tl.load(next_p + j), TOP - 1)  # the next node with mass (rules.prefix.next_positive)
        excl = tl.load(incl_p + j) - tl.load(tree_p + TOP + j).to(tl.float64)  # (incl - level)[j]
        u = u - excl
        node = j + TOP
    else:
        node = tl.full([BLOCK], 1, tl.int64)
    for _ in range(DEPTH - S):
        left = tl.load(tree_p + 2 * node)
        right = tl.load(tree_p + 2 * node + 1)
        go = ((u >= left.to(tl.float64)) | (left <= 0)) & (right > 0)  # never into an empty left child
        # torch: u.sub_(left * go_right): the product in the tree dtype (inf · 0 = NaN included).
        u = u - (left * go.to(left.dtype)).to(tl.float64)
        node = 2 * node + go.to(tl.int64)
    tl.store(out_p + offs, node - (1 << DEPTH), mask=valid)
    if HAS_VALUE:
        tl.store(value_p + offs, tl.load(tree_p + node).to(tl.float64), mask=valid)


@triton.jit
def _combine(left, right, OP: tl.constexpr):
    if OP == 0:
        return left + right
    else:  # torch.minimum propagates NaN
        return tl.minimum(left, right, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _write_rebuild_kernel(a_p, b_p, idx_p, val_p, max_p, n, idx_stride, val_stride,
                          DEPTH: tl.constexpr, OP_A: tl.constexpr, OP_B: tl.constexpr, HAS_B: tl.constexpr,
                          HAS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    N_LEAVES: tl.constexpr = 1 << DEPTH
    ar = tl.arange(0, BLOCK)
    ty = a_p.dtype.element_ty
    # 1. Touched leaves := -inf, so the atomic max below keeps the max of the NEW values only
    #    (scatter_reduce_'s include_self=False).
    for c in range(0, n, BLOCK):
        m = c + ar < n
        leaf = tl.load(idx_p + (c + ar) * idx_stride, mask=m, other=0) + N_LEAVES
        tl.store(a_p + leaf, tl.full([BLOCK], float("-inf"), ty), mask=m)
    tl.debug_barrier()
    # 2. Scatter-max; the running max of the values for max_p.
    vmax = tl.full([BLOCK], float("-inf"), ty)
    for c in range(0, n, BLOCK):
        m = c + ar < n
        leaf = tl.load(idx_p + (c + ar) * idx_stride, mask=m, other=0) + N_LEAVES
        v = tl.load(val_p + (c + ar) * val_stride, mask=m, other=float("-inf")).to(ty)
        tl.atomic_max(a_p + leaf, v, mask=m, sem="relaxed")
        vmax = tl.maximum(vmax, v)
    tl.debug_barrier()
    # 3. The second tree's leaves are the same values (read back after the atomics: .cg = from L2).
    if HAS_B:
        for c in range(0, n, BLOCK):
            m = c + ar < n
            leaf = tl.load(idx_p + (c + ar) * idx_stride, mask=m, other=0) + N_LEAVES
            tl.store(b_p + leaf, tl.load(a_p + leaf, mask=m, cache_modifier=".cg").to(b_p.dtype.element_ty), mask=m)
    # 4. Ancestors, level by level from the leaves up: node = leaf >> k is recomputed from its two
    #    children (final after the barrier); duplicate nodes store identical values.
    for k in range(1, DEPTH + 1):
        tl.debug_barrier()
        for c in range(0, n, BLOCK):
            m = c + ar < n
            node = (tl.load(idx_p + (c + ar) * idx_stride, mask=m, other=0) + N_LEAVES) >> k
            la = tl.load(a_p + 2 * node, mask=m, cache_modifier=".cg")
            ra = tl.load(a_p + 2 * node + 1, mask=m, cache_modifier=".cg")
            if HAS_B:
                lb = tl.load(b_p + 2 * node, mask=m, cache_modifier=".cg")
                rb = tl.load(b_p + 2 * node + 1, mask=m, cache_modifier=".cg")
                tl.store(b_p + node, _combine(lb, rb, OP_B), mask=m)
            tl.store(a_p + node, _combine(la, ra, OP_A), mask=m)
    if HAS_MAX:  # torch.maximum(running_max, values.max()); n >= 1, so mx is a real value
        mx = tl.max(vmax, axis=0)
        tl.store(max_p, tl.maximum(tl.load(max_p), mx.to(max_p.dtype.element_ty)))


def find_prefix(tree: torch.Tensor, prefix: torch.Tensor, out: torch.Tensor, *, depth: int, search_level: int,
                value_out: torch.Tensor | None = None, block: int = 128, num_warps: int = 4) -> None:
    """Leaf of each prefix value, as ``SegmentTree.find_prefix`` (bitwise; module docstring).

    tree [2 · 2**depth] f32/f64 (a sum tree, contiguous); prefix [B] float64; out [B] int64 and
    value_out ([B] float64, the leaves' values) are written. search_level: levels resolved by the
    searchsorted top (clamped to depth, as the reference does). Launches the running sum of level s
    (torch, when s > 0) and one kernel; no host reads.
    """
    n = int(prefix.shape[0])
    if prefix.dtype != torch.float64 or out.dtype != torch.int64 or out.shape != prefix.shape:
        raise ValueError(f"find_prefix: prefix [B] float64 and out [B] int64 expected, got {prefix.dtype} "
                         f"{list(prefix.shape)} and {out.dtype} {list(out.shape)}")
    if not (out.is_contiguous() and tree.is_contiguous()) or (value_out is not None and not (
            value_out.is_contiguous() and value_out.dtype == torch.float64 and value_out.shape == prefix.shape)):
        raise ValueError("find_prefix: tree, out and value_out ([B] float64) must be contiguous")
    prefix = prefix.contiguous()
    s = min(int(depth), int(search_level))
    if s > 0:  # the reference's expressions, so the running sum has its bits
        level = tree[1 << s: 2 << s]
        incl = torch.cumsum(level.to(torch.float64), 0)
        nxt = next_positive(level)  # the next node with mass, as the reference reads it
    else:
        incl = nxt = prefix  # unused
    if is_interpreted():  # one program: the interpreter's cost is per program and per operation
        block = max(16, triton.next_power_of_2(n))
    _find_prefix_kernel[(triton.cdiv(n, block),)](
        tree, incl, nxt, prefix, out, value_out if value_out is not None else out, n,
        S=s, DEPTH=int(depth), HAS_VALUE=value_out is not None, BLOCK=block,
        num_warps=num_warps, num_stages=1, enable_fp_fusion=False,
    )


def write_rebuild(tree: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, *, depth: int, op: str,
                  other: torch.Tensor | None = None, other_op: str | None = None,
                  running_max: torch.Tensor | None = None) -> None:
    """Leaf writes (duplicates keep the max) and the ancestors' rebuild of one or two trees, in one
    launch (module docstring).

    tree / other: [2 · 2**depth] f32/f64 contiguous, combined by op / other_op ("sum" | "min");
    indices [B] int64 in [0, capacity); values [B] (cast to the tree dtype; a stride-0 expand is
    read as is); running_max: 0-d tensor of the tree dtype, or None. B >= 1.
    """
    n = int(indices.shape[0])
    if n == 0:
        return
    if indices.dtype != torch.int64 or values.shape != indices.shape or not tree.is_contiguous() or (
            other is not None and (not other.is_contiguous() or other.shape != tree.shape)):
        raise ValueError("write_rebuild: indices [B] int64, values [B] and contiguous trees of one shape expected")
    if op not in OPS or (other is not None and other_op not in OPS):
        raise ValueError(f"write_rebuild: op must be one of {tuple(OPS)}, got {op!r} / {other_op!r}")
    if is_interpreted():
        block = max(16, triton.next_power_of_2(n))  # one chunk: the interpreter pays per operation
    else:
        block = min(max(128, triton.next_power_of_2(n)), MAX_REBUILD_BLOCK)
    num_warps = max(4, min(32, block // 128))  # ~4 lanes a thread: latency hiding, no spills
    _write_rebuild_kernel[(1,)](
        tree, other if other is not None else tree, indices, values,
        running_max if running_max is not None else tree, n, indices.stride(0), values.stride(0),
        DEPTH=int(depth), OP_A=OPS[op], OP_B=OPS[other_op] if other is not None else 0, HAS_B=other is not None,
        HAS_MAX=running_max is not None, BLOCK=block, num_warps=num_warps, num_stages=1, enable_fp_fusion=False,
    )


__all__ = ["MAX_REBUILD_BLOCK", "OPS", "find_prefix", "is_interpreted", "write_rebuild"]
