"""Capture a step function in a CUDA graph once, replay it after; run it eagerly on the CPU.

The function must read and write only preallocated tensors (its inputs are device tensors it
reads in place: schedules, fold bounds, RNG state), so replaying the graph is the same as calling
it. The first call always runs eagerly: it warms up lazily created state (cuBLAS workspaces,
allocator pools) on a side stream, as CUDA graph capture requires, and does real work. Capture
itself executes nothing, so every call does exactly one step of work, graphed or not.
"""

from __future__ import annotations

from typing import Callable

import torch


class GraphedStep:
    """``step()`` runs ``fn`` eagerly (CPU, or first CUDA call) and replays a captured graph after."""

    def __init__(self, fn: Callable[[], None], device: torch.device, enabled: bool = True, pool: object | None = None) -> None:
        self.fn = fn
        self.device = device
        self.enabled = enabled and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.pool = pool
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if not self.enabled:
            self.fn()
            return
        if self.graph is not None:
            self.graph.replay()
            return
        # First call: real work on a side stream (warm-up), then capture (which runs nothing).
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.fn()
        self.graph = graph

    def reset(self) -> None:
        """Forget the captured graph (only needed when the buffers the function reads were re-allocated)."""
        self.graph = None
