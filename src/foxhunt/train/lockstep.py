"""A fold's members stepped as one program: round by round, each member's device work on its own CUDA stream.

Why: a member (one seed, discount or decision interval of ``train.ensemble`` / ``train.gamma_grid`` /
``train.decision_grid``) is a small network over 512-4,096 envs, a sliver of a GPU; its captured rounds
are chains of small kernels whose time is launch latency, not arithmetic. Stepped one member's epoch
after another, M members cost M times one. Stepped in lockstep, round r of every member is enqueued
before round r + 1 of any, each member on its own stream, so the GPU runs the members' chains side by
side and M members cost about what the busiest one costs until the card is full. A member whose epoch is
one graph (``dqn.epoch_graph`` and its twins, off by default for now) yields once an epoch: its whole epoch is
one launch on its stream, so the host enqueues M launches an epoch instead of 2·R·M.

What is shared and what is not: every member keeps its own trainer (env, replay, networks, optimiser,
generators, monitor), so a member in the lockstep program does exactly the arithmetic it does alone, in
the same order, on its own stream: its results are bit for bit those of the same member trained alone
(tests/train/test_lockstep.py on the CPU, the GPU tests on a card). Its graphs are captured on its own
stream (``accel.graphs.capture`` takes the current stream), because cuBLAS keys its workspace by
(handle, stream): graphs captured on one shared stream would share a workspace while replayed at once.

Ordering: every member stream first waits for the host stream's work (a fold reset, the epoch
selector's restore of a network), and the host stream waits for every member stream at the end of the
epoch (the selector's held-back backtests read the members' networks there). Each member starts its
epoch summary's readback on its own stream; ``finish`` reads them in member order.

On a CPU there are no streams: the members' rounds interleave on the host in the same order, which
changes nothing in any member's arithmetic (the CPU tests prove the equality with members alone).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch

from foxhunt.agents.fold_trainer import TrainingHalted


class Lockstep:
    """Runs the epochs of ``members`` (trainers with ``epoch_steps`` / ``finish_epoch``) in lockstep.

    device: the members' device (streams on CUDA only); enabled: False steps one member's whole epoch
    after another's (``train.lockstep = false``: the comparison the benchmark times); labels: how a
    halted member is named (default ``member k``)."""

    def __init__(self, members: Sequence[Any], device: torch.device, enabled: bool = True,
                 labels: Sequence[str] | None = None) -> None:
        self.members = list(members)
        self.device = device
        self.enabled = enabled and len(self.members) > 1
        self.labels = list(labels) if labels is not None else [f"member {k}" for k in range(len(self.members))]
        self.streams: list[torch.cuda.Stream] | None = None
        if self.enabled and device.type == "cuda":
            self.streams = [torch.cuda.Stream(device) for _ in self.members]

    def _on(self, k: int) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.streams[k]) if self.streams is not None else contextlib.nullcontext()

    def subset(self, keep: Sequence[int]) -> "Lockstep":
        """The lockstep of members ``keep`` (indices into ``members``), each still on its own stream
        (the one its graphs were captured on): a tune population whose pruned trials left
        (``foxhunt.tune.population``)."""
        sub = Lockstep.__new__(Lockstep)
        sub.members = [self.members[k] for k in keep]
        sub.device, sub.enabled = self.device, self.enabled
        sub.labels = [self.labels[k] for k in keep]
        sub.streams = [self.streams[k] for k in keep] if self.streams is not None else None
        return sub

    def run_epoch(self, on_error: Callable[[int, Exception], None] | None = None) -> None:
        """Enqueue one epoch of every member (no host reads): round r of each member before round r + 1
        of any; every member's summary readback is started at its epoch's end.

        on_error(k, exc): given, an exception raised by member k's round is handed to it and member k
        takes no more rounds this epoch while the others go on (a tune population's trials fail
        alone); None: it propagates."""
        if not self.enabled:
            for k, t in enumerate(self.members):
                try:
                    t.run_epoch()
                except Exception as exc:
                    if on_error is None:
                        raise
                    on_error(k, exc)
            return
        host = torch.cuda.current_stream(self.device) if self.streams is not None else None
        if self.streams is not None:
            for s in self.streams:
                s.wait_stream(host)
        steps: list[Iterator[None] | None] = [t.epoch_steps() for t in self.members]
        live = len(steps)
        while live:
            for k, gen in enumerate(steps):
                if gen is None:
                    continue
                with self._on(k):
                    try:
                        next(gen)
                    except StopIteration:
                        steps[k] = None
                        live -= 1
                    except Exception as exc:
                        if on_error is None:
                            raise
                        steps[k] = None
                        live -= 1
                        on_error(k, exc)
        if self.streams is not None:
            for s in self.streams:
                host.wait_stream(s)

    def finish(self, on_error: Callable[[int, Exception], None] | None = None) -> list[Any]:
        """Every member's ``finish_epoch`` (its summary, or None in lagged readback), in member order.
        A member whose guard halted raises TrainingHalted naming it (with more than one member).
        on_error(k, exc): as in ``run_epoch``; member k's summary is then None and the others are read."""
        out = []
        for k, t in enumerate(self.members):
            try:
                out.append(t.finish_epoch())
            except Exception as exc:
                named = TrainingHalted(f"{self.labels[k]}: {exc}") if isinstance(exc, TrainingHalted) and len(self.members) > 1 else None
                if on_error is None:
                    if named is not None:
                        raise named from None
                    raise
                out.append(None)
                on_error(k, named or exc)
        return out

    def train_epoch(self) -> list[Any]:
        """``run_epoch`` then ``finish``."""
        self.run_epoch()
        return self.finish()


__all__ = ["Lockstep"]
