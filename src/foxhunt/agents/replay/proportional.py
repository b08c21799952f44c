"""Proportional prioritised replay (Schaul et al. 2016, "Prioritized Experience Replay", §3.3).

Priority of transition i: p_i = (|δ_i| + eps)^alpha; sampling probability P(i) = p_i / Σ_k p_k.

* **Sum tree** (``SegmentTree``, op "sum") over the slots: a flat array of levels on the device.
  Sampling is stratified: the total is cut into B equal segments and one prefix value is drawn in
  each; all B prefixes descend the tree in lockstep, one level per step (``find_prefix``). The top
  ``search_level`` levels (default 16: 65,536 nodes) are resolved by one ``searchsorted`` over the
  running sum of that level, which removes most of the per-level kernel launches on a GPU (each
  binary level costs ~19 µs at batch 4096 on an H200, graphed: a 1 M-slot sample takes ~145 µs
  with the default against ~440 µs descending all 20 levels); ``search_level=0`` descends from
  the root.
* **IS weights** w_i = (N·P(i))^-β / max_k w_k. Following the paper (and its reference code) the
  max is over the *whole buffer*: max_k w_k = (N·P_min)^-β with P_min from a **min tree** over
  the same leaves (exact, updated with the same level-wise rebuild, unlike a running min that
  would go stale when the smallest priority grows). N and Σp cancel:
  w_i = (p_min / p_i)^β, so the weights lie in (0, 1]. ``weight_norm="batch"`` divides by the
  max over the sampled batch instead: w_i = (min_batch p / p_i)^β.
* **Updates** write leaves with duplicates reduced by max (deterministic), then rebuild either
  the ancestors of the touched leaves only (``rebuild="partial"``, O(B·depth): 3 small kernels a
  level) or every level (``rebuild="full"``, O(capacity): 1 whole-level kernel a level). No
  atomics in the sums; both give bitwise the same tree. ``"auto"`` (default) picks full on CUDA,
  where a level of a million nodes costs about one launch (measured faster than partial at 1 M
  slots, batch 4096, see bench/bench_replay.py), and partial elsewhere.
* **New transitions** get (|δ|+eps)^alpha when the collector passes |δ| to ``on_add``, else the
  largest priority seen so far (``max_priority``, a device scalar starting at 1, as in the paper).
* ``beta`` is a device scalar (``set_beta`` anneals it in place); alpha and eps are fixed.

* **Fused** (``backend="fused"``; default "torch"): sampling's descent and the update's leaf writes + both trees'
  ancestor rebuilds + the max-priority update run as Triton kernels (one launch each,
  ``foxhunt.kernels.replay.binary``) instead of ~80 small torch kernels at 1 M slots; the
  samples, weights and trees are bitwise the same as this torch code's (``rebuild`` is then moot:
  both rebuilds give the same bits). CUDA, or TRITON_INTERPRET=1 on a CPU; else a ValueError.

Numerics: the tree is float32 by default (``dtype=torch.float64`` is offered). Prefix values and
the descent's running remainder are float64 regardless, so the position inside the tree keeps
full resolution; what float32 costs is the rounding of the stored sums (relative 2^-24 per node),
whose mismatch falls on the rightmost leaf of a subtree. A non-finite TD error counts as 0.
"""

from __future__ import annotations

from typing import Literal

import torch

from foxhunt.agents.replay.base import TreePER
from foxhunt.agents.replay.storage import ReplayStorage
from foxhunt.agents.replay.fused import check_backend
from foxhunt.agents.replay.fused import kernels as fused_kernels
from foxhunt.agents.replay.sum_tree import SegmentTree


class ProportionalPER(TreePER):
    """Proportional PER on the device; see the module docstring.

    storage: the ReplayStorage whose slots are sampled (capacity and device come from it).
    alpha: priority exponent (0 = uniform). beta: IS exponent, initial value. eps: added to |δ|.
    weight_norm: "buffer" (paper) or "batch". rebuild: "auto", "partial" or "full".
    dtype: tree dtype (float32 or float64). search_level: see ``SegmentTree.find_prefix``.
    seed: the device generator's seed. backend: "torch" (default) or "fused" (Triton trees, module
    docstring): the plan's ``replay`` choice.
    """

    def __init__(
        self,
        storage: ReplayStorage,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        *,
        weight_norm: str = "buffer",
        rebuild: Literal["auto", "partial", "full"] = "auto",
        dtype: torch.dtype = torch.float32,
        search_level: int = 16,
        seed: int = 0,
        backend: str = "torch",
    ) -> None:
        super().__init__(storage, beta=beta, seed=seed, weight_norm=weight_norm)
        if rebuild not in ("auto", "partial", "full"):
            raise ValueError(f"ProportionalPER: rebuild must be 'auto', 'partial' or 'full', got {rebuild!r}")
        if rebuild == "auto":
            rebuild = "full" if self.device.type == "cuda" else "partial"
        self.rebuild = rebuild
        self.backend = check_backend(backend, "ProportionalPER")
        self._kernels = fused_kernels(self.device, False, "ProportionalPER") if self.backend == "fused" else None
        self.sum_tree = SegmentTree(self.capacity, "sum", dtype, self.device, search_level, backend=self.backend)
        self.min_tree = SegmentTree(self.capacity, "min", dtype, self.device, backend=self.backend)
        self._init_priorities(alpha, eps, dtype)

    # ------------------------------------------------------------------ priorities
    def write_priorities(self, indices: torch.Tensor, prio: torch.Tensor) -> None:
        """Leaves ``indices`` := ``prio`` (duplicates keep the max), both trees rebuilt, max updated."""
        if self._kernels is not None:  # both trees and max_priority in one launch, the same bits
            self._kernels.write_rebuild(self.sum_tree.tree, indices, prio, depth=self.sum_tree.depth, op="sum",
                                        other=self.min_tree.tree, other_op="min", running_max=self.max_priority)
            return
        self.sum_tree.assign(indices, prio)
        self.min_tree.assign(indices, prio)
        if self.rebuild == "partial":
            self.sum_tree.rebuild_partial(indices)
            self.min_tree.rebuild_partial(indices)
        else:
            self.sum_tree.rebuild_full()
            self.min_tree.rebuild_full()
        torch.maximum(self.max_priority, prio.max(), out=self.max_priority)

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified proportional sample: (indices [B] int64, IS weights [B] float32).

        Outputs are preallocated buffers (overwritten by the next sample of this size).
        """
        self._check_batch(batch_size)
        idx_out, w_out = self.outputs(batch_size)
        if self._kernels is not None:  # the kernel writes the leaves and their priorities directly
            p = torch.empty(batch_size, dtype=torch.float64, device=self.device)
            self.sum_tree.find_prefix(self.stratified(batch_size, self.total), out=idx_out, value_out=p)
        else:
            leaf = self.sum_tree.find_prefix(self.stratified(batch_size, self.total))
            idx_out.copy_(leaf)
            p = self.sum_tree.leaves.index_select(0, leaf).to(torch.float64)
        self.is_weights(p, w_out)
        return idx_out, w_out
