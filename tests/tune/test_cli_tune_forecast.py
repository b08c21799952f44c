"""`foxhunt tune` over a forecast-learner search space (train.agent = "forecast", [tune.space] of
forecast.* keys) in a fresh process: every trial trains the forecast learner, the hold-out is
evaluated once for the best trial, and best.toml holds the forecast learner with the best values; a
worker takes a new forecast.lr in place with the fold results of a fresh trainer."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.cli_run import run_ok
from tests.train.test_cli_train_forecast import forecast_config

pytestmark = pytest.mark.slow

FORECAST_TUNE = """\
[tune]
study = "forecast"
out_dir = "{studies}"
trials = 2
startup_trials = 2
holdout = 0.2
[tune.space]
forecast.lr = {{ low = 1e-4, high = 1e-2, log = true }}
forecast.risk_aversion = {{ low = 0.0, high = 1.0 }}
"""


def test_tune_searches_forecast_keys_and_writes_a_best_toml_that_trains_the_forecast_learner(tmp_path: Path) -> None:
    cfg = forecast_config(tmp_path, epochs=1, every=0, report=False, extra=FORECAST_TUNE.format(studies=tmp_path / "studies"))
    out = run_ok(tmp_path, "tune", "--config", str(cfg)).stdout
    assert "study forecast (new)" in out
    d = tmp_path / "studies" / "forecast"
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] + s["counts"].get("PRUNED", 0) == 2 and s["counts"]["FAIL"] == 0
    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert {"param:forecast.lr", "param:forecast.risk_aversion"} <= set(rows[0])
    ho = s["holdout"]
    assert s["holdout_evaluations"] == 1 and "forecast_mse" in ho["last_epoch"]  # the forecast learner's own summary field
    assert 'agent = "forecast"' in (Path(ho["run_dir"]) / "config.toml").read_text()
    best = load_config(d / "best.toml")
    params = s["best"]["params"]
    assert best.train.agent == "forecast" and best.forecast.lr == pytest.approx(params["forecast.lr"])
    assert best.forecast.risk_aversion == pytest.approx(params["forecast.risk_aversion"])


def test_a_worker_takes_a_new_forecast_lr_in_place_with_the_fold_results_of_a_fresh_trainer(tmp_path: Path) -> None:
    from foxhunt.tune.worker import TrialEvaluator

    cfg = load_config(forecast_config(tmp_path, epochs=1, every=0, extra=FORECAST_TUNE.format(studies=tmp_path / "studies")))
    ev = TrialEvaluator(cfg)
    base = {"forecast.risk_aversion": 0.5}
    ev.evaluate({**base, "forecast.lr": 1e-3})
    reused, _ = ev.evaluate({**base, "forecast.lr": 5e-3})
    assert ev.stats == {"market_loads": 1, "runner_builds": 1, "runner_reuses": 1}
    assert ev._runner.trainer.cfg is ev._runner.cfg.forecast and ev._runner.trainer.learner.cfg is ev._runner.cfg.forecast
    ev.evaluate({**base, "forecast.lr": 5e-3, "forecast.risk_aversion": 0.1})  # another risk term: a new trainer
    assert ev.stats["runner_builds"] == 2
    fresh, _ = TrialEvaluator(cfg).evaluate({**base, "forecast.lr": 5e-3})
    assert reused.sharpe == fresh.sharpe and reused.returns.sums == fresh.returns.sums
