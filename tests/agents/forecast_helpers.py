"""Shared builders of the forecast learner's tests: a tiny trainer and a market with a planted edge."""

from __future__ import annotations

import dataclasses

import torch

from foxhunt.agents.forecast.config import ForecastConfig
from foxhunt.agents.forecast.trainer import ForecastTrainer
from foxhunt.env import EnvParams
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.agents.dqn_helpers import small_market
from tests.helpers import random_feature_set

ENV = EnvParams(episode_length=50, action_mode="factored")


def small_forecast(market: MarketData | None = None, seed: int = 0, graphs: bool = False, env: EnvParams = ENV,
                   **over) -> ForecastTrainer:
    """A ForecastTrainer of 3 steps × 64 bars an epoch, hidden (16, 16), on ``small_market`` by default."""
    kw = dict(batch=64, steps_per_epoch=3, hidden=(16, 16))
    kw.update(over)
    return ForecastTrainer(market or small_market(), env, ForecastConfig(**kw), seed=seed, cuda_graphs=graphs)


def edge_market(n: int = 4_000, seed: int = 0) -> MarketData:
    """A market whose first feature is the sign of the next bar's close-to-close return (a planted edge;
    the fill at the next open leaves the open-to-close part of it to earn)."""
    fs = random_feature_set(n, 4, seed=seed)
    close = fs.ohlc[:, 3].double()
    nxt = torch.zeros(n, dtype=torch.float64)
    nxt[:-1] = torch.sign(torch.log(close[1:] / close[:-1]))
    feats = fs.features.clone()
    feats[:, 0] = nxt.float()
    m = MarketData(dataclasses.replace(fs, features=feats), "cpu")
    m.set_fold(FoldRange(0, 0, 3_000, 3_010, n))
    return m
