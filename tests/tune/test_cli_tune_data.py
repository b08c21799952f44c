"""`foxhunt tune --data FILE` without --config (a fresh process): the built-in study runs on the user's bars with
env.reward_scale fitted to their volatility, as `foxhunt train --data FILE` fits it (the built-in study's 100
suits daily bars; a minute file's rewards would be ~30 times too small)."""

from __future__ import annotations

from pathlib import Path

import optuna

from foxhunt.config import load_config
from foxhunt.data.loader import load_bars
from foxhunt.train.interval_presets import REWARD_STD, per_bar_sigma, round_sig
from tests.cli_run import run_ok


def test_tune_on_a_users_file_fits_the_reward_scale_to_its_bars_as_train_does(tmp_path: Path) -> None:
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    write_bars(generate_bars(6000, seed=3, bar_seconds=60), tmp_path / "m.parquet")  # a user's minute-bar file
    expect = round_sig(REWARD_STD / per_bar_sigma(load_bars(tmp_path / "m.parquet")))
    assert expect > 1_000  # minute bars: far from the built-in study's 100
    out = run_ok(tmp_path, "tune", "--data", "m.parquet", "--trials", "1", "--workers", "1", "--no-finish",
                 "--set", "folds.max_folds=1", "--set", "train.epochs=1", "--set", "tune.holdout=0").stdout
    assert f"env.reward_scale = {expect:g}: 1 / per-bar σ" in out
    study = load_config(tmp_path / "runs" / "tune" / "default" / "config.toml")  # what every worker trains with
    assert study.env.reward_scale == expect
    d = tmp_path / "runs" / "tune" / "default"
    trials = optuna.load_study(study_name="default", storage=f"sqlite:///{d / 'study.db'}").trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE]
