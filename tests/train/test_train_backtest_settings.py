"""`foxhunt train --bars-per-year` and `backtest.barriers`: the validation backtests use them and
every output says so (fold metrics.json, summary.json, trades.csv, report.html)."""

from __future__ import annotations

import csv
import json
import os
import subprocess

import pytest

from tests.train.conftest import CLI, tiny_config


@pytest.mark.slow
def test_train_reports_the_annualisation_it_was_given_and_labels_trades_with_barriers(tmp_path):
    cfg = tiny_config(tmp_path, epochs=1, every=0, report=True)
    res = subprocess.run(CLI + ["--config", str(cfg), "--name", "bpy", "--bars-per-year", "6205",
                                "--set", "backtest.barriers=true", "--set", "folds.max_folds=1"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    run = tmp_path / "runs" / "bpy"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["bars_per_year"] == 6205.0 and "set by the user" in summary["annualisation"]
    fold = json.loads(next((run / "folds").glob("fold_*/metrics.json")).read_text())
    assert fold["agent"]["bars_per_year"] == 6205.0 and fold["buy_and_hold"]["bars_per_year"] == 6205.0
    with open(next((run / "folds").glob("fold_*/trades.csv"))) as fh:
        assert "barrier" in next(csv.reader(fh))
    html = (run / "report.html").read_text()
    assert "6,205.0 bars per year (set by the user)" in html and "triple-barrier labels" in html
    assert "bars_per_year = 6205.0" in (run / "config.toml").read_text()
