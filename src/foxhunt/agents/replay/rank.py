"""Rank-based prioritised replay (Schaul et al. 2016, §3.3, "rank-based variant").

P(i) = (1/rank(i))^alpha / Σ_{r=1..N} (1/r)^alpha, rank 1 = largest |δ|, N = filled slots.

* Raw priorities |δ| live in ``priorities`` ([C] float32, -inf for empty slots). Every
  ``refresh_every`` calls of ``update_priorities`` (K, configurable) a full **stable descending
  sort** on the device refreshes ``order`` ([C] int64: order[r-1] = slot of rank r; empty slots
  sort last, in slot order). Between sorts the ranks are stale: a slot keeps its rank although its
  |δ| changed — the paper's own approximation (it re-sorts its heap only periodically). A slot
  written between sorts inherits the rank of the slot position it occupies: while the buffer
  fills, the next empty slots are exactly order[S..] (S = size at the last sort), so new
  transitions rank last until the next sort; after a wrap they take the overwritten slot's rank.
  New transitions' priority is |δ| from ``on_add`` or the max seen so far (rank 1 after the next
  sort, as in the paper). ``refresh()`` may also be called directly (it is capturable).
* Sampling by inverse CDF over ranks: ``cdf`` ([C] float64) holds the running sums of r^-alpha
  for r = 1..C, computed once; the CDF "for the current size" is its prefix up to N, whose total
  cdf[N-1] is gathered with the device scalar ``size_t`` (no host read, no new graph as the
  buffer fills). B stratified prefixes in [0, cdf[N-1]) → ``searchsorted`` → ranks → ``order``.
* IS weights, as in the paper: w = (N·P(i))^-β / max_k w_k with the max over the buffer, which
  is the weight of rank N: w_r = (r / N)^(alpha·β) ∈ (0, 1]. ``weight_norm="batch"`` normalises
  by the batch's largest rank instead: w_r = (r / r_max)^(alpha·β).

CUDA graphs: with ``refresh_every = K > 1`` the host decides whether a call sorts, so a captured
``update_priorities`` either always or never sorts. Capture with ``refresh_every=1`` (sort every
update), or with ``refresh_every=0`` (never automatically) and replay a captured ``refresh()``
every K steps.
"""

from __future__ import annotations

import torch

from foxhunt.agents.replay.base import SamplerBase, clean_abs
from foxhunt.agents.replay.storage import ReplayStorage


class RankPER(SamplerBase):
    """Rank-based PER on the device; see the module docstring.

    storage: the ReplayStorage whose slots are sampled. alpha: rank exponent. beta: IS exponent.
    refresh_every: K, re-sort after every K-th ``update_priorities`` (0: only on ``refresh()``).
    weight_norm: "buffer" (paper) or "batch". seed: the device generator's seed.
    """

    def __init__(
        self,
        storage: ReplayStorage,
        alpha: float = 0.7,
        beta: float = 0.5,
        *,
        refresh_every: int = 1,
        weight_norm: str = "buffer",
        seed: int = 0,
    ) -> None:
        super().__init__(storage, beta=beta, seed=seed, weight_norm=weight_norm)
        if alpha < 0:
            raise ValueError(f"RankPER: alpha must be >= 0, got {alpha}")
        if refresh_every < 0:
            raise ValueError(f"RankPER: refresh_every must be >= 0, got {refresh_every}")
        self.alpha = float(alpha)
        self.refresh_every = int(refresh_every)
        self.n_updates = 0
        """Host count of update_priorities calls since the last clear."""
        c, dev = self.capacity, self.device
        self.priorities = torch.full((c,), float("-inf"), dtype=torch.float32, device=dev)
        self.order = torch.arange(c, dtype=torch.int64, device=dev)
        self._sorted = torch.empty(c, dtype=torch.float32, device=dev)
        ranks = torch.arange(1, c + 1, dtype=torch.float64, device=dev)
        self.cdf = torch.cumsum(ranks.pow(-self.alpha), 0)
        """[C] float64: cdf[k] = Σ_{r=1..k+1} r^-alpha."""
        self.max_priority = torch.ones((), dtype=torch.float32, device=dev)

    # ------------------------------------------------------------------ priorities
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"beta": self.beta, "max_priority": self.max_priority, "priorities": self.priorities, "order": self.order}

    def _host_counters(self) -> dict[str, int]:
        return {"n_updates": self.n_updates}

    def refresh(self) -> None:
        """Re-rank: stable descending sort of the priorities into ``order`` (device, no host read)."""
        torch.sort(self.priorities, descending=True, stable=True, out=(self._sorted, self.order))

    def _write(self, indices: torch.Tensor, prio: torch.Tensor) -> None:
        self.priorities.scatter_reduce_(0, indices, prio, reduce="amax", include_self=False)
        torch.maximum(self.max_priority, prio.max(), out=self.max_priority)

    def on_add(self, slots: torch.Tensor, td_abs: torch.Tensor | None = None) -> None:
        """New transitions at ``slots``: priority |δ| from ``td_abs`` or the max seen so far.
        Their rank is refreshed by the next sort (see the module docstring)."""
        prio = self.max_priority.expand(slots.shape[0]) if td_abs is None else clean_abs(td_abs)
        self._write(slots, prio)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Set |δ| at ``indices`` (duplicates keep the max); re-sort every ``refresh_every`` calls."""
        self._write(indices, clean_abs(td_errors))
        self.n_updates += 1
        if self.refresh_every and self.n_updates % self.refresh_every == 0:
            self.refresh()

    def clear(self) -> None:
        """Empty: every priority -inf, identity order, max priority 1, update count 0."""
        self.priorities.fill_(float("-inf"))
        torch.arange(self.capacity, dtype=torch.int64, device=self.device, out=self.order)
        self.max_priority.fill_(1.0)
        self.n_updates = 0

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified inverse-CDF sample over ranks: (indices [B] int64, IS weights [B] float32)."""
        self._check_batch(batch_size)
        idx_out, w_out = self.outputs(batch_size)
        n = self.storage.size_t.view(1)  # [1] int64, >= 1
        total = self.cdf.index_select(0, n - 1)  # [1] float64 = Σ_{r<=N} r^-alpha
        r0 = torch.searchsorted(self.cdf, self.stratified(batch_size, total), right=True)
        r0 = torch.minimum(r0, n - 1)  # rounding at the very top of the last segment
        torch.index_select(self.order, 0, r0, out=idx_out)
        rank = (r0 + 1).to(torch.float64)
        norm = n.to(torch.float64) if self.weight_norm == "buffer" else rank.max()
        exponent = self.beta.to(torch.float64) * self.alpha
        w_out.copy_(torch.pow(rank / norm, exponent))
        return idx_out, w_out
