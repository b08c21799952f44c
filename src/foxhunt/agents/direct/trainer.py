"""DirectTrainer: one object per process, reused across folds (the walk-forward runner's interface).

It owns the training env's parameters (a one-env ``VecTradingEnv``: the fold, the costs × the
training multiplier, which a cost curriculum changes in place, the decision interval), the learner
and the monitor. The gradient step (``_train``) is captured once as a CUDA graph on first use and
replayed for the life of the process: a new fold changes device tensors the graph reads and resets
state in place, never the graph. An epoch is ``steps_per_epoch`` replays with no host reads, ending
with the one readback of the epoch summary.

The runner's interface (shared with DQNTrainer and PPOTrainer): ``env``, ``reset_for_fold``,
``train_epoch``, ``drain``, ``policy_net`` (the policy as a DuelingQNet, ``DirectPolicy.greedy_net``:
the greedy evaluation, the model file), ``learner.net`` (the live module epoch selection snapshots),
and ``state_dict`` / ``load_state_dict`` (``foxhunt.state``) for checkpoints.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from foxhunt.accel.graphs import GraphedStep
from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.learner import SUMMARY_FIELDS, DirectLearner
from foxhunt.agents.fold_trainer import FoldTrainer, load_part
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.state import pack, unpack


class DirectTrainer(FoldTrainer):
    """Walk-forward direct-reinforcement training on device-resident market data."""

    def __init__(self, market: MarketData, env_params: EnvParams, cfg: DirectConfig, seed: int = 0,
                 cuda_graphs: bool = True) -> None:
        if market.fold is None:
            raise ValueError("DirectTrainer: set a fold on the market first")
        self.market, self.cfg, self.seed = market, cfg, seed
        self.device = market.device
        self.env = VecTradingEnv(market, 1, env_params, seed=seed)  # the parameters and the fold; never stepped
        self.monitor = EpochMonitor(self.device, extra_fields=SUMMARY_FIELDS)
        self.learner = DirectLearner(cfg, market, self.env.params, self.monitor, seed=seed)
        self._train = GraphedStep(self.learner.step, self.device, cuda_graphs, generators=[self.learner.generator])
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        check_window(self.cfg, fold)
        return super().reset_for_fold(fold, warm_start)

    def _reset_parts(self, warm_start: bool) -> None:
        self.learner.reset(reinit=not warm_start)

    def _seeders(self) -> list[Callable[[int], None]]:
        return [self.learner.generator.manual_seed]

    # ------------------------------------------------------------------ epochs
    def epoch_steps(self) -> Iterator[None]:
        """One epoch (``FoldTrainer.epoch_steps``): ``steps_per_epoch`` gradient steps, one per round."""
        self.monitor.reset()
        self.learner.record_idx.zero_()
        for _ in range(self.cfg.steps_per_epoch):
            self._train()
            self.rounds += 1
            yield
        self.learner.flush_records(self.cfg.steps_per_epoch)
        self._end_epoch()

    # ------------------------------------------------------------------ evaluation / export
    def policy_net(self) -> DuelingQNet:
        """The policy as a DuelingQNet over the factored actions: argmax = a market order of normal
        urgency at the policy's level (``DirectPolicy.greedy_net``)."""
        return self.learner.net.greedy_net()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """{component: its state dict} (``foxhunt.state`` convention); checkpoints save exactly these."""
        return {
            "learner": pack(self.learner.state_tensors(), generators={"windows": self.learner.generator}),
            "env": self.env.state_dict(),
            "trainer": self._host_state(),
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a DirectTrainer built with the same configuration, in place
        (captured graphs stay valid); ComponentStateError naming the component on a mismatch."""
        want = ("learner", "env", "trainer")
        if set(state) != set(want):
            raise ValueError(f"DirectTrainer: components {sorted(state)} ≠ this trainer's {sorted(want)}")
        gens = {"windows": self.learner.generator}
        load_part("learner", lambda st: unpack("DirectLearner", st, self.learner.state_tensors(), generators=gens),
                  state["learner"])
        load_part("env", self.env.load_state_dict, state["env"])
        self._load_host_state(state["trainer"])


def check_window(cfg: DirectConfig, fold: FoldRange) -> None:
    """direct.window must leave a start in the fold's training bars: T ≤ train length − 2 (ConfigError)."""
    if cfg.window > fold.train_len - 2:
        raise ConfigError(f"direct.window = {cfg.window} bars does not fit fold {fold.fold}'s {fold.train_len} training bars "
                          f"(must be <= {fold.train_len - 2}; set direct.window lower)")


__all__ = ["DirectTrainer", "check_window"]
