"""Out-of-bounds detection for Triton kernels run in the interpreter (TRITON_INTERPRET=1).

The interpreter dereferences raw addresses: an unmasked access past a tensor reads or writes
whatever host memory lies there (silently, or a segfault), where the GPU raises "an illegal memory
access was encountered" with no kernel named. ``checked_accesses()`` patches the interpreter so
that every load and store of every kernel launched inside it must fall, element by element (masked
lanes excluded), inside the storage of one of that launch's tensor arguments; otherwise
``OutOfBounds`` names the kernel, the access kind and the offending address range. Test-only.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np


class OutOfBounds(AssertionError):
    """A kernel touched memory outside every tensor argument of its launch."""


@contextlib.contextmanager
def checked_accesses() -> Iterator[list[str]]:
    """Patch the Triton interpreter for the duration; yields the list of kernel names launched."""
    import triton.runtime.interpreter as interp

    builder, grid_exec = interp.InterpreterBuilder, interp.GridExecutor
    orig_load, orig_store = builder.create_masked_load, builder.create_masked_store
    orig_init, orig_call = grid_exec._init_args_hst, grid_exec.__call__
    state: dict = {"ranges": [], "kernel": "?"}
    launched: list[str] = []

    def ranges_of(args) -> list[tuple[int, int]]:
        out = []
        for a in args:
            if hasattr(a, "untyped_storage"):
                s = a.untyped_storage()
                out.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
            elif isinstance(a, tuple):
                out.extend(ranges_of(a))
        return out

    def init(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        state["ranges"] = ranges_of(list(args_hst) + list(kwargs_hst.values()))
        return args_hst, kwargs_hst

    def call(self, *args, **kwargs):
        state["kernel"] = getattr(self.fn, "__name__", "?")
        launched.append(state["kernel"])
        return orig_call(self, *args, **kwargs)

    def check(ptrs, mask, width: int, what: str) -> None:
        p = np.asarray(ptrs.data).astype(np.int64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), p.shape) if mask is not None else np.ones(p.shape, bool)
        p = p[active]
        if p.size == 0:
            return
        inside = np.zeros(p.shape, dtype=bool)
        for lo, hi in state["ranges"]:
            inside |= (p >= lo) & (p + width <= hi)
        if not inside.all():
            bad = p[~inside]
            raise OutOfBounds(f"{state['kernel']}: {what} of {bad.size} element(s) outside every tensor argument "
                              f"(addresses {int(bad.min()):#x} … {int(bad.max()):#x}; "
                              f"arguments {[(hex(lo), hi - lo) for lo, hi in state['ranges']]})")

    def load(self, ptrs, mask, other, *rest):
        check(ptrs, mask, np.dtype(interp._get_np_dtype(ptrs.get_element_ty())).itemsize, "load")
        return orig_load(self, ptrs, mask, other, *rest)

    def store(self, ptrs, value, mask, *rest):
        check(ptrs, mask, np.asarray(value.data).dtype.itemsize, "store")
        return orig_store(self, ptrs, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store = load, store
    grid_exec._init_args_hst, grid_exec.__call__ = init, call
    try:
        yield launched
    finally:
        builder.create_masked_load, builder.create_masked_store = orig_load, orig_store
        grid_exec._init_args_hst, grid_exec.__call__ = orig_init, orig_call
