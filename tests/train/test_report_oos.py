"""report.html's out-of-sample tearsheet (issue 38 part 4): the inputs a finished run writes
(foxhunt.train.oos), the quant rule chosen in sample, the joined validation curve and its statistics
against the float64 reference, and a report rebuilt without those inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.backtest.metrics_reference import window_metrics
from foxhunt.backtest.quant_rules import quant_exposures
from foxhunt.backtest.tearsheet import monthly_returns
from foxhunt.cli import app
from foxhunt.config import load_config
from foxhunt.data import load_source
from foxhunt.folds import FoldRange
from foxhunt.train.oos import read_data, read_fold, read_trades
from foxhunt.train.report import oos_inputs, write_report
from tests.train.conftest import tiny_config


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("oos")
    cfg = tiny_config(d, epochs=1, every=0, report=True)
    res = CliRunner().invoke(app, ["train", "--config", str(cfg), "--name", "r"])
    assert res.exit_code == 0, res.output
    return d / "runs" / "r"


def folds_of(run: Path) -> list[FoldRange]:
    return [FoldRange(**{k: f[k] for k in ("fold", "train_start", "train_end", "val_start", "val_end")})
            for f in json.loads((run / "folds.json").read_text())]


def test_each_fold_records_its_validation_bar_times_and_the_data_line(run: Path) -> None:
    cfg = load_config(run / "config.toml")
    ts = load_source(cfg.data, limit_samples=True).timestamps
    for f in folds_of(run):
        c = read_fold(run, f.fold)
        assert c["times"].tolist() == ts[f.val_start : f.val_end].tolist()
        assert len(c["agent"]) == len(c["bh"]) == len(c["quant"]) == f.val_len - 1
    data = read_data(run)
    assert data is not None and data["data"]["bars"] == 3000 and data["data"]["interval_class"] == "intraday"


def test_the_quant_curve_is_the_rule_chosen_on_the_training_window_and_its_metrics_are_the_references(run: Path) -> None:
    cfg = load_config(run / "config.toml")
    bars = load_source(cfg.data, limit_samples=True)
    summary = json.loads((run / "summary.json").read_text())
    folds = folds_of(run)
    _, info = quant_exposures(bars.close, bars.volume, folds, cfg.env, float(summary["bars_per_year"]))
    for f, rule in zip(folds, info["rules"]):
        c = read_fold(run, f.fold)
        assert c["quant_info"]["rule"] == rule
        ref = window_metrics(c["quant"].tolist(), bars_per_year=summary["bars_per_year"])
        for key in ("total_return", "max_drawdown"):
            assert c["quant_info"]["metrics"][key] == pytest.approx(ref[key], rel=1e-4, abs=1e-7)


def test_the_joined_curve_is_the_folds_in_order_and_the_report_shows_the_references_statistics(run: Path) -> None:
    results = [json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text()) for k in (0, 1)]
    folds = {k: read_fold(run, k) for k in (0, 1)}
    joined, trades = oos_inputs(run, results, folds)
    assert joined is not None and joined.bounds == [len(folds[0]["agent"])]
    assert joined.returns["agent"].tolist() == folds[0]["agent"].tolist() + folds[1]["agent"].tolist()
    assert np.all(np.diff(joined.equity_times()) > 0)
    bpy = json.loads((run / "summary.json").read_text())["bars_per_year"]
    html = (run / "report.html").read_text()
    for key, label in (("agent", "agent"), ("bh", "buy &amp; hold"), ("quant", "quant rule")):
        ref = window_metrics(joined.returns[key].tolist(), bars_per_year=bpy)
        row = re.search(rf"<td style='text-align:left'>{re.escape(label)}</td>(.*?)</tr>", html).group(1)
        assert f"<td>{ref['total_return']:+.2%}</td>" in row and f"<td>{ref['max_drawdown']:.2%}</td>" in row
        assert f"<td>{ref['sharpe']:+.2f}</td>" in row
    month = next(iter(monthly_returns(joined.times, joined.returns["agent"]).values()))
    assert f"{month:+.1%}</td>" in html
    counts = [len(read_trades(run, k) or []) for k in (0, 1)]
    assert [t["trades"] for t in trades] == counts == [r["agent"]["trade_count"] for r in results]


def test_a_run_without_the_oos_files_still_gets_a_report_against_bars(run: Path, tmp_path: Path) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(run, old)
    for p in [old / "data.json", *old.glob("folds/fold_*/oos.safetensors")]:
        p.unlink()
    html = write_report(old).read_text()
    assert "Out of sample" not in html and html.count("data:image/png;base64,") == 2
    assert "quant rule (chosen in sample)" not in html
