"""The agent-generic side of the walk-forward runner: which trainer, and what the runner asks of it.

``train.agent`` picks the learner from ``foxhunt.agents.registry`` ("dqn" | "ppo" | "direct" | "forecast"). Every
trainer implements ``AgentTrainer``:
built once per process, ``reset_for_fold`` between folds, ``train_epoch`` / ``drain`` for epochs
(one summary readback each), a greedy network for evaluation and the model file, and their
device state for checkpoints (``state_dict`` / ``load_state_dict``, ``foxhunt.state``).
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import nn

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents import registry
from foxhunt.agents.monitor import EpochSummary
from foxhunt.config import Config
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData


class AgentTrainer(Protocol):
    env: Any  # VecTradingEnv: n_actions, obs_dim

    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float: ...

    def train_epoch(self) -> EpochSummary | None: ...

    def drain(self) -> list[EpochSummary]: ...


def training_env(cfg: Config, multiplier: float | None = None) -> Any:
    """The training env's parameters: ``cfg.env`` with costs × ``multiplier`` (default
    ``train.train_cost_multiplier``; validation always backtests with ``cfg.env``'s real costs)."""
    k = cfg.train.train_cost_multiplier if multiplier is None else float(multiplier)
    if k == 1.0:
        return cfg.env
    return cfg.env.model_copy(update={"cost_bps": cfg.env.cost_bps * k, "spread_bps": cfg.env.spread_bps * k})


def cost_multiplier(cfg: Config, epoch: int) -> float:
    """The training cost multiplier of a fold's epoch ``epoch`` (0-based): ``train.train_cost_multiplier``,
    or with ``train.cost_curriculum`` = N > 0 the ramp k · min(1, epoch / N), so that a learner first sees
    what the market pays before the costs it must clear (a constant ×3 pinned PPO's greedy policy to flat
    within its first epoch: docs/LEARNING.md)."""
    k, n = float(cfg.train.train_cost_multiplier), int(cfg.train.cost_curriculum)
    return k if n <= 0 else k * min(1.0, epoch / n)


def env_steps_per_epoch(cfg: Config) -> int:
    """Env steps (bars trained on) in one training epoch of the configured agent (its registry entry):
    DQN rounds × rollout × envs, PPO iterations × rollout × envs, direct steps × windows × window bars."""
    return registry.of(cfg).bars_per_epoch(cfg)


def build_trainer(market: MarketData, config: Config, plan: ExecutionPlan) -> AgentTrainer:
    """The configured trainer (``train.agent``'s registry entry) on ``market`` (whose fold is set), run as
    ``plan`` (``foxhunt.accel.backend.resolve``) says, with the training env's costs (``training_env``)."""
    return registry.of(config).build(market, config, plan, training_env(config))


def policy_net(trainer: Any) -> nn.Module:
    """The network whose argmax is the trainer's greedy action (a DuelingQNet for every agent: DQN's
    online network; PPO's actor packed with a zero value head, see ActorCritic.greedy_net; the direct
    policy's levels as market orders, see DirectPolicy.greedy_net)."""
    if hasattr(trainer, "policy_net"):
        return trainer.policy_net()
    return trainer.learner.online


def trained_module(trainer: Any) -> nn.Module:
    """The live module holding the parameters that training changes and the greedy policy reads
    (DQN: the online Q-network; PPO: the actor-critic; direct: the policy), for in-place snapshots
    (epoch selection)."""
    learner = trainer.learner
    return learner.online if hasattr(learner, "online") else learner.net
