"""What the DQN and PPO trainers share: the fold reset, per-fold reseeding, the epoch's bracket,
the summary readback with the guard's halt, and the trainer's host counters in a checkpoint.

A trainer is one object per process, reused across the walk-forward folds: ``reset_for_fold``
makes a fold current in place (captured CUDA graphs stay valid). Subclasses set ``env``,
``monitor``, ``cfg`` (with ``loss_clip``, ``grad_collapse``, ``grad_collapse_patience``), ``seed``,
``device`` and say what is reset (``_reset_parts``) and which random streams restart
(``_seeders``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import torch

from foxhunt.agents.guard import halt_message
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.env import VecTradingEnv
from foxhunt.errors import FoxhuntError
from foxhunt.folds import FoldRange
from foxhunt.state import ComponentStateError, pack, unpack


class TrainingHalted(FoxhuntError):
    """The on-device guard stopped training; the message names the check and the epoch."""


def fold_seed(seed: int, fold_index: int) -> int:
    """The base of a fold's random streams: stream k restarts from ``fold_seed + k``."""
    return (seed + 1) * 1_000_003 + fold_index * 7_919


class FoldTrainer:
    """Base of the walk-forward trainers (see the module docstring)."""

    env: VecTradingEnv
    monitor: EpochMonitor
    device: torch.device
    seed: int
    epoch: int = 0
    rounds: int = 0
    fold: FoldRange | None = None
    last_summary: EpochSummary | None = None
    checks: Any = None  # check mode (DQN's agents/dqn/checks.DeviceChecks), None when off

    # ------------------------------------------------------------------ what a subclass says
    def _reset_parts(self, warm_start: bool) -> None:
        """Reset the learner and the other per-fold state in place (before the monitor reset)."""
        raise NotImplementedError

    def _seeders(self) -> list[Callable[[int], None]]:
        """Callables that restart each random stream after the env's, in a fixed order (stream 2, 3, …)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ folds
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        """Make ``fold`` current without re-creating anything; returns the seconds it took.

        The env's fold (episode length checked, the fold's normalisation recomputed on the device),
        the subclass's parts (weights re-initialised in place or kept: warm start; optimiser,
        counters, buffers), the monitor, every random stream, and the envs restarted in the new
        training range. Graphs stay captured.
        """
        t0 = time.perf_counter()
        if self.checks is not None:
            self.checks.verify_addresses()  # check mode, host only: nothing the captured graphs read has moved
        self.env.set_fold(fold)
        self._reset_parts(warm_start)
        self.monitor.reset()
        self._reseed(fold.fold)
        self.env.reset(persistent=True)
        self.epoch = 0
        self.rounds = 0
        self.fold = fold
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def _reseed(self, fold_index: int) -> None:
        """Every generator restarts from (seed, fold): a fold's result never depends on the folds
        trained before it in this process (and a resumed run needs no earlier fold)."""
        base = fold_seed(self.seed, fold_index)
        self.env.sampler.seed(base + 1)
        for k, reseed in enumerate(self._seeders(), start=2):
            reseed(base + k)

    # ------------------------------------------------------------------ epochs
    def epoch_steps(self) -> Iterator[None]:
        """One epoch of device work as a generator: it enqueues one round (a collection round and its
        updates, a rollout and its update, a gradient step) per ``next`` and ends by starting the
        epoch summary's readback (no host reads). ``run_epoch`` runs it through; the lockstep runner
        (``foxhunt.train.lockstep``) interleaves the members' generators round by round, each on its
        own CUDA stream."""
        raise NotImplementedError

    def run_epoch(self) -> None:
        """Enqueue one epoch of device work and start its summary readback (no host reads)."""
        for _ in self.epoch_steps():
            pass

    def finish_epoch(self) -> EpochSummary | None:
        """After ``run_epoch``: the epoch's summary (its one synchronisation; TrainingHalted if the
        guard halted). DQN's lagged readback overrides this (an earlier epoch's summary, or None)."""
        return self._collect_summary()

    def train_epoch(self) -> EpochSummary | None:
        """One epoch (``run_epoch`` then ``finish_epoch``)."""
        self.run_epoch()
        return self.finish_epoch()

    def _end_epoch(self) -> None:
        """Start the epoch summary's readback (non-blocking) and count the epoch."""
        self.monitor.start_readback(self.epoch)
        self.epoch += 1

    def drain(self) -> list[EpochSummary]:
        """Every pending summary, oldest first (waits for them; the end of a fold in lagged mode)."""
        out = []
        while self.monitor.pending:
            out.append(self._collect_summary())
        return out

    def _collect_summary(self) -> EpochSummary:
        """Wait for the oldest pending summary; TrainingHalted naming the check if the guard halted."""
        s = self.monitor.finish_readback()
        self.last_summary = s
        if self.checks is not None:
            self.checks.report(s)  # check mode: names where a bad value came from (before the guard's halt)
        if s["halt"] > 0:
            cfg = self.cfg  # type: ignore[attr-defined]
            raise TrainingHalted(halt_message(s.values, fold=self.fold.fold if self.fold is not None else "?",
                                              epoch=s.epoch, loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse,
                                              patience=cfg.grad_collapse_patience,
                                              q_divergence=getattr(cfg, "q_divergence", None)))
        return s

    # ------------------------------------------------------------------ checkpoints
    def _host_state(self) -> dict[str, torch.Tensor]:
        """The trainer's own host counters as a component state dict (``foxhunt.state``)."""
        return pack({}, {"epoch": self.epoch, "rounds": self.rounds})

    def _load_host_state(self, state: dict[str, torch.Tensor]) -> None:
        host = load_part("trainer", lambda st: unpack(type(self).__name__, st, {}, ("epoch", "rounds")), state)
        self.epoch, self.rounds = host["epoch"], host["rounds"]


def load_part(name: str, load: Callable[[dict[str, torch.Tensor]], object], state: dict[str, torch.Tensor]) -> object:
    """``load(state)`` for the checkpoint component ``name``; its ValueError becomes a
    ComponentStateError naming the component."""
    try:
        return load(state)
    except ValueError as exc:
        raise ComponentStateError(name, str(exc)) from None
