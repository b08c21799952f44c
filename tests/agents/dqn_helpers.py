"""Small DQN setups shared by the agent tests."""

from __future__ import annotations

from dataclasses import fields

from foxhunt.accel.backend import ExecutionPlan
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


PLAN_KEYS = {f.name for f in fields(ExecutionPlan)}


def small_trainer(market: MarketData | None = None, seed: int = 0, **over) -> DQNTrainer:
    """A tiny DQNTrainer. Keyword arguments are DQNConfig fields, or ExecutionPlan fields
    (env_step, acting, train_step, replay, graphs, matmul_precision, readback: the plan is built
    directly, without the resolver's device rules, so tests can pin any component; graphs default
    to on with CUDA, as before)."""
    kw = dict(n_envs=16, rollout_len=4, rounds_per_epoch=4, train_steps_per_round=2, batch_size=32,
              buffer_capacity=4_096, warmup_transitions=64, hidden=(16, 16), head_hidden=8)
    plan_kw = {k: over.pop(k) for k in list(over) if k in PLAN_KEYS}
    kw.update(over)
    cfg = DQNConfig(**kw)
    m = market or small_market()
    plan_kw.setdefault("graphs", m.device.type == "cuda")  # as the torch backend resolves there
    plan = ExecutionPlan(device=str(m.device), **plan_kw)
    return DQNTrainer(m, EnvParams(episode_length=50, reward_scale=100.0), cfg, seed=seed, plan=plan)
