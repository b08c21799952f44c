"""`foxhunt tune` on a universe of several symbols (fresh processes): each fold of a trial trains one pooled agent
and is scored by its portfolio's validation Sharpe (inverse-volatility weights from the fold's training rows), the
study's deflated Sharpe and PBO are computed over those fold scores; the default hold-out holds the last union-calendar
dates out of the search for every symbol and evaluates the best configuration's portfolio there once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from foxhunt.config import build_config, load_config
from foxhunt.data.universe import config_sources, load_universe
from foxhunt.pipeline import prepare_universe
from foxhunt.universe_folds import union_calendar
from tests.cli_run import run_ok
from tests.universe.conftest import SMALL, TINY_DQN, universe_files


def _study_config(tmp_path: Path, holdout: float | None = 0.0, **tune: object) -> Path:
    """The tiny universe's study; holdout None: tune.holdout left at its default."""
    cfg = {k: dict(v) for k, v in SMALL.items()}
    cfg["data"].update(source="file", path=str(universe_files(tmp_path / "u")))
    cfg["features"] = {"cache_dir": str(tmp_path / "cache")}
    cfg["dqn"] = dict(TINY_DQN)
    cfg["train"] = {"epochs": 1, "checkpoint_every": 0, "tensorboard": False, "progress": False}
    cfg["run"] = {"device": "cpu", "out_dir": str(tmp_path / "runs")}
    cfg["tune"] = {"study": "u", "out_dir": str(tmp_path / "studies"), "trials": 3, "startup_trials": 2,
                   "space": {"dqn.lr": {"low": 1e-4, "high": 1e-2, "log": True}}, **tune}
    if holdout is not None:
        cfg["tune"]["holdout"] = holdout
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


def test_tune_on_a_universe_holds_out_the_last_calendar_dates_and_scores_the_best_portfolio_there_once(tmp_path: Path) -> None:
    path = _study_config(tmp_path, holdout=None, trials=2, startup_trials=2)
    cfg = load_config(path)
    assert cfg.tune.holdout == 0.2  # the default: a user's first universe study
    calendar = union_calendar(load_universe(config_sources(cfg.data), cfg.data))
    u = len(calendar)
    cut = u - round(0.2 * u)
    cut_time = str(np.datetime64(int(calendar[cut]), "ns")) + "Z"
    out = run_ok(tmp_path, "tune", "--config", str(path), "--workers", "1").stdout
    assert f"hold-out 20% of the union calendar (every symbol from {cut_time[:19]})" in out
    s = json.loads((tmp_path / "studies" / "u" / "summary.json").read_text())
    # the search's folds: laid out on the calendar before the cut; no validation window reaches it, for any symbol
    # (each symbol's window is its bars inside the fold's calendar dates)
    assert s["n_folds"] == len(s["search_folds"]) == 2
    assert all(f["val_end"] <= cut and f["val_end_time"] <= cut_time for f in s["search_folds"])
    assert cut - s["search_folds"][-1]["val_end"] < 60  # whole validation spans (folds.val = 60) tile up to the cut
    # the hold-out: trained once up to one purge gap before the cut, evaluated once on [cut, U) for every symbol
    ho = s["holdout"]
    assert s["holdout_evaluations"] == 1 and Path(ho["run_dir"]).name == f"holdout-{s['best']['number']}"
    assert (ho["cut"], ho["cut_time"]) == (cut, cut_time) and ho["fold"]["universe"]
    assert (ho["fold"]["val_start"], ho["fold"]["val_end"]) == (cut, u)
    assert ho["fold"]["train_end"] == cut - (s["search_folds"][-1]["val_start"] - s["search_folds"][-1]["train_end"])
    assert {r["symbol"] for r in ho["symbols"]} == {"AAA", "BBB", "CCC"}
    assert all(r["val_first_time"] >= cut_time for r in ho["symbols"]) and ho["val_first_time"] == cut_time
    run = json.loads((Path(ho["run_dir"]) / "summary.json").read_text())
    folds = json.loads((Path(ho["run_dir"]) / "folds.json").read_text())
    assert len(folds) == 1 and folds[0]["val_start_time"] == cut_time
    # its result is the portfolio's, weighted as the search scores folds (tune.universe_weights)
    port = [r for r in run["portfolio"] if r["fold"] == 0 and r["weights"] == "inverse_vol" and r["label"] == "agent"]
    assert len(port) == 1 and ho["weights"] == "inverse_vol" and ho["agent"]["sharpe"] == port[0]["sharpe"]
    assert ho["agent"]["symbols"] == 3 and ho["buy_and_hold"]["label"] == "buy & hold" and math.isfinite(ho["agent"]["sharpe"])
    assert "union-calendar dates" in (tmp_path / "studies" / "u" / "report.html").read_text()
    # `foxhunt backtest --run` on the hold-out run backtests its one fold again (folds.json's, not the config's layout)
    run_ok(tmp_path, "backtest", "--run", ho["run_dir"], "--out", str(tmp_path / "bt"))
    again = [r for r in json.loads((tmp_path / "bt" / "metrics.json").read_text())
             if r["symbol"] == "portfolio" and r["window"] == 0 and r["weights"] == "inverse_vol" and r["label"] == "agent"]
    assert len(again) == 1 and again[0]["sharpe"] == pytest.approx(ho["agent"]["sharpe"], rel=1e-6)
