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

from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.learner import SUMMARY_FIELDS, DirectLearner
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.agents.step_trainer import StepTrainer
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData


class DirectTrainer(StepTrainer):
    """Walk-forward direct-reinforcement training on device-resident market data."""

    GENERATOR = "windows"  # the learner's random stream in checkpoints: the windows it draws

    def __init__(self, market: MarketData, env_params: EnvParams, cfg: DirectConfig, seed: int = 0,
                 cuda_graphs: bool = True) -> None:
        if market.fold is None:
            raise ValueError("DirectTrainer: set a fold on the market first")
        self.market, self.cfg, self.seed = market, cfg, seed
        self.device = market.device
        self.env = VecTradingEnv(market, 1, env_params, seed=seed)  # the parameters and the fold; never stepped
        self.monitor = EpochMonitor(self.device, extra_fields=SUMMARY_FIELDS)
        self.learner = DirectLearner(cfg, market, self.env.params, self.monitor, seed=seed)
        self._build_step(cuda_graphs)
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        check_window(self.cfg, fold)
        return super().reset_for_fold(fold, warm_start)

    # ------------------------------------------------------------------ evaluation / export
    def policy_net(self) -> DuelingQNet:
        """The policy as a DuelingQNet over the factored actions: argmax = a market order of normal
        urgency at the policy's level (``DirectPolicy.greedy_net``)."""
        return self.learner.net.greedy_net()



def check_window(cfg: DirectConfig, fold: FoldRange) -> None:
    """direct.window must leave a start in the fold's training bars: T ≤ train length − 2 (ConfigError)."""
    if cfg.window > fold.train_len - 2:
        raise ConfigError(f"direct.window = {cfg.window} bars does not fit fold {fold.fold}'s {fold.train_len} training bars "
                          f"(must be <= {fold.train_len - 2}; set direct.window lower)")


__all__ = ["DirectTrainer", "check_window"]
