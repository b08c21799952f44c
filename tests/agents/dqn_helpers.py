"""Small DQN setups shared by the agent tests."""

from __future__ import annotations

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set


def small_market(n_bars: int = 3_000, n_features: int = 6, seed: int = 0, device="cpu") -> MarketData:
    m = MarketData(random_feature_set(n_bars, n_features, seed=seed), device)
    m.set_fold(FoldRange(0, 0, int(n_bars * 0.7), int(n_bars * 0.7) + 10, n_bars))
    return m


def small_trainer(market: MarketData | None = None, seed: int = 0, **over) -> DQNTrainer:
    kw = dict(n_envs=16, rollout_len=4, rounds_per_epoch=4, train_steps_per_round=2, batch_size=32,
              buffer_capacity=4_096, warmup_transitions=64, hidden=(16, 16), head_hidden=8)
    kw.update(over)
    cfg = DQNConfig(**kw)
    return DQNTrainer(market or small_market(), EnvParams(episode_length=50, reward_scale=100.0), cfg, seed=seed)
