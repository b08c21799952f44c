"""ForecastTrainer: one object per process, reused across folds (the walk-forward runner's interface).

It owns the training env's parameters (a one-env ``VecTradingEnv``, never stepped: the fold, the
decision interval; the costs × the training multiplier as built are the execution band's), the
learner and the monitor. The gradient step is wrapped in ``GraphedStep``: captured once as a CUDA
graph on CUDA and replayed for the life of the process (a new fold changes device tensors the graph
reads), run eagerly on a CPU. An epoch is ``steps_per_epoch`` steps with no host reads, ending with
the one readback of the epoch summary.

The runner's interface (shared with the other trainers): ``env``, ``reset_for_fold``,
``train_epoch``, ``drain``, ``policy_net`` (the forecast traded through the costs, packed as a
DuelingQNet: ``execution.pack``), ``learner.net`` (the live module epoch selection snapshots) and
``state_dict`` / ``load_state_dict`` (``foxhunt.state``) for checkpoints.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from foxhunt.accel.graphs import GraphedStep
from foxhunt.agents.fold_trainer import FoldTrainer, load_part
from foxhunt.agents.forecast.config import ForecastConfig
from foxhunt.agents.forecast.evaluate import forecasts, training_error_variance
from foxhunt.agents.forecast.execution import Band, band, pack
from foxhunt.agents.forecast.learner import SUMMARY_FIELDS, ForecastLearner
from foxhunt.agents.forecast.target import sigma_h
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.params import BPS
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.state import pack as pack_state
from foxhunt.state import unpack


class ForecastTrainer(FoldTrainer):
    """Walk-forward supervised forecast training on device-resident market data."""

    def __init__(self, market: MarketData, env_params: EnvParams, cfg: ForecastConfig, seed: int = 0,
                 cuda_graphs: bool = True) -> None:
        if market.fold is None:
            raise ValueError("ForecastTrainer: set a fold on the market first")
        self.market, self.cfg, self.seed = market, cfg, seed
        self.device = market.device
        self.env = VecTradingEnv(market, 1, env_params, seed=seed)  # the parameters and the fold; never stepped
        # the band's costs: the training env's as built (× train.train_cost_multiplier), never a cost curriculum's
        # ramp, so that every epoch's greedy network (epoch selection) and the fold's model price trades alike
        self.exec_params = env_params
        self.h = cfg.horizon_for(self.env.decision_interval)
        self.monitor = EpochMonitor(self.device, extra_fields=SUMMARY_FIELDS)
        self.learner = ForecastLearner(cfg, market, self.monitor, self.h, seed=seed)
        self._train = GraphedStep(self.learner.step, self.device, cuda_graphs, generators=[self.learner.generator])
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        check_horizon(self.h, fold)
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

    # ------------------------------------------------------------------ execution / evaluation / export
    def band(self) -> Band:
        """The execution's constants at the current fold and weights (host reads: outside the hot loop)."""
        p = self.exec_params
        v = training_error_variance(self.learner.net, self.market, self.h, self.cfg.median_output) \
            if self.cfg.risk_aversion > 0 else 0.0
        return band(p.cost_bps * BPS, 0.5 * p.spread_bps * BPS, p.max_position, p.reserve,
                    float(sigma_h(self.market, self.h)), self.cfg.risk_aversion, v)

    def policy_net(self) -> DuelingQNet:
        """The forecast traded through the costs as a DuelingQNet over the factored actions (``execution.pack``)."""
        return pack(self.learner.net, self.band(), self.cfg.median_output)

    def forecasts(self, bars: torch.Tensor) -> torch.Tensor:
        """The median forecasts [N] float32 of market rows ``bars`` ([N] int64), normalised with the current fold."""
        return forecasts(self.learner.net, self.market, bars, self.cfg.median_output)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """{component: its state dict} (``foxhunt.state`` convention); checkpoints save exactly these."""
        return {
            "learner": pack_state(self.learner.state_tensors(), generators={"bars": self.learner.generator}),
            "env": self.env.state_dict(),
            "trainer": self._host_state(),
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a ForecastTrainer built with the same configuration, in place
        (captured graphs stay valid); ComponentStateError naming the component on a mismatch."""
        want = ("learner", "env", "trainer")
        if set(state) != set(want):
            raise ValueError(f"ForecastTrainer: components {sorted(state)} ≠ this trainer's {sorted(want)}")
        gens = {"bars": self.learner.generator}
        load_part("learner", lambda st: unpack("ForecastLearner", st, self.learner.state_tensors(), generators=gens),
                  state["learner"])
        load_part("env", self.env.load_state_dict, state["env"])
        self._load_host_state(state["trainer"])


def check_horizon(h: int, fold: FoldRange) -> None:
    """The horizon must leave training bars whose target lies in the fold's training slice (ConfigError)."""
    if h > fold.train_len - 2:
        raise ConfigError(f"forecast.horizon = {h} bars (0: env.decision_interval) leaves no training bar with a target "
                          f"inside fold {fold.fold}'s {fold.train_len} training bars (must be <= {fold.train_len - 2})")


__all__ = ["ForecastTrainer", "check_horizon"]
