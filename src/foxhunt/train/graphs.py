"""Capture a step function in a CUDA graph once, replay it after; run it eagerly on the CPU.

The function must read and write only preallocated tensors (its inputs are device tensors it
reads in place: schedules, fold bounds, RNG state), so replaying the graph is the same as calling
it. The first call always runs eagerly: it warms up lazily created state (cuBLAS workspaces,
allocator pools) on a side stream, as CUDA graph capture requires, and does real work. Capture
itself executes nothing, so every call does exactly one step of work, graphed or not.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch


class GraphedStep:
    """``step()`` runs ``fn`` eagerly (CPU, or first CUDA call) and replays a captured graph after."""

    def __init__(
        self,
        fn: Callable[[], None],
        device: torch.device,
        enabled: bool = True,
        *,
        generators: Sequence[torch.Generator] = (),
        host_state: tuple[Callable[[], object], Callable[[object], None]] | None = None,
        after_replay: Callable[[], None] | None = None,
    ) -> None:
        """generators: device generators the function draws from (registered with the graph so
        each replay advances them). host_state: (save, restore) of host-side bookkeeping that ``fn``
        changes (e.g. replay write positions); it is restored after capture, which runs no work.
        after_replay: host bookkeeping to do after each replay (what ``fn`` would have done)."""
        self.fn = fn
        self.device = device
        self.enabled = enabled and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.generators = tuple(generators)
        self.host_state = host_state
        self.after_replay = after_replay
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if not self.enabled:
            self.fn()
            return
        if self.graph is not None:
            self.graph.replay()
            if self.after_replay is not None:
                self.after_replay()
            return
        # First call: real work on a side stream (warm-up), then capture (which runs nothing).
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for gen in self.generators:
            graph.register_generator_state(gen)
        saved = self.host_state[0]() if self.host_state is not None else None
        with torch.cuda.graph(graph):
            self.fn()
        if self.host_state is not None:
            self.host_state[1](saved)
        self.graph = graph

    def reset(self) -> None:
        """Forget the captured graph (only needed when the buffers the function reads were re-allocated)."""
        self.graph = None
