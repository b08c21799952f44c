"""The fused replay trees' adapter: whether the Triton sum / min tree kernels can run, and which.

Proportional PER keeps its priorities in sum and min trees of arity 2 (``SegmentTree``) or 32
(``WideTree``); each has a plain-torch implementation (the reference) and Triton kernels with
bitwise the same results: ``foxhunt.kernels.sum_tree_fused`` (binary) and
``foxhunt.kernels.wide_tree_fused`` (32-ary). ``unsupported(device)`` says why those kernels cannot
run (None when they can); ``kernels(device, arity, who)`` returns the module or raises a ValueError
naming the reason.
"""

from __future__ import annotations

from types import ModuleType

import torch

from foxhunt.accel.triton import unavailable


def unsupported(device: torch.device | str) -> str | None:
    """Why the Triton replay-tree kernels cannot run on ``device`` (None when they can)."""
    return unavailable(device)


def kernels(device: torch.device | str, arity: int, who: str) -> ModuleType:
    """The kernel module of trees of ``arity`` (2: binary, else wide); ValueError when they cannot run."""
    reason = unsupported(device)
    if reason is not None:
        raise ValueError(f"{who}: fused (Triton) replay trees unavailable: {reason}")
    if arity == 2:
        from foxhunt.kernels import sum_tree_fused

        return sum_tree_fused
    from foxhunt.kernels import wide_tree_fused

    return wide_tree_fused


__all__ = ["kernels", "unsupported"]
