"""`foxhunt train` on a universe of several symbols, as the user runs it (fresh processes): `--data DIR` trains
one pooled agent a fold and writes per-symbol rows; a run SIGKILLed after its first committed checkpoint and
continued with `--resume` in a new process ends with the uninterrupted run's files, bit for bit (with and without
train.mirror: the resumed process uploads the mirrored rows again from the run's config); the forecast learner's
pooled run and its backtest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run_ok
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted
from tests.universe.conftest import TINY_DQN, config, universe_files


def test_train_data_dir_trains_one_pooled_agent_a_fold_and_writes_per_symbol_rows(tmp_path: Path) -> None:
    universe_files(tmp_path / "u")
    out = run_ok(tmp_path, "train", "--data", "u", "--folds", "1", "--epochs", "1", "--name", "pooled",
                 "--set", "dqn.rounds_per_epoch=2", "--set", "dqn.warmup_transitions=256", "--set", "train.tensorboard=false",
                 "--set", "run.device=cpu", "--set", "run.out_dir=runs", "--set", "features.cache_dir=cache").stdout
    assert "universe: 3 symbols, 2670 bars; 1 folds (member symbols: 3)" in out
    run = tmp_path / "runs" / "pooled"
    m = json.loads((run / "folds" / "fold_0" / "metrics.json").read_text())
    assert [s["symbol"] for s in m["symbols"]] == ["AAA", "BBB", "CCC"] and m["agent"] == m["pooled"]
    assert json.loads((run / "summary.json").read_text())["folds"][0]["fold"] == 0
    assert "summary: runs/pooled/summary.json" in out.replace("\n", "")


@pytest.mark.parametrize("mirror", [False, True], ids=["plain", "mirror"])
def test_a_universe_run_killed_after_its_first_checkpoint_resumes_to_the_uninterrupted_result(tmp_path: Path,
                                                                                          mirror: bool) -> None:
    d = universe_files(tmp_path / "u")
    cfg = config(tmp_path, d, dqn=TINY_DQN, train={"epochs": 3, "checkpoint_every": 1, "select": "inner", "abstain": True,
                                                   "abstain_z": 0.0, "tensorboard": False, "progress": False, "report": False,
                                                   "mirror": mirror},
                 run={"out_dir": str(tmp_path / "runs"), "device": "cpu"})
    path = cfg.write(tmp_path)
    killed_in_fold_0_then_resumed_equals_uninterrupted(path, tmp_path)


def test_train_data_dir_with_the_forecast_learner_reports_a_pooled_ic_and_backtests_its_run(tmp_path: Path) -> None:
    """train.agent = forecast on a universe, as a user runs it: one pooled forecast a fold, the fold's
    learner_eval over every member's validation bars, and `foxhunt backtest --run` of the run in a new process."""
    universe_files(tmp_path / "u")
    common = ("--set", "run.device=cpu", "--set", "features.cache_dir=cache")
    trained = run_ok(tmp_path, "train", "--data", "u", "--folds", "1", "--epochs", "1", "--name", "fc", "--set",
                     'train.agent="forecast"', "--set", 'env.action_mode="factored"', "--set", "forecast.hidden=[16,16]",
                     "--set", "forecast.steps_per_epoch=4", "--set", "forecast.batch=64", "--set", "train.tensorboard=false",
                     "--set", "run.out_dir=runs", *common).stdout
    assert "forecast IC" in trained  # the fold line's words for the pooled learner_eval
    m = json.loads((tmp_path / "runs" / "fc" / "folds" / "fold_0" / "metrics.json").read_text())
    ev = m["learner_eval"]
    assert ev["kind"] == "forecast" and ev["horizon"] == 1
    assert ev["n"] == sum(s["val_bars"] for s in m["symbols"]) - len(m["symbols"]) and -1.0 <= ev["ic_spearman"] <= 1.0
    out = run_ok(tmp_path, "backtest", "--run", "runs/fc", "--device", "cpu").stdout
    assert "AAA" in out and "portfolio" in out.lower()
