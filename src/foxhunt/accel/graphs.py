"""CUDA-graph capture: the one helper every captured path uses; on a CPU the same code runs eagerly.

A captured function must read and write only preallocated tensors (its inputs are device tensors
it reads in place: schedules, fold bounds, RNG state), so replaying the graph is the same as
calling it. CUDA graph capture needs the lazily created state (cuBLAS workspaces, allocator pools,
compiled kernels) to exist first, so ``capture`` runs ``warmup`` calls on a side stream before
capturing; capture itself executes nothing.

* ``capture(fn, device, ...)`` → ``torch.cuda.CUDAGraph``: warm-up on a side stream, then capture.
  ``save`` / ``restore`` bracket warm-up and capture when the warm-up's work must not count
  (``env.graph.StepGraph`` restores the env snapshot), or when host bookkeeping that ``fn``
  changes must be put back after a capture that did no work (``GraphedStep``'s ``host_state``).
* ``GraphedStep(fn, device, enabled)``: ``step()`` runs ``fn`` eagerly (CPU, graphs off, or the
  first CUDA call, whose warm-up is real work) and replays the captured graph after.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Callable, ContextManager, Sequence

import torch


def capture(
    fn: Callable[[], object],
    device: torch.device | str,
    *,
    warmup: int = 1,
    generators: Sequence[torch.Generator] = (),
    save: Callable[[], object] | None = None,
    restore: Callable[[object], None] | None = None,
    restore_after_warmup: bool = False,
    during_capture: Callable[[], ContextManager[object]] | None = None,
    stream: torch.cuda.Stream | None = None,
) -> torch.cuda.CUDAGraph:
    """Run ``fn`` ``warmup`` times on a side stream, then capture one call of it in a CUDA graph.

    generators: device generators ``fn`` draws from (registered, so each replay advances them).
    save / restore: host or device state put back after the capture (which ran no work), and also
    after the warm-up when ``restore_after_warmup`` (the warm-up's effects must not count).
    during_capture: a context entered around the capture only (tests: ``forbid_host_reads``,
    ``cuda_sync_errors``).
    stream: the capture stream. Default: the current stream when it is not the device's default stream
    (a lockstep member's own stream, ``foxhunt.train.lockstep``), else torch's one default capture
    stream, shared by every graph. A graph replayed concurrently with others needs its own: cuBLAS
    keys its workspace by (handle, stream), so graphs captured on one stream share one workspace
    (``dqn.overlap_collection``, lockstep members).
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"CUDA-graph capture needs a CUDA device, got {dev} (run the function eagerly)")
    if stream is None and torch.cuda.current_stream(dev) != torch.cuda.default_stream(dev):
        stream = torch.cuda.current_stream(dev)
    saved = save() if save is not None and restore_after_warmup else None
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(max(0, warmup)):
            fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    if restore is not None and restore_after_warmup:
        restore(saved)
    elif save is not None:
        saved = save()  # the state after the (real) warm-up work is what the capture must leave
    graph = torch.cuda.CUDAGraph()
    for gen in generators:
        graph.register_generator_state(gen)
    # The collector stays off while capturing: an automatic collection could free an older graph (a finished
    # tune trial's trainer, say), and a CUDAGraph reset during capture invalidates the capture
    # (cudaErrorStreamCaptureInvalidated). torch.cuda.graph no longer collects on entry (too slow for
    # many captures in a row), so a dead cycle holding a graph can be collected at any allocation.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with (during_capture() if during_capture is not None else contextlib.nullcontext()), torch.cuda.graph(graph, stream=stream):
            fn()
    finally:
        if collecting:
            gc.enable()
    if restore is not None:
        restore(saved)
    return graph


class GraphedStep:
    """``step()`` runs ``fn`` eagerly (CPU, or first CUDA call) and replays a captured graph after.

    The first CUDA call does one real call of ``fn`` (the warm-up) and then captures, so every call
    does exactly one step of work, graphed or not.
    """

    def __init__(
        self,
        fn: Callable[[], None],
        device: torch.device,
        enabled: bool = True,
        *,
        generators: Sequence[torch.Generator] = (),
        host_state: tuple[Callable[[], object], Callable[[object], None]] | None = None,
        after_replay: Callable[[], None] | None = None,
        capture_stream: torch.cuda.Stream | None = None,
    ) -> None:
        """generators: device generators the function draws from (registered with the graph so
        each replay advances them). host_state: (save, restore) of host-side bookkeeping that ``fn``
        changes (e.g. replay write positions); it is restored after capture, which runs no work.
        after_replay: host bookkeeping to do after each replay (what ``fn`` would have done).
        capture_stream: the stream to capture on (``capture``'s ``stream``)."""
        self.fn = fn
        self.device = device
        self.enabled = enabled and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.generators = tuple(generators)
        self.host_state = host_state
        self.after_replay = after_replay
        self.capture_stream = capture_stream
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
        save, restore = self.host_state if self.host_state is not None else (None, None)
        self.graph = capture(self.fn, self.device, warmup=1, generators=self.generators, save=save, restore=restore,
                             stream=self.capture_stream)

    def reset(self) -> None:
        """Forget the captured graph (only needed when the buffers the function reads were re-allocated)."""
        self.graph = None


__all__ = ["GraphedStep", "capture"]
