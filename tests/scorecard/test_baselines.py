"""Scorecard baselines on a small leak market: the classifier finds the leak; SB3 DQN trains and is
backtested through our Gymnasium wrapper and backtester (nothing saved or loaded)."""

from __future__ import annotations

import math

import numpy as np

from foxhunt.backtest.evaluator import Backtester
from foxhunt.env import EnvParams
from foxhunt.features.extra import append_columns
from foxhunt.features.spec import build_features
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.scorecard.baselines import sb3_scores, supervised_exposures
from foxhunt.scorecard.build import SCENARIO_ENV
from foxhunt.scorecard.markets import make_scenario

FOLD = FoldRange(0, 303, 1100, 1160, 1400)


def _leak_market():
    sc = make_scenario("leak", 1400)
    m = MarketData(append_columns(build_features(sc.bars), sc.extra))
    m.set_fold(FOLD)
    return sc, m


def test_the_supervised_classifier_trades_the_leak():
    sc, m = _leak_market()
    params = EnvParams(**SCENARIO_ENV, action_mode="exposure")
    ex, info = supervised_exposures(m, [FOLD], params)
    got = ex[0]
    assert got.shape == (FOLD.val_len - 1,) and len(info["margins"]) == 1
    oracle = sc.oracles["oracle"][FOLD.val_start : FOLD.val_end - 1]
    assert np.mean(got == oracle) > 0.8  # the leak is one feature away: a tree finds it


def test_sb3_dqn_trains_through_the_gym_wrapper_and_is_backtested_greedily(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3's default logger would make its folder
    _, m = _leak_market()
    params = EnvParams(**SCENARIO_ENV, action_mode="exposure", episode_length=64)
    rows, info = sb3_scores("dqn", m, [FOLD], params, gamma=0.5, budget=96, backtester=Backtester(m, params, chunk=16))
    assert list(tmp_path.glob("SB3-*")) == []  # no empty SB3-<time> folder left in the temp directory
    metrics, returns, positions, costs = rows[0]
    assert returns.shape == positions.shape == (FOLD.val_len - 1,)
    assert math.isfinite(metrics["total_return"]) and costs >= 0.0
    assert info["budget_steps_per_fold"] == 96


def test_sb3_ppo_trains_and_its_greedy_backtest_acts_as_sb3s_deterministic_predict():
    import torch

    from foxhunt.env.gym_wrapper import TradingEnv
    from foxhunt.scorecard.baselines import _sb3_model

    _, m = _leak_market()
    params = EnvParams(**SCENARIO_ENV, action_mode="exposure", episode_length=64)
    rows, info = sb3_scores("ppo", m, [FOLD], params, gamma=0.5, budget=128, backtester=Backtester(m, params, chunk=16))
    metrics, returns, positions, costs = rows[0]
    assert returns.shape == positions.shape == (FOLD.val_len - 1,)
    assert math.isfinite(metrics["total_return"]) and costs >= 0.0
    assert info["algo"] == "ppo" and info["budget_steps_per_fold"] == 128

    model, greedy = _sb3_model("ppo", TradingEnv(m, params, seed=0), 0.5, 128, 0, m.device)
    obs = torch.randn(32, model.observation_space.shape[0])
    ours = greedy(obs).argmax(1).numpy()
    theirs, _ = model.predict(obs.numpy(), deterministic=True)
    assert (ours == theirs).all()
