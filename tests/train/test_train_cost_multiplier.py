"""train.train_cost_multiplier: the training env charges k x costs, evaluation the real ones."""

from __future__ import annotations

import pytest

from foxhunt.errors import ConfigError
from foxhunt.train.config import default_train_config
from foxhunt.train.agent import training_env


def test_training_env_multiplies_commission_and_spread_and_nothing_else():
    cfg = default_train_config(["env.cost_bps=2.0", "env.spread_bps=1.5", "train.train_cost_multiplier=3"])
    env = training_env(cfg)
    assert env.cost_bps == pytest.approx(6.0) and env.spread_bps == pytest.approx(4.5)
    assert cfg.env.cost_bps == 2.0  # the evaluation's parameters are untouched
    assert env.model_dump(exclude={"cost_bps", "spread_bps"}) == cfg.env.model_dump(exclude={"cost_bps", "spread_bps"})
    plain = default_train_config(["train.train_cost_multiplier=1"])
    assert training_env(plain) is plain.env  # k = 1: the same parameters


def test_a_multiplier_below_one_is_a_config_error():
    with pytest.raises(ConfigError, match="train.train_cost_multiplier"):
        default_train_config(["train.train_cost_multiplier=0.5"])


def test_the_built_in_train_config_trains_against_three_times_the_costs():
    cfg = default_train_config()
    assert cfg.train.train_cost_multiplier == 3.0 and training_env(cfg).cost_bps == 3.0 * cfg.env.cost_bps
