"""`foxhunt tune` over a direct-learner search space (train.agent = "direct", [tune.space] of direct.*
keys) in a fresh process: every trial trains the direct learner, the hold-out is evaluated once for
the best trial, and best.toml holds the direct learner with the best values; a worker takes a new
direct.lr in place with the fold results of a fresh trainer. Slow (~1 min on a 2-core CPU)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.cli_run import run_ok
from tests.train.test_cli_train_direct import direct_config

pytestmark = pytest.mark.slow

DIRECT_TUNE = """\
[tune]
study = "direct"
out_dir = "{studies}"
trials = 3
startup_trials = 2
holdout = 0.2
[tune.space]
direct.lr = {{ low = 1e-4, high = 1e-2, log = true }}
direct.objective = ["sharpe", "dsr"]
direct.turnover_penalty = {{ low = 0.0, high = 5.0 }}
"""


def _short_val(cfg: Path) -> Path:
    """100-bar validation windows on 1,800 bars (the tiny config's are 300 on 3,000): a trial's time is mostly
    its folds' and the hold-out's bar-by-bar validation; the hold-out is the last 360 bars, and fold 0 still
    trains on more than its 800."""
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text()
    return cfg


def test_tune_searches_direct_keys_and_writes_a_best_toml_that_trains_the_direct_learner(tmp_path: Path) -> None:
    cfg = _short_val(direct_config(tmp_path, epochs=1, every=0, report=True, extra=DIRECT_TUNE.format(studies=tmp_path / "studies")))
    out = run_ok(tmp_path, "tune", "--config", str(cfg)).stdout
    assert "study direct (new)" in out
    d = tmp_path / "studies" / "direct"
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] + s["counts"].get("PRUNED", 0) == 3 and s["counts"]["FAIL"] == 0
    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert {"param:direct.lr", "param:direct.objective", "param:direct.turnover_penalty"} <= set(rows[0])
    ho = s["holdout"]
    assert s["holdout_evaluations"] == 1 and "objective" in ho["last_epoch"]  # the direct learner's own summary field
    assert 'agent = "direct"' in (Path(ho["run_dir"]) / "config.toml").read_text()
    best = load_config(d / "best.toml")
    params = s["best"]["params"]
    assert best.train.agent == "direct" and best.direct.lr == pytest.approx(params["direct.lr"])
    assert best.direct.objective == params["direct.objective"]
    train = run_ok(tmp_path, "train", "--config", str(d / "best.toml"), "--folds", "1", "--epochs", "1", "--name", "b")
    assert "validation windows" in train.stdout
    assert json.loads((tmp_path / "runs" / "b" / "accel.json").read_text())["agent"] == "direct"


def test_a_worker_takes_a_new_direct_lr_in_place_with_the_fold_results_of_a_fresh_trainer(tmp_path: Path) -> None:
    from foxhunt.tune.worker import TrialEvaluator

    cfg = load_config(_short_val(direct_config(tmp_path, epochs=1, every=0, extra=DIRECT_TUNE.format(studies=tmp_path / "studies"))))
    ev = TrialEvaluator(cfg)
    base = {"direct.objective": "sharpe", "direct.turnover_penalty": 1.0}
    ev.evaluate({**base, "direct.lr": 1e-3})
    reused, _ = ev.evaluate({**base, "direct.lr": 5e-3})
    assert ev.stats == {"market_loads": 1, "runner_builds": 1, "runner_reuses": 1}
    assert ev._runner.trainer.cfg is ev._runner.cfg.direct and ev._runner.trainer.learner.cfg is ev._runner.cfg.direct
    ev.evaluate({**base, "direct.lr": 5e-3, "direct.objective": "dsr"})  # another objective: a new trainer
    assert ev.stats["runner_builds"] == 2
    fresh, _ = TrialEvaluator(cfg).evaluate({**base, "direct.lr": 5e-3})
    assert reused.sharpe == fresh.sharpe and reused.returns.sums == fresh.returns.sums
