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
