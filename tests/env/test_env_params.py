"""EnvParams validation: every rule of ENV_SPEC's table, errors naming the parameter, value and rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from foxhunt.config import build_config
from foxhunt.env import EnvConfigError, EnvParams, EnvTensors, VecTradingEnv
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from tests.env.env_helpers import random_market

BAD_VALUES = [
    ("capital", 0.0),
    ("capital", float("inf")),
    ("max_position", 0.0),
    ("max_position", 10.5),
    ("reserve", 1.0),
    ("reserve", -0.1),
    ("cost_bps", -1.0),
    ("spread_bps", -0.5),
    ("impact_eta", -1e-9),
    ("max_impact", -0.1),
    ("participation", 0.0),
    ("participation", 1.5),
    ("vol_lambda", 1.0),
    ("vol_lambda", 0.0),
    ("profit_bps", 0.0),
    ("stop_bps", 10_000.0),
    ("stop_bps", 0.0),
    ("max_holding", 0),
    ("barrier_profit_scale", -1.5),
    ("barrier_stop_scale", -2.0),
    ("risk_threshold", 10.5),
    ("risk_threshold", -0.1),
    ("risk_weight", -1.0),
    ("diversity_threshold", 1.6),
    ("diversity_penalty", -1.0),
    ("curiosity_weight", -1.0),
    ("curiosity_max", -1.0),
    ("dsr_eta", 1.0),
    ("dsr_clip", 0.0),
    ("reward_scale", 0.0),
    ("kelly_fraction", 0.0),
    ("kelly_fraction", 1.5),
    ("kelly_min_mult", 0.0),
    ("kelly_min_trades", 0),
    ("kelly_alpha", 1.0),
    ("episode_length", 0),
    ("bust_fraction", 1.0),
    ("capital", float("nan")),
]


def test_defaults_satisfy_every_rule_and_the_table():
    p = EnvParams()
    assert p.capital == 1e6 and p.max_position == 1.0 and p.reserve == 0.05 and p.episode_length == 256
    assert p.n_actions == 45 and EnvParams(action_mode="exposure").n_actions == 5
    assert p.diversity_window == 100 and p.reward_mode == "return"


@pytest.mark.parametrize("name,value", BAD_VALUES)
def test_each_broken_rule_is_rejected_with_a_message_naming_the_parameter(name, value):
    with pytest.raises(ValidationError) as exc:
        EnvParams(**{name: value})
    text = str(exc.value)
    assert name in text
    assert "must be" in text or "valid" in text


def test_boundary_values_that_the_rules_allow_are_accepted():
    EnvParams(reserve=0.0, max_position=10.0, participation=1.0, risk_threshold=10.0,
              diversity_threshold=float(np.log2(3.0)), barrier_stop_scale=-1.0, bust_fraction=0.0,
              cost_bps=0.0, kelly_fraction=1.0, kelly_min_mult=1.0, max_holding=1, episode_length=1)


def test_structural_fields_reject_unknown_values_and_keys():
    with pytest.raises(ValidationError, match="reward_mode"):
        EnvParams(reward_mode="sharpe")
    with pytest.raises(ValidationError, match="action_mode"):
        EnvParams(action_mode="continuous")
    with pytest.raises(ValidationError, match="diversity_window"):
        EnvParams(diversity_window=50)
    with pytest.raises(ValidationError, match="cost_bp"):
        EnvParams(cost_bp=1.0)


def test_env_section_is_registered_and_build_config_names_section_key_and_value():
    cfg = build_config({"env": {"cost_bps": 2.5}})
    assert isinstance(cfg.env, EnvParams) and cfg.env.cost_bps == 2.5
    with pytest.raises(ConfigError, match=r"env\.cost_bps.*-3"):
        build_config({"env": {"cost_bps": -3.0}})


def test_per_env_override_with_a_negative_cost_names_the_env_index():
    cost = torch.tensor([1.0, 2.0, -0.5, 1.0])
    with pytest.raises(EnvConfigError, match=r"cost_bps.*\[2\].*-0\.5"):
        EnvTensors.build(EnvParams(), 4, "cpu", {"cost_bps": cost})


def test_per_env_overrides_check_shape_name_integrality_and_bools():
    with pytest.raises(EnvConfigError, match="shape"):
        EnvTensors.build(EnvParams(), 4, "cpu", {"cost_bps": torch.ones(3)})
    with pytest.raises(EnvConfigError, match="reward_mode|not a per-env"):
        EnvTensors.build(EnvParams(), 4, "cpu", {"reward_mode": torch.ones(4)})
    with pytest.raises(EnvConfigError, match=r"max_holding.*\[1\]"):
        EnvTensors.build(EnvParams(), 2, "cpu", {"max_holding": [5, 2.5]})
    with pytest.raises(EnvConfigError, match=r"kelly.*\[0\]"):
        EnvTensors.build(EnvParams(), 2, "cpu", {"kelly": [2, 1]})


def test_per_env_tensors_hold_overrides_and_derived_fractions():
    p = EnvTensors.build(EnvParams(cost_bps=2.0, spread_bps=4.0), 3, "cpu", {"capital": [1.0, 2.0, 3.0], "kelly": [0, 1, 0]})
    assert p.capital.tolist() == [1.0, 2.0, 3.0] and p.capital.dtype == torch.float32
    assert p.kelly.tolist() == [False, True, False]
    torch.testing.assert_close(p.cost_rate, torch.full((3,), 2e-4))
    torch.testing.assert_close(p.half_spread, torch.full((3,), 2e-4))
    torch.testing.assert_close(p.bust_level, torch.tensor([0.1, 0.2, 0.3]))
    assert p.episode_length.dtype == torch.int64 and p.max_episode_length == 256


def test_update_in_place_keeps_the_same_tensors():
    p = EnvTensors.build(EnvParams(), 2, "cpu")
    before = p.cost_rate
    p.update_(EnvParams(cost_bps=3.0))
    assert p.cost_rate is before and torch.allclose(before, torch.full((2,), 3e-4))
    with pytest.raises(EnvConfigError, match="reward_mode"):
        p.update_(EnvParams(reward_mode="pnl"))


def test_episode_length_longer_than_the_fold_allows_is_rejected_when_bound():
    m = random_market(400, fold=FoldRange(0, 0, 100, 150, 400))
    with pytest.raises(EnvConfigError, match=r"episode_length = 100.*train length - 1 = 99"):
        VecTradingEnv(m, 2, EnvParams(episode_length=100))
    env = VecTradingEnv(m, 2, EnvParams(episode_length=99))
    with pytest.raises(ValueError, match="episode_length"):
        env.set_fold(FoldRange(1, 0, 50, 150, 400))
    with pytest.raises(ConfigError, match="episode_length"):
        VecTradingEnv(m, 2, EnvParams(), per_env={"episode_length": [10, 150]})
