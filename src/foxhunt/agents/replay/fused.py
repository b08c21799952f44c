"""The fused replay trees' adapter: whether the Triton sum / min tree kernels can run, and which.

Proportional PER keeps its priorities in sum and min trees of arity 2 (``SegmentTree``) or 32
(``WideTree``); each has a plain-torch implementation (the reference) and Triton kernels with
bitwise the same results: ``foxhunt.kernels.replay.binary`` (binary) and
``foxhunt.kernels.replay.wide`` (32-ary). ``unsupported(device)`` says why those kernels cannot
run (None when they can); ``kernels(device, wide, who)`` returns the module or raises a ValueError
naming the reason. Every tree takes ``backend = "torch" | "fused"`` (the plan's ``replay`` choice,
``foxhunt.accel``); ``check_backend`` validates it.
"""

from __future__ import annotations

from types import ModuleType

import torch

from foxhunt.accel.triton import unavailable


def unsupported(device: torch.device | str) -> str | None:
    """Why the Triton replay-tree kernels cannot run on ``device`` (None when they can)."""
    return unavailable(device)


BACKENDS = ("torch", "fused")


def check_backend(backend: str, who: str) -> str:
    """``backend`` if it is "torch" or "fused", else a ValueError naming ``who``."""
    if backend not in BACKENDS:
        raise ValueError(f"{who}: backend must be 'torch' or 'fused', got {backend!r}")
    return backend


def kernels(device: torch.device | str, wide: bool, who: str) -> ModuleType:
    """The kernel module of binary (``wide`` False) or B-ary trees; ValueError when they cannot run."""
    reason = unsupported(device)
    if reason is not None:
        raise ValueError(f"{who}: fused (Triton) replay trees unavailable: {reason}")
    if not wide:
        from foxhunt.kernels.replay import binary

        return binary
    from foxhunt.kernels.replay import wide

    return wide


__all__ = ["BACKENDS", "check_backend", "kernels", "unsupported"]
