"""What every sampler shares: the device generator, preallocated outputs, beta as a device scalar.

The sampler protocol (uniform, proportional PER, rank PER)::

    on_add(slots, td_abs=None)          new transitions were written at ``slots`` ([N] int64)
    sample(batch_size) -> (indices, weights)   [B] int64 slots, [B] float32 IS weights
    update_priorities(indices, td_errors)      after a learning step ([B] int64, [B] float)
    clear()                             a new fold (clear the storage too)

``sample`` writes into buffers preallocated per batch size and returns them: the next ``sample``
of the same size overwrites them (copy if you keep them). Every method is a fixed-shape device
program with no host reads, so a learner can capture sample + update in a CUDA graph; the
randomness comes from ``self.generator`` (a ``torch.Generator`` on the device; when capturing,
register it with the graph: ``graph.register_generator_state(sampler.generator)``).
"""

from __future__ import annotations

import torch

from foxhunt.agents.replay.storage import ReplayStorage
from foxhunt.state import pack, unpack

WEIGHT_NORMS = ("buffer", "batch")


class SamplerBase:
    """Base of the samplers: storage handle, generator, per-B outputs, ``beta`` (0-d device float32)."""

    def __init__(self, storage: ReplayStorage, beta: float = 1.0, seed: int = 0, weight_norm: str = "buffer") -> None:
        if weight_norm not in WEIGHT_NORMS:
            raise ValueError(f"{type(self).__name__}: weight_norm must be one of {WEIGHT_NORMS}, got {weight_norm!r}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"{type(self).__name__}: beta must be in [0, 1], got {beta}")
        self.storage = storage
        self.capacity = storage.capacity
        self.device = storage.device
        self.weight_norm = weight_norm
        self.seed = int(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed)
        self.beta = torch.full((), float(beta), dtype=torch.float32, device=self.device)
        """IS exponent, a device scalar: anneal it in place with ``set_beta`` (graphs stay valid)."""
        self._out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._strata: dict[int, torch.Tensor] = {}

    def set_beta(self, beta: float) -> None:
        """Set the IS exponent in place (no new tensor: captured graphs read the new value)."""
        self.beta.fill_(float(beta))

    def reseed(self, seed: int) -> None:
        """Restart the sampler's random stream from ``seed``."""
        self.seed = int(seed)
        self.generator.manual_seed(self.seed)

    def outputs(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The preallocated (indices [B] int64, weights [B] float32) of batch size B."""
        out = self._out.get(batch_size)
        if out is None:
            out = (
                torch.zeros(batch_size, dtype=torch.int64, device=self.device),
                torch.ones(batch_size, dtype=torch.float32, device=self.device),
            )
            self._out[batch_size] = out
        return out

    def stratified(self, batch_size: int, total: torch.Tensor) -> torch.Tensor:
        """[B] float64 prefix values, one uniform draw in each of B equal segments of [0, total).

        u_j = (j + U_j) · total / B, computed as U_j·(total/B) + j·(total/B) in float64 so that
        the position inside a segment keeps full resolution. ``total``: [1] or 0-d device tensor.
        """
        strata = self._strata.get(batch_size)
        if strata is None:
            strata = torch.arange(batch_size, dtype=torch.float64, device=self.device)
            self._strata[batch_size] = strata
        width = total.to(torch.float64) / batch_size
        u = torch.empty(batch_size, dtype=torch.float64, device=self.device).uniform_(generator=self.generator)
        return u.mul_(width).add_(strata * width)

    def _check_batch(self, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"{type(self).__name__}.sample: batch_size must be >= 1, got {batch_size}")
        if self.storage.size == 0:  # host int, known by construction
            raise ValueError(f"{type(self).__name__}.sample: the replay storage is empty")

    # state ---------------------------------------------------------------------------------
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """The live device tensors that change with training (subclasses add theirs)."""
        return {"beta": self.beta}

    def _host_counters(self) -> dict[str, int]:
        """Host integers that change with training (subclasses add theirs; restored by name)."""
        return {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Live tensors, host counters and the generator (``foxhunt.state`` convention)."""
        return pack(self._state_tensors(), self._host_counters(), {"generator": self.generator})

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore a ``state_dict`` of a sampler built the same way (in place; ValueError on mismatch)."""
        host = unpack(type(self).__name__, state, self._state_tensors(), tuple(self._host_counters()),
                      {"generator": self.generator})
        for k, v in host.items():
            setattr(self, k, v)

    # protocol defaults --------------------------------------------------------------------
    def on_add(self, slots: torch.Tensor, td_abs: torch.Tensor | None = None) -> None:
        """New transitions were written at ``slots``; uniform sampling needs nothing."""

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Uniform sampling has no priorities."""

    def clear(self) -> None:
        """Forget everything learned about the stored transitions (the storage is cleared apart)."""


class TreePER(SamplerBase):
    """What the proportional samplers over a sum tree and a min tree share (``ProportionalPER`` on
    binary trees, ``WidePER`` on B-ary ones): p = (|δ| + eps)^alpha, the running max priority for
    new transitions, the IS weights w = (p_min / p)^β, clear.

    Subclasses set ``sum_tree`` / ``min_tree`` (with ``dtype``, ``root`` [1] and ``clear()``) and
    implement ``write_priorities(indices, prio)`` (leaves := prio, duplicates keep the max, both
    trees rebuilt, ``max_priority`` max-updated).
    """

    def _init_priorities(self, alpha: float, eps: float, dtype: torch.dtype) -> None:
        name = type(self).__name__
        if alpha < 0:
            raise ValueError(f"{name}: alpha must be >= 0, got {alpha}")
        if eps <= 0:
            raise ValueError(f"{name}: eps must be > 0 (zero priorities are never sampled), got {eps}")
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.max_priority = torch.ones((), dtype=dtype, device=self.device)
        """Largest priority written so far (device scalar); new transitions get it by default."""

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"beta": self.beta, "max_priority": self.max_priority, "sum_tree": self.sum_tree.tree,
                "min_tree": self.min_tree.tree}

    def priority(self, td_errors: torch.Tensor) -> torch.Tensor:
        """(|δ| + eps)^alpha, [B] in the tree dtype (non-finite δ count as 0)."""
        return clean_abs(td_errors).to(self.sum_tree.dtype).add_(self.eps).pow_(self.alpha)

    def write_priorities(self, indices: torch.Tensor, prio: torch.Tensor) -> None:
        raise NotImplementedError

    def on_add(self, slots: torch.Tensor, td_abs: torch.Tensor | None = None) -> None:
        """Prioritise new transitions at ``slots`` ([N] int64): (|δ|+eps)^alpha from ``td_abs``
        ([N]) when given, else the max priority seen so far."""
        # A stride-0 view of max_priority: the write also max-updates max_priority, which leaves
        # it unchanged (max(m, m) = m), so reading it while it is updated is harmless.
        prio = self.max_priority.expand(slots.shape[0]) if td_abs is None else self.priority(td_abs)
        self.write_priorities(slots, prio)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Set p = (|δ| + eps)^alpha at ``indices`` ([B] int64; duplicates keep the max)."""
        self.write_priorities(indices, self.priority(td_errors))

    def clear(self) -> None:
        """All priorities back to empty (0 in the sum tree, +inf in the min tree); max back to 1."""
        self.sum_tree.clear()
        self.min_tree.clear()
        self.max_priority.fill_(1.0)

    @property
    def total(self) -> torch.Tensor:
        """[1] device view of Σ p over the stored transitions."""
        return self.sum_tree.root

    def is_weights(self, p: torch.Tensor, w_out: torch.Tensor) -> None:
        """w_out [B] float32 := (p_min / p)^β from the sampled priorities ``p`` ([B] float64,
        overwritten); p_min is the buffer's (min tree root) or the batch's (weight_norm)."""
        p_min = self.min_tree.root.to(torch.float64) if self.weight_norm == "buffer" else p.min()
        torch.pow(p_min / p, self.beta.to(torch.float64), out=p)
        w_out.copy_(p)


def clean_abs(td: torch.Tensor) -> torch.Tensor:
    """|td| as float32 with NaN and ±inf mapped to 0, so one bad TD error cannot poison the tree."""
    return torch.nan_to_num(td.detach().to(torch.float32).abs(), nan=0.0, posinf=0.0, neginf=0.0)
