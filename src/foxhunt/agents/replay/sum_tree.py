"""A segment tree (sum or min) over a power-of-two number of leaves, as one flat device array.

Layout (a heap, i.e. the levels concatenated)::

    tree: [2 * n_leaves]            tree[0] unused (holds the identity)
    level d (0 = root .. depth):    tree[2**d : 2**(d+1)]
    leaves (level depth):           tree[n_leaves : 2 * n_leaves], leaf i at n_leaves + i
    children of node n:             2n and 2n + 1 = row n of tree.view(-1, 2)

``n_leaves`` is the smallest power of two >= capacity; leaves past ``capacity`` hold the identity
(0 for sum, +inf for min) forever.

Every operation is a fixed-shape tensor program with a Python loop over the (host-known) levels:
no host reads, no data-dependent shapes, no atomics in the sums, so it can be captured in a CUDA
graph and gives the same bits on every run.

* Leaf writes reduce duplicate indices by ``amax`` (a scatter-max: whichever order the writes land
  in, the result is the maximum), so a batch that names one leaf twice is deterministic.
* ``rebuild_full`` recomputes every level from the level below as one vector op (O(n_leaves)).
* ``find_prefix`` (sampling) resolves the top ``search_level`` levels with one ``searchsorted``
  over the running sum of that level, then descends the rest level by level in lockstep.
* ``rebuild_partial(indices)`` recomputes only the ancestors of the touched leaves, level by level:
  a parent is *recomputed* from both of its children (never accumulated), so two touched leaves
  sharing an ancestor scatter the same value to it. Because both paths evaluate the same float
  expression ``left + right`` (or ``min(left, right)``) on the same children, a partial update
  leaves the tree bitwise equal to a full rebuild.

``backend="fused"`` runs ``find_prefix`` and ``update`` (assign + rebuild_partial) as Triton kernels
(``foxhunt.kernels.replay.binary``: one launch each instead of several small kernels per level),
bitwise equal to this torch code, which stays the reference. It needs CUDA, or the Triton
interpreter (TRITON_INTERPRET=1 before Triton is imported) on a CPU; otherwise a ValueError says why.
(One caveat shared by both paths: with search_level > 0 on CUDA the float64 running sum comes from
``torch.cumsum``, which torch documents as nondeterministic for floating CUDA tensors; a prefix
within an ulp of a segment boundary can then land on either side from run to run. search_level=0
is deterministic.)
"""

from __future__ import annotations

from typing import Literal

import torch

from foxhunt.agents.replay.fused import check_backend
from foxhunt.agents.replay.fused import kernels as fused_kernels
from foxhunt.kernels.rules.prefix import next_positive

Op = Literal["sum", "min"]


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


class SegmentTree:
    """Sum or min tree over ``capacity`` leaves; see the module docstring for the layout.

    capacity: number of usable leaves (>= 1).
    op: "sum" (prefix-sum descent for proportional sampling) or "min" (minimum priority).
    dtype: float32 (default) or float64.
    search_level: levels resolved by one searchsorted at the top of ``find_prefix`` (0 = none).
    backend: "torch" (default) or "fused": ``find_prefix`` and ``update`` as Triton kernels (module
    docstring; ValueError if unavailable).
    """

    def __init__(
        self,
        capacity: int,
        op: Op = "sum",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        search_level: int = 16,
        backend: str = "torch",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"SegmentTree: capacity must be >= 1, got {capacity}")
        if op not in ("sum", "min"):
            raise ValueError(f"SegmentTree: op must be 'sum' or 'min', got {op!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"SegmentTree: dtype must be float32 or float64, got {dtype}")
        self.capacity = int(capacity)
        self.op: Op = op
        self.dtype = dtype
        self.device = torch.device(device)
        self.n_leaves = next_pow2(capacity)
        self.depth = self.n_leaves.bit_length() - 1
        if search_level < 0:
            raise ValueError(f"SegmentTree: search_level must be >= 0, got {search_level}")
        self.search_level = int(search_level)
        self.identity = 0.0 if op == "sum" else float("inf")
        self.tree = torch.full((2 * self.n_leaves,), self.identity, dtype=dtype, device=self.device)
        self.pairs = self.tree.view(-1, 2)
        """[n_leaves, 2] view: row n holds the two children of node n."""
        self.levels = [self.tree[1 << d : 2 << d] for d in range(self.depth + 1)]
        """levels[d]: [2**d] view of level d (levels[depth] are the leaves)."""
        self.backend = check_backend(backend, "SegmentTree")
        self._kernels = fused_kernels(self.device, False, "SegmentTree") if self.backend == "fused" else None

    # ------------------------------------------------------------------ views
    @property
    def leaves(self) -> torch.Tensor:
        """[n_leaves] view of the leaves (the first ``capacity`` are usable)."""
        return self.levels[self.depth]

    @property
    def root(self) -> torch.Tensor:
        """[1] view of the root: the total (sum tree) or the minimum (min tree)."""
        return self.tree[1:2]

    def clear(self) -> None:
        """Every node back to the identity."""
        self.tree.fill_(self.identity)

    # ------------------------------------------------------------------ updates
    def _combine(self, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if self.op == "sum":
            return torch.add(left, right, out=out) if out is not None else left + right
        return torch.minimum(left, right, out=out) if out is not None else torch.minimum(left, right)

    def assign(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Write leaves ``indices`` ([B] int64, in [0, capacity)) := ``values`` ([B]); no rebuild.

        Duplicate indices keep the maximum of their values (deterministic on every device).
        """
        self.leaves.scatter_reduce_(0, indices, values.to(self.dtype), reduce="amax", include_self=False)

    def rebuild_full(self) -> None:
        """Recompute every internal level from its children, leaves upwards. O(n_leaves)."""
        for d in range(self.depth - 1, -1, -1):
            child = self.levels[d + 1].view(-1, 2)
            self._combine(child[:, 0], child[:, 1], out=self.levels[d])

    def rebuild_partial(self, indices: torch.Tensor) -> None:
        """Recompute the ancestors of leaves ``indices`` ([B] int64), level by level. O(B · depth).

        At each level every touched parent is recomputed from its two (already final) children
        and scattered; duplicates scatter identical values, so the result is deterministic.
        """
        node = indices + self.n_leaves
        for _ in range(self.depth):
            node = torch.bitwise_right_shift(node, 1)
            kids = self.pairs.index_select(0, node)  # [B, 2]
            self.tree.index_put_((node,), self._combine(kids[:, 0], kids[:, 1]))

    def update(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """``assign`` then ``rebuild_partial``: leaves ``indices`` ([B] int64) := ``values`` ([B],
        duplicates keep the max) and their ancestors recomputed. Fused: one kernel, same bits."""
        if self._kernels is not None:
            self._kernels.write_rebuild(self.tree, indices, values, depth=self.depth, op=self.op)
            return
        self.assign(indices, values)
        self.rebuild_partial(indices)

    # ------------------------------------------------------------------ sampling (sum tree)
    def find_prefix(
        self,
        prefix: torch.Tensor,
        search_level: int | None = None,
        *,
        out: torch.Tensor | None = None,
        value_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Batched descent: for each ``prefix`` value ([B], in [0, total)) the leaf i with
        cumsum(leaves)[i-1] <= prefix < cumsum(leaves)[i]. Returns [B] int64.

        The remainder is kept in float64 whatever the tree dtype. All B values descend in
        lockstep, one level per step: go right iff the remainder is >= the left child's sum *and*
        the right child's sum is > 0. The second condition keeps the descent inside positive mass
        when rounding pushes a prefix to (or past) a node's total, so a zero-priority leaf (an
        empty slot) is never returned while the root is > 0.

        Rounding never sends a prefix to an empty slot: a node of the searchsorted level with zero
        mass is replaced by the next node with mass (CUDA's float64 cumsum is a parallel scan, so a
        zero node's running sum can exceed its left neighbour's by an ulp: on the H200 a prefix at that
        boundary found a zero leaf), and the descent never enters an empty left child.

        search_level s (default ``self.search_level``): the top s levels are resolved at once by
        ``searchsorted`` over the float64 running sum of level s (2**s nodes, one small cumsum),
        and the binary descent covers the remaining depth - s levels. Every level costs a fixed
        handful of small kernels, so on a GPU this cuts the sample time roughly by depth/(depth-s);
        s = 0 is the plain descent from the root. Both give the reference leaf (up to rounding at
        segment boundaries).

        out ([B] int64) receives the leaves and is returned when given; value_out ([B] float64)
        receives their values. Fused: one Triton kernel after the same float64 running sum of
        level s, bitwise the same leaves (``foxhunt.kernels.replay.binary``).
        """
        if self.op != "sum":
            raise ValueError("find_prefix needs a sum tree")
        s = min(self.depth, self.search_level if search_level is None else int(search_level))
        if self._kernels is not None:
            if out is None:
                out = torch.empty(prefix.shape, dtype=torch.int64, device=self.device)
            u = prefix if prefix.dtype == torch.float64 else prefix.to(torch.float64)
            self._kernels.find_prefix(self.tree, u, out, depth=self.depth, search_level=s, value_out=value_out)
            return out
        u = prefix.to(torch.float64, copy=True)
        if s > 0:
            level = self.levels[s].to(torch.float64)  # [2**s]
            incl = torch.cumsum(level, 0)
            j = torch.searchsorted(incl, u, right=True)  # first node whose running sum exceeds u
            last = torch.searchsorted(incl, incl[-1:], right=False)  # last node with positive mass
            j = torch.minimum(j, last)  # u >= the level's total (rounding): stay in positive mass
            # a zero node can own an ulp of a parallel scan's sum (capped: an all-zero level has no next node)
            j = next_positive(level).index_select(0, j).clamp_max_(level.shape[0] - 1)
            u.sub_((incl - level).index_select(0, j))
            node = j + (1 << s)
        else:
            node = torch.ones(prefix.shape, dtype=torch.int64, device=self.device)
        for _ in range(self.depth - s):
            kids = self.pairs.index_select(0, node)  # [B, 2]: the children of node
            left = kids[:, 0]
            # right iff u reaches the left sum or the left child is empty (a remainder pushed below 0
            # by rounding must not enter it), and the right child has mass
            go_right = torch.ge(u, left).logical_or_(left <= 0).logical_and_(kids[:, 1] > 0)
            u.sub_(left * go_right)
            node = torch.add(go_right, node, alpha=2)  # 2·node + go_right
        leaf = node - self.n_leaves
        if value_out is not None:
            value_out.copy_(self.leaves.index_select(0, leaf))
        if out is None:
            return leaf
        return out.copy_(leaf)
