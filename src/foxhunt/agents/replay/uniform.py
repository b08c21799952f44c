"""Uniform sampling over the filled part of the storage (IS weights all 1)."""

from __future__ import annotations

import torch

from foxhunt.agents.replay.base import SamplerBase
from foxhunt.agents.replay.storage import ReplayStorage


class UniformSampler(SamplerBase):
    """indices = floor(u · size), u ~ U[0, 1) in float64, with ``size`` read from the storage's
    device scalar ``size_t`` (so one captured graph serves while the buffer fills).

    float64 draws keep the bias below 2^-53 · size (a float32 draw would give some slots ~6 % more
    mass than others at a million slots).
    """

    def __init__(self, storage: ReplayStorage, seed: int = 0) -> None:
        super().__init__(storage, beta=1.0, seed=seed)

    def sample(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices [B] int64 in [0, size), weights [B] float32 = 1), preallocated buffers."""
        self._check_batch(batch_size)
        idx_out, w_out = self.outputs(batch_size)
        size = self.storage.size_t
        u = torch.empty(batch_size, dtype=torch.float64, device=self.device).uniform_(generator=self.generator)
        idx = u.mul_(size).floor_().to(torch.int64)
        torch.minimum(idx, size - 1, out=idx_out)
        return idx_out, w_out
