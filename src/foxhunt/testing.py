"""Test helpers that enforce the GPU residency rules on any device.

``forbid_host_reads()`` patches the tensor methods that read device values back to the host
(``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool()``, ``float()``, ``int()``, printing)
so that they raise inside the block. On a CPU this is how CI proves that a hot loop would not
synchronise on a GPU; on a GPU the same tests also run under
``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


class HostReadError(AssertionError):
    """A tensor value was read on the host inside a block that forbids it."""


_PATCHED = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "__repr__", "__format__")


@contextlib.contextmanager
def forbid_host_reads() -> Iterator[None]:
    """Inside the block, any host read of a tensor value raises HostReadError.

    ``__index__`` is included because ``range(t)`` or ``x[t]`` with a 0-d tensor used as a Python
    int is a hidden host read. Shape, dtype and device queries stay allowed.
    """
    originals = {name: getattr(torch.Tensor, name) for name in _PATCHED}

    def make(name: str):
        def raiser(self: torch.Tensor, *args: object, **kwargs: object) -> object:
            raise HostReadError(f"host read Tensor.{name} inside a no-host-read block")

        return raiser

    try:
        for name in _PATCHED:
            setattr(torch.Tensor, name, make(name))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


@contextlib.contextmanager
def cuda_sync_errors(device: torch.device | str) -> Iterator[None]:
    """On CUDA, make any implicit synchronisation inside the block raise; a no-op elsewhere."""
    dev = torch.device(device)
    if dev.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)
