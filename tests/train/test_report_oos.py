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


def test_each_fold_records_the_agents_exposure_and_timing_against_buy_and_hold_in_metrics_and_summary(run: Path) -> None:
    """metrics.json's ``timing`` is ``timing_block`` of the fold's own curves (the agent's returns and
    positions, buy-and-hold's returns on the same bars); summary.json's row and the fold line carry it."""
    from safetensors.numpy import load_file

    from foxhunt.backtest.timing import TIMING_KEYS, timing_block, timing_text
    from foxhunt.train.outputs import fold_line

    summary = json.loads((run / "summary.json").read_text())
    for f, row in zip(folds_of(run), summary["folds"]):
        rec = json.loads((run / "folds" / f"fold_{f.fold}" / "metrics.json").read_text())
        c = load_file(str(run / "folds" / f"fold_{f.fold}" / "curves.safetensors"))
        want = timing_block(c["agent_returns"], c["agent_positions"], c["bh_returns"], summary["bars_per_year"],
                            rec["agent"]["trade_count"])
        got = rec["timing"]
        assert list(got) == sorted(TIMING_KEYS)  # written with sorted keys
        for key in TIMING_KEYS:
            assert got[key] == (pytest.approx(want[key], rel=1e-12) if isinstance(want[key], float) else want[key]), key
        assert got["beta"] is not None and got["verdict"] in ("flat", "holding", "timing", "mistiming", "noise")
        assert got["time_in_market"] == pytest.approx(rec["agent"]["exposure_time"]) and got["bars"] == f.val_len - 1
        for key in ("beta", "timing_sharpe", "time_in_market", "long_share", "short_share", "trades", "verdict"):
            assert row[f"agent_{key}"] == got[key]
        assert fold_line(rec).endswith(timing_text(got)) and timing_text(got).startswith("β ")


def test_the_report_shows_each_folds_timing_beside_its_sharpe_and_the_joined_series_beta_and_timing(run: Path) -> None:
    import html as html_lib

    from foxhunt.backtest.timing import timing_block
    from foxhunt.backtest.timing_report import RULE, TIMING_HEAD, timing_cells

    page = (run / "report.html").read_text()
    assert "<th>win rate</th>" + TIMING_HEAD + "<th>B&amp;H Sharpe</th>" in page and html_lib.escape(RULE) in page
    results = [json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text()) for k in (0, 1)]
    for r in results:
        assert timing_cells(r["timing"]) in page
    folds = {k: read_fold(run, k) for k in (0, 1)}
    joined, _ = oos_inputs(run, results, folds)
    assert joined is not None and set(joined.positions) == {"agent", "bh", "quant"}
    bpy = json.loads((run / "summary.json").read_text())["bars_per_year"]
    table = page[page.index("Timing apart from holding (against buy &amp; hold, the windows joined)"):]
    for key, label in (("agent", "agent"), ("quant", "quant rule")):
        t = timing_block(joined.returns[key], joined.positions[key], joined.returns["bh"], bpy)
        row = re.search(rf"<td style='text-align:left'>{label}</td>(.*?)</tr>", table).group(1)
        assert row.startswith(f"<td>{t['beta']:+.2f}</td><td>{t['timing_sharpe']:+.2f}</td><td>{t['standard_error']:.2f}</td>")
        assert row.endswith(f"<td>{t['verdict']}</td>") and f"<td>{t['time_in_market']:.0%}</td>" in row
