"""What the gradient-step learners share (the direct learner, the forecast learner): a trainer whose epoch is
``steps_per_epoch`` replays of one captured gradient step, with no env stepped.

A subclass builds ``self.learner`` (with ``step``, ``generator``, ``record_idx``, ``flush_records``,
``state_tensors``, ``reset``) and calls ``_build_step(cuda_graphs)``; ``GENERATOR`` names the learner's
random stream in checkpoints (``"windows"``: the direct learner's windows, ``"bars"``: the forecast's bars).
The env is a one-env ``VecTradingEnv`` that holds the fold and the training costs and is never stepped.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from foxhunt.accel.graphs import GraphedStep
from foxhunt.agents.fold_trainer import FoldTrainer, load_part
from foxhunt.state import pack, unpack


class StepTrainer(FoldTrainer):
    """Base of the gradient-step trainers (see the module docstring)."""

    GENERATOR = "generator"
    learner: Any
    cfg: Any

    def _build_step(self, cuda_graphs: bool) -> None:
        """The learner's step, captured once as a CUDA graph on CUDA and replayed (eager on a CPU); with the
        learner's ``epoch_graph``, an epoch's steps as one graph (one host launch an epoch, the same kernels)."""
        self._train = self._train_step = GraphedStep(self.learner.step, self.device, cuda_graphs, generators=[self.learner.generator])
        self._steady = GraphedStep(self._whole_epoch, self.device, cuda_graphs, generators=[self.learner.generator])

    def _whole_epoch(self) -> None:
        """``steps_per_epoch`` gradient steps: the body of the epoch's graph."""
        for _ in range(self.cfg.steps_per_epoch):
            self._train_step.fn()

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def _reset_parts(self, warm_start: bool) -> None:
        self.learner.reset(reinit=not warm_start)

    def _seeders(self) -> list[Callable[[int], None]]:
        return [self.learner.generator.manual_seed]

    # ------------------------------------------------------------------ epochs
    def epoch_steps(self) -> Iterator[None]:
        """One epoch (``FoldTrainer.epoch_steps``): ``steps_per_epoch`` gradient steps, one per round, or
        one step (one CUDA graph) for all of them with ``epoch_graph``."""
        self.monitor.reset()
        self.learner.record_idx.zero_()
        if self.cfg.epoch_graph:
            self._steady()
            self.rounds += self.cfg.steps_per_epoch
            yield
        else:
            for _ in range(self.cfg.steps_per_epoch):
                self._train()
                self.rounds += 1
                yield
        self.learner.flush_records(self.cfg.steps_per_epoch)
        self._end_epoch()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """{component: its state dict} (``foxhunt.state`` convention); checkpoints save exactly these."""
        return {
            "learner": pack(self.learner.state_tensors(), generators={self.GENERATOR: self.learner.generator}),
            "env": self.env.state_dict(),
            "trainer": self._host_state(),
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a trainer of this class built with the same configuration, in place
        (captured graphs stay valid); ComponentStateError naming the component on a mismatch."""
        want = ("learner", "env", "trainer")
        if set(state) != set(want):
            raise ValueError(f"{type(self).__name__}: components {sorted(state)} ≠ this trainer's {sorted(want)}")
        gens = {self.GENERATOR: self.learner.generator}
        name = type(self.learner).__name__
        load_part("learner", lambda st: unpack(name, st, self.learner.state_tensors(), generators=gens), state["learner"])
        load_part("env", self.env.load_state_dict, state["env"])
        self._load_host_state(state["trainer"])


__all__ = ["StepTrainer"]
