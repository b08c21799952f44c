"""Host-side torch expressions the binary replay tree's fused descent (``kernels.replay.binary``) and
its torch reference (``agents.replay.sum_tree.SegmentTree.find_prefix``) share, so both read the
same bits (torch only: importable without Triton)."""

from __future__ import annotations

import torch


def next_positive(level: torch.Tensor) -> torch.Tensor:
    """[n] int64: for each node i of ``level`` ([n], >= 0 or NaN), the first index k >= i with
    level[k] > 0, or n where none is (a reversed running minimum; no host reads).

    Why: CUDA's float64 cumsum is a parallel scan, so a zero node's running sum can lie an ulp above
    its left neighbour's and own the prefix at that boundary; the searchsorted step moves such a hit
    to the next node with mass."""
    n = level.shape[0]
    idx = torch.arange(n, device=level.device)
    pos = torch.where(level > 0, idx, torch.full_like(idx, n))
    return torch.flip(torch.cummin(torch.flip(pos, (0,)), 0).values, (0,))
