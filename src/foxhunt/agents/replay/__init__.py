"""Device replay: compact ring storage × sampler (uniform, proportional PER, rank PER).

    storage = ReplayStorage(capacity, n_portfolio=3, device=dev, gamma=0.99)
    sampler = ProportionalPER(storage, alpha=0.6, beta=0.4)   # or UniformSampler / RankPER
    replay = ReplayBuffer(storage, sampler)
    replay.add(Transitions(bar, portfolio, action, reward, done, next_bar, next_portfolio), td_abs)
    batch, idx, w = replay.sample(4096, market, obs_buf, next_obs_buf)
    ...                                     # loss weighted by w, TD errors δ [B]
    replay.update_priorities(idx, δ)

Everything stays on the device: no host reads, fixed shapes, capturable in a CUDA graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from foxhunt.agents.replay.base import SamplerBase
from foxhunt.agents.replay.proportional import ProportionalPER
from foxhunt.agents.replay.rank import RankPER
from foxhunt.agents.replay.storage import ReplayStorage, SampledBatch, Transitions
from foxhunt.agents.replay.sum_tree import SegmentTree
from foxhunt.agents.replay.uniform import UniformSampler
from foxhunt.agents.replay.wide_per import WidePER, WideTree
from foxhunt.state import check_keys, prefixed, split

if TYPE_CHECKING:
    from foxhunt.market import MarketData

__all__ = [
    "ProportionalPER",
    "RankPER",
    "ReplayBuffer",
    "ReplayStorage",
    "SampledBatch",
    "SamplerBase",
    "SegmentTree",
    "Transitions",
    "UniformSampler",
    "WidePER",
    "WideTree",
]


class ReplayBuffer:
    """A storage and its sampler, kept in step (add → on_add, clear → both)."""

    def __init__(self, storage: ReplayStorage, sampler: SamplerBase) -> None:
        if sampler.storage is not storage:
            raise ValueError("ReplayBuffer: the sampler was built on another storage")
        self.storage = storage
        self.sampler = sampler

    def add(self, batch: Transitions, td_abs: torch.Tensor | None = None) -> torch.Tensor:
        """Write N transitions and prioritise them (|δ| when given, else the max priority).
        Returns the slots written, [N] int64."""
        slots = self.storage.add(batch)
        self.sampler.on_add(slots, td_abs)
        return slots

    def sample(
        self, batch_size: int, market: MarketData, obs_out: torch.Tensor, next_obs_out: torch.Tensor
    ) -> tuple[SampledBatch, torch.Tensor, torch.Tensor]:
        """(gathered batch, indices [B] int64, IS weights [B] float32), all preallocated buffers."""
        idx, w = self.sampler.sample(batch_size)
        return self.storage.gather(idx, market, obs_out, next_obs_out), idx, w

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Priorities from the TD errors of the last learning step ([B] each)."""
        self.sampler.update_priorities(indices, td_errors)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The storage's and the sampler's state dicts, under ``storage.`` and ``sampler.``."""
        return {**prefixed("storage", self.storage.state_dict()), **prefixed("sampler", self.sampler.state_dict())}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        check_keys("ReplayBuffer", self.state_dict(), state)
        self.storage.load_state_dict(split(state, "storage"))
        self.sampler.load_state_dict(split(state, "sampler"))

    def clear(self) -> None:
        """Empty storage and sampler (a new fold)."""
        self.storage.clear()
        self.sampler.clear()
