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


def test_the_cost_curriculum_ramps_from_no_costs_to_the_multiplier_over_its_epochs():
    from foxhunt.train.agent import cost_multiplier

    cfg = default_train_config(["train.train_cost_multiplier=3", "train.cost_curriculum=4"])
    assert [cost_multiplier(cfg, e) for e in range(6)] == pytest.approx([0.0, 0.75, 1.5, 2.25, 3.0, 3.0])
    assert training_env(cfg, 0.0).cost_bps == 0.0 and training_env(cfg, 0.0).spread_bps == 0.0
    off = default_train_config(["train.train_cost_multiplier=3"])
    assert [cost_multiplier(off, e) for e in range(3)] == [3.0, 3.0, 3.0]  # 0 (the default): no ramp


def test_a_negative_cost_curriculum_is_a_config_error():
    with pytest.raises(ConfigError, match="train.cost_curriculum"):
        default_train_config(["train.cost_curriculum=-1"])


@pytest.mark.slow
def test_each_epoch_of_every_fold_trains_at_its_curriculum_costs(tmp_path):
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.runner import WalkForwardRunner
    from tests.train.conftest import tiny_config

    path = tiny_config(tmp_path, epochs=3, every=0)
    assert "[train]\n" in path.read_text()
    text = path.read_text().replace("[train]\n", "[train]\ncost_curriculum = 2\ntrain_cost_multiplier = 3.0\nensemble = 2\n", 1)
    path.write_text(text)
    cfg = load_config(path)
    runner = WalkForwardRunner(prepare_market(cfg))
    base = float(runner.members[0].env.params.cost_rate[0])  # built with the full multiplier: 3 x the real rate
    seen: list[list[float]] = []
    for t in runner.members:  # the costs each member's epoch starts with (train.lockstep calls epoch_steps)
        steps = t.epoch_steps

        def spy(t=t, steps=steps):
            seen.append([float(t.env.params.cost_rate[0]), float(t.env.params.half_spread[0])])
            return steps()
        t.epoch_steps = spy
    runner.score_folds()
    per_epoch = [seen[i][0] / base for i in range(0, len(seen), 2)]  # member 0 (each epoch trains both members)
    assert per_epoch == pytest.approx([0.0, 0.5, 1.0] * len(runner.folds))
    assert [s[0] for s in seen[0::2]] == [s[0] for s in seen[1::2]]  # both members at the same costs
    assert base > 0
