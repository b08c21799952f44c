"""Proportional prioritised replay over B-ary (default 32-ary) sum / min trees: ``WidePER``.

The same sampler as ``ProportionalPER`` (p_i = (|δ_i| + eps)^alpha, P(i) = p_i / Σp, stratified
draws, IS weights w_i = (p_min / p_i)^β with p_min over the buffer (min tree) or the batch, new
transitions at the max priority seen or at (|δ|+eps)^alpha, duplicates in one update keep the max,
non-finite δ count as 0, beta a device scalar), but its trees have 32 children a node instead of
2: 1 M slots need 4 levels instead of 20, so a sample is 4 dependent 128-byte reads per draw and
an update rebuilds 4 levels (the binary trees' 20 dependent steps dominated the PER train step).

Layout, float order and the descent's rule: ``foxhunt.kernels.replay.wide`` (the module
docstring). In short: level d of the tree starts at start(d) (the root at B - 1, every sibling
block B-aligned); a sum node is its B children added in float64 left to right, rounded once; the
descent walks a node's children left to right with a float64 remainder, taking the first child
with rem < c_k and c_k > 0, else clamping to the last positive child (and every lower level's).

Backends: the Triton kernels (``backend="fused"``: CUDA, or TRITON_INTERPRET=1 on a CPU) or this
module's plain-torch twin (``backend="torch"``, the default) of the same layout and float order:
the plan's ``replay`` choice (``foxhunt.accel``). The two give bitwise the same leaves, trees and
weights. Everything is fixed-shape with no host reads: sample + update can be captured in a CUDA
graph (register ``sampler.generator`` with the graph).

State: ``sum_tree.tree``, ``min_tree.tree`` and ``max_priority`` (the names ProportionalPER uses, so
the trainer's checkpoint saves and restores them unchanged).

Bulk writes (``on_add`` of a collection round) rebuild every level when that reads fewer nodes
than rebuilding the touched ancestors: n_leaves·B/(B-1) < S·B·depth (host-known sizes only). Both
rebuilds give the same bits.
"""

from __future__ import annotations

from typing import Literal

import torch

from foxhunt.agents.replay.base import TreePER
from foxhunt.agents.replay.fused import check_backend
from foxhunt.agents.replay.fused import kernels as fused_kernels
from foxhunt.agents.replay.storage import ReplayStorage

Op = Literal["sum", "min"]


def _level_start(branch: int, d: int) -> int:
    """Flat offset of level d (kept equal to ``kernels.replay.wide.level_start``; the kernels are optional)."""
    return branch - 1 if d == 0 else branch + branch * (branch ** (d - 1) - 1) // (branch - 1)


class WideTree:
    """One B-ary tree (sum or min) over ``capacity`` leaves, as one flat device buffer ``tree``.

    capacity >= 1; branch: B, a power of two >= 2; depth = max(1, ceil(log_B capacity)).
    Views: ``levels[d]`` [B**d], ``leaves`` [B**depth] (first ``capacity`` usable), ``root`` [1],
    ``rows`` [size / B, B] (row r = elements r·B .. r·B + B - 1: the child block of node r + B - 2).
    """

    def __init__(self, capacity: int, op: Op = "sum", branch: int = 32, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        if capacity < 1:
            raise ValueError(f"WideTree: capacity must be >= 1, got {capacity}")
        if branch < 2 or branch & (branch - 1):
            raise ValueError(f"WideTree: branch must be a power of two >= 2, got {branch}")
        if op not in ("sum", "min") or dtype not in (torch.float32, torch.float64):
            raise ValueError(f"WideTree: op 'sum'|'min' and dtype float32|float64 expected, got {op!r}, {dtype}")
        self.capacity, self.op, self.branch, self.dtype = int(capacity), op, int(branch), dtype
        self.device = torch.device(device)
        self.depth = 1
        while branch**self.depth < capacity:
            self.depth += 1
        self.n_leaves = branch**self.depth
        self.starts = [_level_start(branch, d) for d in range(self.depth + 1)]
        self.size = self.starts[-1] + self.n_leaves
        self.identity = 0.0 if op == "sum" else float("inf")
        self.tree = torch.full((self.size,), self.identity, dtype=dtype, device=self.device)
        self.rows = self.tree.view(-1, branch)
        self.levels = [self.tree[s: s + branch**d] for d, s in enumerate(self.starts)]

    @property
    def leaves(self) -> torch.Tensor:
        return self.levels[self.depth]

    @property
    def root(self) -> torch.Tensor:
        """[1] view: Σ (sum tree) or min (min tree) of the leaves."""
        return self.levels[0]

    def clear(self) -> None:
        self.tree.fill_(self.identity)


# ---------------------------------------------------------------------------------------------- torch twin
def _combine_rows(kids: torch.Tensor, op: Op) -> torch.Tensor:
    """[P, B] children → [P] parents: float64 left-to-right sum rounded once, or the min."""
    if op == "min":
        return kids.amin(1)
    acc = kids[:, 0].to(torch.float64)
    for k in range(1, kids.shape[1]):  # the kernels' order (a cumsum/sum would leave it to torch)
        acc = acc + kids[:, k].to(torch.float64)
    return acc.to(kids.dtype)


def write_leaves_torch(trees: tuple[WideTree, WideTree], indices: torch.Tensor, values: torch.Tensor,
                       running_max: torch.Tensor | None = None) -> None:
    """Leaves[indices] := values in both trees (duplicates keep the max); running_max (0-d) := max."""
    for t in trees:
        t.leaves.scatter_reduce_(0, indices, values.to(t.dtype), reduce="amax", include_self=False)
    if running_max is not None:
        torch.maximum(running_max, values.max().to(running_max.dtype), out=running_max)


def rebuild_torch(trees: tuple[WideTree, WideTree], indices: torch.Tensor | None) -> None:
    """The touched leaves' ancestors ([S] int64 leaf indices) or every node (None), leaves up."""
    t0 = trees[0]
    b, log2b = t0.branch, t0.branch.bit_length() - 1
    for d in range(t0.depth - 1, -1, -1):
        for t in trees:
            kids_row0 = t.starts[d + 1] // b  # row of the level's first child block
            if indices is None:
                rows = t.rows[kids_row0: kids_row0 + b**d]
                t.levels[d].copy_(_combine_rows(rows, t.op))
            else:
                j = torch.bitwise_right_shift(indices, log2b * (t0.depth - d))
                rows = t.rows.index_select(0, j + kids_row0)
                t.tree.index_put_((j + t.starts[d],), _combine_rows(rows, t.op))


def descend_torch(tree: WideTree, u: torch.Tensor, out: torch.Tensor, value_out: torch.Tensor) -> None:
    """The kernels' descent (rule in the module docstring), B vector steps a level."""
    b = tree.branch
    rem = u.to(torch.float64, copy=True)
    node = torch.full(u.shape, b - 1, dtype=torch.int64, device=u.device)
    inf = torch.full((), float("inf"), dtype=torch.float64, device=u.device)
    for _ in range(tree.depth):
        row = node - (b - 2)  # child block of node = rows[row]
        kids = tree.rows.index_select(0, row).to(torch.float64)  # [S, B]
        done = torch.zeros(u.shape, dtype=torch.bool, device=u.device)
        pick = torch.zeros_like(node)
        last = torch.zeros_like(node)
        for k in range(b):
            c = kids[:, k]
            pos = c > 0
            hit = (rem < c) & pos & ~done
            pick = torch.where(hit, k, pick)
            last = torch.where(pos, k, last)
            done = done | hit
            rem = torch.where(done, rem, rem - c)
        pick = torch.where(done, pick, last)
        rem = torch.where(done, rem, inf)
        node = row * b + pick
    leaf = node - tree.starts[-1]
    out.copy_(leaf)
    value_out.copy_(tree.tree.index_select(0, node))


# ---------------------------------------------------------------------------------------------- sampler
class WidePER(TreePER):
    """Proportional PER on B-ary trees; see the module docstring. Same arguments as
    ``ProportionalPER`` where they apply (alpha, beta, eps, weight_norm, dtype, seed), plus
    branch (B, default 32) and backend ("torch" | "fused"; the plan's ``replay`` choice)."""

    def __init__(
        self,
        storage: ReplayStorage,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        *,
        weight_norm: str = "buffer",
        dtype: torch.dtype = torch.float32,
        branch: int = 32,
        seed: int = 0,
        backend: str = "torch",
    ) -> None:
        super().__init__(storage, beta=beta, seed=seed, weight_norm=weight_norm)
        self.backend = check_backend(backend, "WidePER")
        self._k = fused_kernels(self.device, True, "WidePER") if self.backend == "fused" else None
        self.sum_tree = WideTree(self.capacity, "sum", branch, dtype, self.device)
        self.min_tree = WideTree(self.capacity, "min", branch, dtype, self.device)
        self.branch, self.depth = self.sum_tree.branch, self.sum_tree.depth
        self._init_priorities(alpha, eps, dtype)
        self._values: dict[int, torch.Tensor] = {}

    # ------------------------------------------------------------------ priorities
    def full_rebuild_pays(self, n: int) -> bool:
        """Whether rebuilding every level reads fewer children than the ancestors of n writes."""
        b = self.branch
        return self.sum_tree.n_leaves * b < n * b * self.depth * (b - 1)

    def write_priorities(self, indices: torch.Tensor, prio: torch.Tensor) -> None:
        """Leaves ``indices`` ([S] int64) := ``prio`` ([S], duplicates keep the max) in both trees,
        their ancestors (or every node, for bulk writes) rebuilt, max priority updated."""
        n = int(indices.shape[0])
        if n == 0:
            return
        full = self.full_rebuild_pays(n)
        trees = (self.sum_tree, self.min_tree)
        if self._k is not None:
            kw = dict(branch=self.branch, depth=self.depth)
            self._k.write_leaves(self.sum_tree.tree, self.min_tree.tree, indices, prio, self.max_priority, **kw)
            self._k.rebuild(self.sum_tree.tree, self.min_tree.tree, None if full else indices, **kw)
            return
        write_leaves_torch(trees, indices, prio, self.max_priority)
        rebuild_torch(trees, None if full else indices)

    # ------------------------------------------------------------------ sampling
    def descend(self, u: torch.Tensor, out: torch.Tensor, value_out: torch.Tensor) -> None:
        """Leaves of prefixes ``u`` ([S] float64) into out [S] int64, their priorities into value_out [S] f64."""
        if self._k is not None:
            self._k.descend(self.sum_tree.tree, u, out, value_out, branch=self.branch, depth=self.depth)
        else:
            descend_torch(self.sum_tree, u, out, value_out)

    def sample(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified proportional sample: (indices [S] int64, IS weights [S] float32), written into
        preallocated buffers (overwritten by the next sample of this size)."""
        self._check_batch(batch_size)
        idx_out, w_out = self.outputs(batch_size)
        p = self._values.get(batch_size)
        if p is None:
            p = self._values[batch_size] = torch.empty(batch_size, dtype=torch.float64, device=self.device)
        self.descend(self.stratified(batch_size, self.total), idx_out, p)
        self.is_weights(p, w_out)
        return idx_out, w_out


__all__ = ["WidePER", "WideTree", "descend_torch", "rebuild_torch", "write_leaves_torch"]
