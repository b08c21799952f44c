"""``dqn.overlap_collection``: collection one round ahead of the updates (a one-round policy lag),
on a second CUDA stream on a GPU.

Without it a round is ``collect(r) → insert(r) → updates(r)`` on one stream. With it:

* the fold's first round starts with a prologue: snapshot, then collect(0) into the round buffers;
* every round r: **wait** for collect(r) → **snapshot** (the acting copy ← the online and target
  weights, i.e. those after round r-1's updates) → **insert(r)** (the round buffers into the replay
  ring with their |TD| priorities and into the epoch monitor, exactly the normal flush) →
  **collect(r+1)** with the acting copy into the round buffers → **updates(r)**, which sample the
  ring that collection never writes.

So round r+1's transitions are collected by the networks after round r-1's updates, while round
r's updates run. The round buffers are the staging area: insert(r) reads them before collect(r+1)
overwrites them, so one set is enough (the brief's order "collect(r+1) → insert(r)" with a second
buffer set gives the same results: collection reads nothing insert writes, and each component
draws from its own generator).

On CUDA collect(r+1) runs on a second stream (``torch.cuda.Stream``), concurrently with updates(r)
on the current stream: the side stream waits for insert(r) (which follows updates(r-1)), the
current stream waits for collect(r) before the snapshot and insert(r), and for the last collection
at the end of the epoch (so the epoch's readback, the env resets at an epoch start, a checkpoint
and a fold change see every write). What each side touches is disjoint: collection the env, the
collector's buffers, generators and ε, the acting copy; insert and updates the ring, the sampler,
the learner and the monitor. All buffers are allocated once (no ``record_stream`` needed); each
captured graph has its own memory pool, and the collection graph its own capture stream (cuBLAS
keys its workspace by handle and stream, so graphs captured on torch's one default capture stream
share a workspace, which two graphs running at once must not). The two-stream result equals the one-stream lagged order
bit for bit (``tests/agents/test_dqn_overlap.py``); check mode (``accel.check``) runs the lagged
order on one stream.

The pipeline runs across the epochs of a fold: at an epoch's end one collected round is staged
(its rows are inserted in the next epoch's first round, and counted in that epoch's summary), and
a checkpoint holds it (``LaggedCollection.state_dict``); a new fold drops it and starts with the
prologue (one extra collected round per fold). What changes the env at an epoch start (the
``dqn.reset_*_each_epoch`` resets, the training-cost curriculum) applies to the env as it stands
then: it shows from the second round of rows the epoch inserts (the first was collected before).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from foxhunt.agents.dqn.collector import Collector
from foxhunt.agents.dqn.learner import QLearner, _rehome
from foxhunt.state import pack, unpack


class ActingCopy:
    """Copies of the learner's online and target networks that collection acts with.

    online, target: nn.Modules whose parameters are views into ``online_flat`` / ``target_flat``
    (float32 [P] each, the learner's flat layout); ``snapshot`` copies the learner's current weights
    into them, in place (graph-safe). device: the learner's (the collector's fused acting reads it)."""

    def __init__(self, learner: QLearner) -> None:
        self.learner = learner
        self.device = learner.device
        self.online = copy.deepcopy(learner.online)
        self.target = copy.deepcopy(learner.target)
        for net in (self.online, self.target):
            for p in net.parameters():
                p.requires_grad_(False)
        self.online_flat = learner.flat.data.clone()
        self.target_flat = learner.target_flat.clone()
        _rehome(self.online, self.online_flat)
        _rehome(self.target, self.target_flat)

    @torch.no_grad()
    def snapshot(self) -> None:
        """acting ← the learner's online and target weights (device copies, no host read)."""
        self.online_flat.copy_(self.learner.flat.data)
        self.target_flat.copy_(self.learner.target_flat)


class LaggedCollection:
    """The lagged round order (module docstring): the acting copy, the staged flag, the streams.

    collector: the trainer's collector (its round buffers are the staging area); learner: whose
    weights are snapshotted; two_streams: run collection on a second CUDA stream (else the same
    order on the current stream)."""

    def __init__(self, collector: Collector, acting: ActingCopy, two_streams: bool) -> None:
        self.collector = collector
        self.acting = acting
        self.device = acting.device
        self.staged = False  # a collected round waits in the round buffers
        self.side: torch.cuda.Stream | None = None
        self.set_streams(2 if two_streams else 1)

    def set_streams(self, n: int) -> None:
        """1: the lagged order on the current stream; 2: collection on a second CUDA stream (CUDA
        only). Only between epochs (the bench and the tests compare both on one trainer)."""
        if n not in (1, 2) or (n == 2 and self.device.type != "cuda"):
            raise ValueError(f"overlap_collection: {n} streams on {self.device} (1, or 2 on CUDA)")
        self.side = torch.cuda.Stream(self.device) if n == 2 else None

    @property
    def streams(self) -> int:
        return 1 if self.side is None else 2

    def round(self, collect: Callable[[], None], insert: Callable[[], None]) -> None:
        """One round's collection side: the prologue when nothing is staged, then wait for the
        staged round, ``insert`` it (snapshot + flush, on the current stream) and launch the next
        ``collect`` (on the side stream with two streams). The caller runs the round's updates."""
        if not self.staged:
            self.acting.snapshot()
            self._launch(collect)
            self.staged = True
        self.join()
        insert()
        self._launch(collect)

    def _launch(self, collect: Callable[[], None]) -> None:
        if self.side is None:
            collect()
            return
        self.side.wait_stream(torch.cuda.current_stream(self.device))  # insert(r) done: the buffers are free
        with torch.cuda.stream(self.side):
            collect()

    def join(self) -> None:
        """The current stream waits for the collection in flight (no host wait)."""
        if self.side is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.side)

    def reset(self) -> None:
        """New fold: nothing staged (the fold's first round collects with the prologue)."""
        self.join()
        self.staged = False

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The staged round (the collector's round buffers, live) and whether one is staged."""
        return pack(self.collector.round_buffers(), {"staged": int(self.staged)})

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.join()
        host = unpack("LaggedCollection", state, self.collector.round_buffers(), ("staged",))
        if host["staged"] > 1:
            raise ValueError(f"LaggedCollection: 'staged' = {host['staged']} must be 0 or 1")
        self.staged = bool(host["staged"])


__all__ = ["ActingCopy", "LaggedCollection"]
