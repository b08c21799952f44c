"""Is Triton usable here? The one place that answers: compiled, interpreted, or not (and why).

* ``compiled``: Triton imports and the device is CUDA — kernels are compiled for the GPU.
* ``interpreted``: Triton imports, runs in its interpreter (TRITON_INTERPRET=1 set before the
  first kernel module is imported) and the device is a CPU — the kernels run (slowly) on CPU
  tensors, which is how CI tests them.
* ``unavailable``: Triton does not import, or a CPU without the interpreter; ``reason`` says which.

Every fused-op adapter (``env/fused.py``, ``agents/dqn/fused.py``, ``agents/replay/fused.py``,
``backtest/fused.py``) starts its ``unsupported(...)`` answer with ``unavailable(device)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Mode = Literal["compiled", "interpreted", "unavailable"]

_IMPORT_ERROR: list[str] = []  # cached reason why ``foxhunt.kernels._triton`` does not import


def _import_reason() -> str | None:
    if _IMPORT_ERROR:
        return _IMPORT_ERROR[0] or None
    try:
        import foxhunt.kernels._triton  # noqa: F401
    except ImportError as exc:  # triton missing (or broken)
        _IMPORT_ERROR.append(f"triton is not available ({exc})")
    else:
        _IMPORT_ERROR.append("")
    return _IMPORT_ERROR[0] or None


def is_interpreted() -> bool:
    """True when Triton imports and runs in its interpreter (False when it does not import)."""
    if _import_reason() is not None:
        return False
    from foxhunt.kernels._triton import is_interpreted as k_interpreted

    return k_interpreted()


@dataclass(frozen=True)
class TritonStatus:
    """How Triton kernels run on one device: ``mode`` and, when unavailable, ``reason``."""

    mode: Mode
    reason: str | None = None

    @property
    def usable(self) -> bool:
        return self.mode != "unavailable"


def status(device: torch.device | str) -> TritonStatus:
    """Whether (and how) Triton kernels run on ``device``."""
    reason = _import_reason()
    if reason is not None:
        return TritonStatus("unavailable", reason)
    dev = torch.device(device)
    if dev.type == "cuda":
        return TritonStatus("compiled")
    if is_interpreted():
        return TritonStatus("interpreted")
    return TritonStatus(
        "unavailable", "no CUDA device (and the Triton interpreter is off: set TRITON_INTERPRET=1 for CPU runs)")


def unavailable(device: torch.device | str) -> str | None:
    """Why Triton kernels cannot run on ``device`` (None when they can)."""
    return status(device).reason


__all__ = ["Mode", "TritonStatus", "is_interpreted", "status", "unavailable"]
