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

import torch

from foxhunt.agents.forecast.config import ForecastConfig
from foxhunt.agents.forecast.evaluate import error_variance, forecasts
from foxhunt.agents.forecast.execution import Band, band, pack
from foxhunt.agents.forecast.learner import SUMMARY_FIELDS, ForecastLearner
from foxhunt.agents.forecast.target import sigma_h
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.params import BPS
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.agents.step_trainer import StepTrainer
from foxhunt.market import MarketData


class ForecastTrainer(StepTrainer):
    """Walk-forward supervised forecast training on device-resident market data."""

    GENERATOR = "bars"  # the learner's random stream in checkpoints: the training bars it draws

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
        self._build_step(cuda_graphs)
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None
        self.held_back: list[tuple[int, int]] = []  # the fold's held-back windows (set_held_back)

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        check_horizon(self.h, fold)
        return super().reset_for_fold(fold, warm_start)

    def set_held_back(self, window: tuple[int, int] | list[tuple[int, int]] | None) -> None:
        """The fold's held-back window (first bar, end bar exclusive: ``train.select = "inner"``'s tail of
        the training window, which the runner sets with each fold), a pooled universe's list of them (one
        per member symbol), or None; the risk term's error is measured there (``error_variance``). Never
        trained on: the trainer draws from its training part."""
        windows = [] if window is None else [window] if isinstance(window, tuple) else list(window)
        self.held_back = [(int(a), int(b)) for a, b in windows]

    def error_variance(self) -> tuple[float, str, int]:
        """(v, source, bars) of the risk term at the current weights (``evaluate.error_variance``; host reads)."""
        return error_variance(self.learner.net, self.market, self.h, self.cfg.median_output, self.held_back)

    # ------------------------------------------------------------------ execution / evaluation / export
    def band(self) -> Band:
        """The execution's constants at the current fold and weights (host reads: outside the hot loop)."""
        p = self.exec_params
        v = self.error_variance()[0] if self.cfg.risk_aversion > 0 else 0.0
        return band(p.cost_bps * BPS, 0.5 * p.spread_bps * BPS, p.max_position, p.reserve,
                    float(sigma_h(self.market, self.h)), self.cfg.risk_aversion, v)

    def policy_net(self) -> DuelingQNet:
        """The forecast traded through the costs as a DuelingQNet over the factored actions (``execution.pack``)."""
        return pack(self.learner.net, self.band(), self.cfg.median_output)

    def forecasts(self, bars: torch.Tensor) -> torch.Tensor:
        """The median forecasts [N] float32 of market rows ``bars`` ([N] int64), normalised with the current fold."""
        return forecasts(self.learner.net, self.market, bars, self.cfg.median_output)



def check_horizon(h: int, fold: FoldRange) -> None:
    """The horizon must leave training bars whose target lies in the fold's training slice (ConfigError)."""
    if h > fold.train_len - 2:
        raise ConfigError(f"forecast.horizon = {h} bars (0: env.decision_interval) leaves no training bar with a target "
                          f"inside fold {fold.fold}'s {fold.train_len} training bars (must be <= {fold.train_len - 2})")


__all__ = ["ForecastTrainer", "check_horizon"]
