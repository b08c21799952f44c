"""`foxhunt tune` over a PPO search space (train.agent = "ppo", [tune.space] of ppo.* keys) in a fresh
process: median pruning over three folds, the hold-out evaluated once for the best trial, best.toml
holding the PPO agent and the best values, and `foxhunt train --config best.toml` training PPO from
it. A worker reuses its PPO trainer across trials that differ only in ppo.lr or repeat the previous
trial's values, with the fold results of a fresh trainer (a reused PPO trainer was once pointed at
the [dqn] section and crashed).

About 40 s on a 2-core CPU: slow."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.cli_run import run_ok
from tests.tiny import tiny_config

pytestmark = pytest.mark.slow

PPO_TUNE = """\
agent = "ppo"
[ppo]
n_envs = 16
rollout_len = 8
iterations_per_epoch = 2
minibatches = 2
update_epochs = 2
hidden = [16]
head_hidden = 8
gamma = 0.5
[tune]
study = "ppo"
out_dir = "{studies}"
trials = 4
startup_trials = 1
prune_warmup_folds = 0
holdout = 0.2
[tune.space]
ppo.lr = {{ low = 1e-4, high = 1e-2, log = true }}
ppo.ent_coef = {{ low = 0.0, high = 0.05 }}
ppo.clip_coef = [0.1, 0.3]
"""
"""Appended to the tiny config's [train] section (the first line) and after it: a four-trial PPO study."""


def ppo_tune_config(directory: Path) -> Path:
    """The tiny configuration (one epoch a fold) training PPO, with the four-trial PPO study; 100-bar
    validation windows on 2,100 bars (the tiny config's are 300 on 3,000: a trial's time is mostly its
    folds' and the hold-out's bar-by-bar validation; the hold-out is the last 420 bars, and the first of
    three search folds still trains on more than its 800)."""
    path = tiny_config(directory, epochs=1, every=0, report=True, extra=PPO_TUNE.format(studies=directory / "studies"))
    path.write_text(path.read_text().replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 2100\n", 1))
    assert "bars = 2100" in path.read_text()
    return path


def test_tune_searches_ppo_with_pruning_the_hold_out_and_a_best_toml_that_trains_ppo(tmp_path: Path) -> None:
    cfg = ppo_tune_config(tmp_path)
    out = run_ok(tmp_path, "tune", "--config", str(cfg), "--set", "folds.max_folds=3").stdout
    assert "study ppo (new)" in out and "3 folds" in out and "pruner median" in out
    d = tmp_path / "studies" / "ppo"
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] + s["counts"]["PRUNED"] == 4 and s["counts"]["FAIL"] == 0
    assert s["counts"]["PRUNED"] >= 1  # median pruning after a fold, against the trials before it

    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert {"param:ppo.lr", "param:ppo.ent_coef", "param:ppo.clip_coef", "fold_2_sharpe"} <= set(rows[0])
    pruned = [r for r in rows if r["state"] == "PRUNED"]
    assert pruned and all(int(r["folds_run"]) < 3 for r in pruned)
    assert all(int(r["folds_run"]) == 3 for r in rows if r["state"] == "COMPLETE")

    # the hold-out: the best trial's config retrained before the cut and evaluated once after it, as PPO
    ho = s["holdout"]
    assert ho["cut"] == ho["fold"]["val_start"] == 1680 and ho["fold"]["val_end"] == 2100
    assert s["holdout_evaluations"] == 1 and "entropy" in ho["last_epoch"]  # PPO's own summary fields
    assert 'agent = "ppo"' in (Path(ho["run_dir"]) / "config.toml").read_text()

    best = load_config(d / "best.toml")
    assert best.train.agent == "ppo" and "[tune]" not in (d / "best.toml").read_text()
    params = s["best"]["params"]
    assert best.ppo.lr == pytest.approx(params["ppo.lr"]) and best.ppo.ent_coef == pytest.approx(params["ppo.ent_coef"])
    assert best.ppo.clip_coef == params["ppo.clip_coef"]
    train = run_ok(tmp_path, "train", "--config", str(d / "best.toml"), "--folds", "1", "--epochs", "1", "--name", "b")
    assert "validation windows" in train.stdout
    run = tmp_path / "runs" / "b"
    assert json.loads((run / "accel.json").read_text())["agent"] == "ppo"
    assert "entropy" in json.loads((run / "metrics.jsonl").read_text().splitlines()[0])


def test_a_worker_reuses_its_ppo_trainer_with_the_fold_results_of_a_fresh_one(tmp_path: Path) -> None:
    from foxhunt.tune.worker import TrialEvaluator

    cfg = load_config(ppo_tune_config(tmp_path))
    ev = TrialEvaluator(cfg)
    base = {"ppo.ent_coef": 0.01, "ppo.clip_coef": 0.1}
    ev.evaluate({**base, "ppo.lr": 1e-3})
    reused, _ = ev.evaluate({**base, "ppo.lr": 5e-3})  # only the learning rate differs: taken in place
    again, _ = ev.evaluate({**base, "ppo.lr": 5e-3})  # the same values again
    assert ev.stats == {"market_loads": 1, "runner_builds": 1, "runner_reuses": 2}
    assert ev._runner.trainer.cfg is ev._runner.cfg.ppo and ev._runner.trainer.rollout.cfg is ev._runner.cfg.ppo
    fresh, _ = TrialEvaluator(cfg).evaluate({**base, "ppo.lr": 5e-3})
    for r in (reused, again):
        assert r.sharpe == fresh.sharpe and r.returns.sums == fresh.returns.sums
