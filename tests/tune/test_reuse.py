"""A worker loads the market once and reuses its trainer across trials that differ only in keys the
trainer takes in place (the learning rate, the epoch count): a reused trainer gives the same fold
results, bit for bit on the CPU, as a trainer built fresh for that trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from foxhunt.config import load_config
from foxhunt.tune.worker import TrialEvaluator
from tests.tiny import tiny_tune_config


@pytest.mark.slow
def test_reused_trainer_equals_a_fresh_one_and_the_market_loads_once(tmp_path: Path) -> None:
    cfg = load_config(tiny_tune_config(tmp_path))
    ev = TrialEvaluator(cfg)
    ev.evaluate({"dqn.lr": 1e-3})
    reused, _ = ev.evaluate({"dqn.lr": 5e-3})
    assert ev.stats == {"market_loads": 1, "runner_builds": 1, "runner_reuses": 1}
    fresh, _ = TrialEvaluator(cfg).evaluate({"dqn.lr": 5e-3})
    assert reused.sharpe == fresh.sharpe and reused.returns.sums == fresh.returns.sums
    first_again, _ = ev.evaluate({"dqn.lr": 1e-3, "dqn.gamma": 0.5})  # gamma is captured: a new trainer
    assert ev.stats == {"market_loads": 1, "runner_builds": 2, "runner_reuses": 1}
    assert first_again.sharpe != reused.sharpe


@pytest.mark.slow
def test_a_trial_that_turns_the_mirror_on_loads_the_market_again_with_its_mirror(tmp_path: Path) -> None:
    ev = TrialEvaluator(load_config(tiny_tune_config(tmp_path)))
    ev.evaluate({"dqn.lr": 1e-3})
    assert ev.stats["market_loads"] == 1 and ev._prepared.market.mirror_offset == 0
    ev.evaluate({"dqn.lr": 1e-3, "train.mirror": True})  # without a new market the runner's preflight refuses it
    assert ev.stats["market_loads"] == 2 and ev._prepared.market.mirror_offset == ev._prepared.market.n_bars
