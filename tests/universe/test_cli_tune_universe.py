"""`foxhunt tune` on a universe of several symbols (fresh processes): each fold of a trial trains one pooled agent
and is scored by its portfolio's validation Sharpe (inverse-volatility weights from the fold's training rows), the
study's deflated Sharpe and PBO are computed over those fold scores; a hold-out is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from foxhunt.config import build_config, load_config
from foxhunt.pipeline import prepare_universe
from tests.cli_run import assert_refused, run_ok
from tests.universe.conftest import SMALL, TINY_DQN, universe_files


def _study_config(tmp_path: Path, **tune: object) -> Path:
    cfg = {k: dict(v) for k, v in SMALL.items()}
    cfg["data"].update(source="file", path=str(universe_files(tmp_path / "u")))
    cfg["features"] = {"cache_dir": str(tmp_path / "cache")}
    cfg["dqn"] = dict(TINY_DQN)
    cfg["train"] = {"epochs": 1, "checkpoint_every": 0, "tensorboard": False, "progress": False}
    cfg["run"] = {"device": "cpu", "out_dir": str(tmp_path / "runs")}
    cfg["tune"] = {"study": "u", "out_dir": str(tmp_path / "studies"), "trials": 3, "startup_trials": 2, "holdout": 0.0,
                   "space": {"dqn.lr": {"low": 1e-4, "high": 1e-2, "log": True}}, **tune}
    return build_config(cfg).write(tmp_path)


def test_tune_on_a_universe_scores_each_fold_by_its_portfolio_and_reports_dsr_and_pbo(tmp_path: Path) -> None:
    path = _study_config(tmp_path)
    out = run_ok(tmp_path, "tune", "--config", str(path), "--workers", "1").stdout
    assert "each fold scored by its portfolio's validation Sharpe" in out
    d = tmp_path / "studies" / "u"
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] == 3 and s["n_folds"] == 2
    assert len(s["best"]["fold_sharpe"]) == 2 and all(math.isfinite(v) for v in s["best"]["fold_sharpe"])
    # the deflated Sharpe reads the portfolio's per-date returns: one per date of the union of the member symbols'
    # validation dates in each fold (not one per symbol and bar)
    prepared = prepare_universe(load_config(path))
    ts = prepared.market.timestamps_host
    dates = sum(len(np.unique(np.concatenate([ts[f.bounds[m, 2] + 1: f.bounds[m, 3]] for m in np.flatnonzero(f.member)])))
                for f in prepared.folds)
    over = s["overfitting"]
    assert over["deflated_sharpe"]["n_obs"] == dates < sum(int(f.val_len[f.member].sum()) for f in prepared.folds)
    assert 0.0 <= over["deflated_sharpe"]["dsr"] <= 1.0 and 0.0 <= over["pbo"]["pbo"] <= 1.0 and over["n_trials"] == 3


def test_tune_on_a_universe_refuses_a_hold_out_in_one_line(tmp_path: Path) -> None:
    path = _study_config(tmp_path, holdout=0.2)
    assert_refused(tmp_path, ["tune", "--config", str(path)],
                   "tune.holdout = 0.2: a hold-out on a universe of 3 symbols is not available yet; --set tune.holdout=0 "
                   "(the search then scores every fold)")
