"""B-ary (default 32-ary) prioritised-replay sum + min trees as Triton kernels: the batched prefix
descent (sampling), the leaf writes with the ancestors' rebuild (priority updates) and a full
rebuild (bulk adds). The torch twin is ``foxhunt.agents.replay.wide_per`` (``WideTree`` and its
``*_torch`` functions); both must give the same bits (the same float ops in the same order).

Layout (a B-ary heap shifted by B - 1 so every sibling block is B-aligned; B a power of two)::

    tree: [size] float32 (or float64), one flat buffer per tree (sum tree, min tree)
    root:                   tree[B - 1]           (tree[0 : B-1] unused, hold the identity)
    level d (0 = root):     tree[start(d) : start(d) + B**d],  start(0) = B - 1,
                            start(d) = B + B·(B**(d-1) - 1)/(B - 1) for d >= 1 (a multiple of B)
    children of node n:     tree[B·(n - B + 2) : B·(n - B + 2) + B]  (one aligned block; position
                            j of level d has its children at start(d+1) + j·B)
    leaves (level depth):   leaf i at start(depth) + i; n_leaves = B**depth >= capacity, depth >= 1
    size = start(depth) + B**depth; padding leaves hold the identity (0 sum, +inf min) forever.

For B = 32 and 1 M leaves (32**4 = 1,048,576) the depth is 4, the size 1,082,432 floats (4.3 MB),
and a node's 32 float32 children are one 128-byte cache line.

Values are priorities (unitless, >= 0, NaN-free: the sampler cleans TD errors). Float order (the
contract with the torch twin):

* a sum node = its B children converted to float64 and added left to right (child 0 first),
  rounded once to the tree dtype; a min node = the min of its children (exact, order-free);
* the descent keeps the remainder ``rem`` in float64; at each node it walks the children left to
  right: child k is taken iff rem < c_k and c_k > 0 (the first such k), otherwise rem -= c_k
  (float64). If no child is taken (rem >= the node's float64 child sum: rounding, u >= total, or
  NaN) the last child with c_k > 0 is taken and rem := +inf, so every level below also takes its
  last positive child: the leaf is then the rightmost non-empty leaf of that subtree. A zero leaf
  is thus never returned while the root is > 0 (an all-empty tree returns leaf 0).

``descend(tree, u, out, value_out, branch=, depth=)``
    u [S] float64 prefixes in [0, total) → out [S] int64 leaves, value_out [S] float64 their
    values. One launch, BLOCK samples a program, one lane a sample.
``write_leaves(sum_tree, min_tree, indices, values, running_max, branch=, depth=)``
    leaves[indices] := values in both trees, duplicates keep their max (torch's
    ``scatter_reduce_(amax, include_self=False)``): launch 1 stores -inf at the touched leaves,
    launch 2 ``atomic_max``es the values (max is exact and order-free, so deterministic); launch 2
    also ``atomic_max``es max(values) into running_max (0-d, or None).
``rebuild(sum_tree, min_tree, indices | None, branch=, depth=)``
    the touched leaves' ancestors (indices [S] int64), or every node (None), one launch per level
    from the leaves up (the launch boundary orders the levels). A touched parent is recomputed
    from its B children, never accumulated, so duplicates store identical values (no atomics)
    and a partial rebuild leaves the tree bitwise equal to a full one.

Performance model (H200, 1 M leaves, B = 32, depth 4, S = 4096; for bench/bench_replay.py to
check). Descent: per level one dependent 128-byte line per lane (~0.6-1 µs from L2/HBM; the 32
child loads are independent, the 31 after the first hit L1) plus 32 float64 compare/subtract
steps in registers: ~4 µs + one launch. Update: 2 + depth = 6 launches (~2.5 µs each graphed),
each over S lanes on many CTAs. One CTA with barriers (as replay/binary.py does for the binary
tree) was rejected: a level of the 32-ary rebuild reads S·B·2 = 262 K floats (32× the binary
tree's), i.e. ~8 K L1 wavefronts a level on a single SM (~5 µs a level, 20+ µs in all), while
spread over 132 SMs it is ~60 wavefronts an SM and the level costs about its launch. Full
rebuild (after a bulk add): 4.3 MB read over 4 launches, a few µs. Bytes moved are small; all
are latency-bound. The sequential 32-child walk (rather than tl.cumsum / tl.sum) fixes the float
order, which Triton's tree-shaped scans and reductions leave to the compiler.

``is_interpreted()`` says whether Triton runs in the interpreter (TRITON_INTERPRET=1 at import);
there the launchers use one program per call. A leaf of ``foxhunt.kernels``: imports nothing of
ours.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted


def level_start(branch: int, d: int) -> int:
    """Flat offset of level d (0 = root) in the shifted B-ary heap (module docstring)."""
    return branch - 1 if d == 0 else branch + branch * (branch ** (d - 1) - 1) // (branch - 1)


def tree_size(branch: int, depth: int) -> int:
    """Elements of one tree buffer: start(depth) + branch**depth (a multiple of branch)."""
    return level_start(branch, depth) + branch**depth


@triton.jit
def _descend_kernel(tree_p, u_p, out_p, val_p, n, B: tl.constexpr, DEPTH: tl.constexpr, LEAF0: tl.constexpr,
                    BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    rem = tl.load(u_p + offs, mask=valid, other=0.0).to(tl.float64)
    node = tl.full([BLOCK], B - 1, tl.int64)  # the root
    # The levels are a loop, the B children of a level unrolled: unrolling the levels too (B x DEPTH =
    # 128 steps for 1 M leaves) took Triton 53 s to compile (make_ttgir) in a cold H200 process, ~1 s so.
    for _ in range(DEPTH):
        base = B * (node - (B - 2))  # the node's B-aligned child block; always in bounds
        done = offs < 0
        pick = tl.zeros([BLOCK], tl.int64)
        last = tl.zeros([BLOCK], tl.int64)
        for k in tl.static_range(B):
            c = tl.load(tree_p + base + k).to(tl.float64)
            pos = c > 0
            hit = (rem < c) & pos & ~done
            pick = tl.where(hit, k, pick)
            last = tl.where(pos, k, last)
            done = done | hit
            rem = tl.where(done, rem, rem - c)
        # Nothing taken: u at or past this node's mass (rounding, u >= total, NaN): clamp to the
        # last positive child and stay clamped (rem = inf) down to its rightmost positive leaf.
        pick = tl.where(done, pick, last)
        rem = tl.where(done, rem, float("inf"))
        node = base + pick
    tl.store(out_p + offs, node - LEAF0, mask=valid)
    tl.store(val_p + offs, tl.load(tree_p + node).to(tl.float64), mask=valid)


@triton.jit
def _scatter_kernel(s_p, m_p, idx_p, val_p, max_p, n, idx_stride, val_stride, LEAF0,
                    PHASE: tl.constexpr, HAS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    leaf = tl.load(idx_p + offs * idx_stride, mask=m, other=0) + LEAF0
    s_ty = s_p.dtype.element_ty
    m_ty = m_p.dtype.element_ty
    if PHASE == 0:  # -inf first, so the max below keeps the max of the NEW values (include_self=False)
        tl.store(s_p + leaf, tl.full([BLOCK], float("-inf"), s_ty), mask=m)
        tl.store(m_p + leaf, tl.full([BLOCK], float("-inf"), m_ty), mask=m)
    else:
        v = tl.load(val_p + offs * val_stride, mask=m, other=float("-inf")).to(s_ty)
        tl.atomic_max(s_p + leaf, v, mask=m, sem="relaxed")
        tl.atomic_max(m_p + leaf, v.to(m_ty), mask=m, sem="relaxed")
        if HAS_MAX:  # running max priority: max is exact, so the atomics' order does not matter
            mx = tl.max(v, axis=0).to(max_p.dtype.element_ty)
            tl.atomic_max(max_p + tl.zeros([1], tl.int32), tl.full([1], 0, max_p.dtype.element_ty) + mx,
                          sem="relaxed")


@triton.jit
def _level_kernel(s_p, m_p, idx_p, n, idx_stride, shift, parent0, child0,
                  FULL: tl.constexpr, B: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if FULL:  # every node of the level
        j = offs.to(tl.int64)
    else:  # the ancestor, at this level, of each touched leaf (duplicates store the same value)
        j = tl.load(idx_p + offs * idx_stride, mask=m, other=0) >> shift
    base = child0 + j * B
    acc = tl.load(s_p + base, mask=m, other=0.0).to(tl.float64)
    mn = tl.load(m_p + base, mask=m, other=0.0)
    for k in tl.static_range(1, B):  # left to right: the order the torch twin adds in
        acc = acc + tl.load(s_p + base + k, mask=m, other=0.0).to(tl.float64)
        mn = tl.minimum(mn, tl.load(m_p + base + k, mask=m, other=0.0), propagate_nan=tl.PropagateNan.ALL)
    tl.store(s_p + parent0 + j, acc.to(s_p.dtype.element_ty), mask=m)
    tl.store(m_p + parent0 + j, mn, mask=m)


def _block(n: int, block: int) -> int:
    # The interpreter pays per program and per operation: one program covers the whole call.
    return max(16, triton.next_power_of_2(n)) if is_interpreted() else block


def _check_trees(sum_tree: torch.Tensor, min_tree: torch.Tensor, branch: int, depth: int) -> None:
    size = tree_size(branch, depth)
    if branch < 2 or branch & (branch - 1) or depth < 1:
        raise ValueError(f"wide tree: branch must be a power of two >= 2 and depth >= 1, got {branch}, {depth}")
    if sum_tree.shape != (size,) or min_tree.shape != (size,) or not (
            sum_tree.is_contiguous() and min_tree.is_contiguous()):
        raise ValueError(f"wide tree: contiguous [{size}] trees expected, got "
                         f"{list(sum_tree.shape)} / {list(min_tree.shape)}")


def descend(tree: torch.Tensor, u: torch.Tensor, out: torch.Tensor, value_out: torch.Tensor, *, branch: int,
            depth: int, block: int = 128, num_warps: int = 4) -> None:
    """Leaf of each prefix value (module docstring's rule). tree [size] sum tree; u [S] float64;
    out [S] int64 and value_out [S] float64 are written. One launch, no host reads."""
    n = int(u.shape[0])
    if u.dtype != torch.float64 or out.dtype != torch.int64 or value_out.dtype != torch.float64 or not (
            out.shape == u.shape == value_out.shape and out.is_contiguous() and value_out.is_contiguous()):
        raise ValueError("descend: u [S] float64, out [S] int64 and value_out [S] float64 (contiguous) expected")
    if tree.shape != (tree_size(branch, depth),) or not tree.is_contiguous():
        raise ValueError(f"descend: contiguous [{tree_size(branch, depth)}] tree expected, got {list(tree.shape)}")
    if n == 0:
        return
    block = _block(n, block)
    _descend_kernel[(triton.cdiv(n, block),)](
        tree, u.contiguous(), out, value_out, n, B=branch, DEPTH=depth, LEAF0=level_start(branch, depth),
        BLOCK=block, num_warps=num_warps, num_stages=1, enable_fp_fusion=False)


def write_leaves(sum_tree: torch.Tensor, min_tree: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                 running_max: torch.Tensor | None = None, *, branch: int, depth: int, block: int = 256) -> None:
    """Both trees' leaves[indices] := values (duplicates keep the max), no rebuild; running_max
    (0-d) := max(running_max, max(values)). indices [S] int64 in [0, capacity); values [S] (any
    stride, e.g. a stride-0 expand; NaN-free). Two launches."""
    _check_trees(sum_tree, min_tree, branch, depth)
    n = int(indices.shape[0])
    if indices.dtype != torch.int64 or values.shape != indices.shape:
        raise ValueError("write_leaves: indices [S] int64 and values [S] expected")
    if n == 0:
        return
    block = _block(n, block)
    for phase in (0, 1):
        _scatter_kernel[(triton.cdiv(n, block),)](
            sum_tree, min_tree, indices, values, running_max if running_max is not None else sum_tree, n,
            indices.stride(0), values.stride(0), level_start(branch, depth), PHASE=phase,
            HAS_MAX=running_max is not None, BLOCK=block, num_warps=4)


def rebuild(sum_tree: torch.Tensor, min_tree: torch.Tensor, indices: torch.Tensor | None, *, branch: int,
            depth: int, block: int = 128) -> None:
    """Recompute the ancestors of leaves ``indices`` ([S] int64), or every internal node (None),
    level by level from the leaves up: ``depth`` launches. Bitwise the same either way."""
    _check_trees(sum_tree, min_tree, branch, depth)
    log2b = branch.bit_length() - 1
    if indices is not None:
        if indices.dtype != torch.int64 or indices.dim() != 1:
            raise ValueError("rebuild: indices [S] int64 expected")
        if indices.shape[0] == 0:
            return
    for d in range(depth - 1, -1, -1):  # parents at level d, children at level d + 1
        n = branch**d if indices is None else int(indices.shape[0])
        b = _block(n, block)
        _level_kernel[(triton.cdiv(n, b),)](
            sum_tree, min_tree, indices if indices is not None else sum_tree, n,
            indices.stride(0) if indices is not None else 0, log2b * (depth - d),
            level_start(branch, d), level_start(branch, d + 1), FULL=indices is None, B=branch, BLOCK=b,
            num_warps=4, num_stages=1, enable_fp_fusion=False)


__all__ = ["descend", "is_interpreted", "level_start", "rebuild", "tree_size", "write_leaves"]
