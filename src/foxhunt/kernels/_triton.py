"""The one answer inside the kernels leaf to "do Triton kernels run in the interpreter here?".

Triton decides at decoration time (``triton.jit`` reads TRITON_INTERPRET when a kernel module is
imported): a jitted function is an ``InterpretedFunction`` under the interpreter. ``_probe`` is
decorated when this module is imported, like every kernel of this package, so its type tells.
Launchers use it to pick interpreter-friendly launch shapes; ``foxhunt.accel.triton`` builds the
user-facing availability answer (compiled / interpreted / unavailable, and why) on top of it.
"""

from __future__ import annotations

import triton


@triton.jit
def _probe(x_ptr):  # pragma: no cover - never launched
    pass


def is_interpreted() -> bool:
    """True when Triton kernels run in the interpreter (TRITON_INTERPRET=1 before import)."""
    return type(_probe).__name__ == "InterpretedFunction"


__all__ = ["is_interpreted"]
