"""`foxhunt backtest --model M --data DIR` on a universe, as the user runs it (a fresh process each):
per-symbol rows with a symbol column, the portfolio rows, the universe report; a bad file among good
ones is one exact line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backtest.test_cli_backtest import _model
from tests.backtest.test_universe_backtest import tiny_universe
from tests.cli_run import assert_refused, run_ok
from tests.data.universe_files import bars_frame, days, write


def test_backtest_of_a_directory_writes_symbol_rows_portfolio_rows_and_the_universe_report(tmp_path: Path) -> None:
    tiny_universe(tmp_path / "u")
    _model(tmp_path / "m.safetensors")
    out = run_ok(tmp_path, "backtest", "--model", "m.safetensors", "--data", "u", "--windows", "2", "--out", "bt",
                 "--device", "cpu", "--cache-dir", "cache").stdout
    assert "universe: 3 symbols × 2 window(s) each" in out and "model backtest: torch path" in out
    rows = json.loads((tmp_path / "bt" / "metrics.json").read_text())
    per = [r for r in rows if r["symbol"] != "portfolio"]
    assert [(r["symbol"], r["window"], r["label"]) for r in per] == [
        (s, w, label) for s in ("AAA", "BBB", "CCC") for w in (0, 1) for label in ("model", "buy & hold", "quant rule")]
    ports = [(r["weights"], r["label"]) for r in rows if r["symbol"] == "portfolio"]
    assert ports == [(w, label) for w in ("equal", "inverse_vol") for label in ("model", "buy & hold", "quant rule")]
    assert all(r["symbols"] == 3 and r["window"] == "all" for r in rows if r["symbol"] == "portfolio")
    assert (tmp_path / "bt" / "metrics.csv").read_text().startswith("symbol,window,label,start,end,")
    trades = json.loads((tmp_path / "bt" / "trades.json").read_text())
    assert {t["symbol"] for t in trades} <= {"AAA", "BBB", "CCC"} and all(t["window"] in (0, 1) for t in trades)
    html = (tmp_path / "bt" / "report.html").read_text()
    for heading in ("<h2>Portfolios</h2>", "<h2>Portfolio, equal-weight: 3 symbols on ",
                    "<h2>Portfolio, inverse-volatility-weighted: 3 symbols on ", "<h2>Sharpe per symbol and window (model)</h2>",
                    "<h2>Best 2 and worst 2 symbols (Sharpe of model, its windows joined)</h2>", "<h2>Per symbol and window</h2>",
                    "Timing apart from holding"):
        assert heading in html, heading
    assert "<h2>Per symbol: each symbol's windows joined</h2>" in html and all(f"<h3>{s}</h3>" in html for s in ("AAA", "BBB", "CCC"))
    assert html.count("data:image/png;base64,") == 6  # two portfolio figures, the heat map, one equity figure a symbol
    assert json.loads((tmp_path / "bt" / "accel.json").read_text())["eval"] == "torch"


def test_a_bad_file_among_good_ones_and_a_symbol_pick_without_files_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    tiny_universe(tmp_path / "u")
    bad = bars_frame(days("2020-01-01", 350), 7)
    bad.loc[41, "low"] = bad.loc[41, "open"] * 1.5
    write(tmp_path / "u" / "ABB.csv", bad)
    _model(tmp_path / "m.safetensors")
    assert_refused(tmp_path, ["backtest", "--model", "m.safetensors", "--data", "u", "--out", "bt", "--device", "cpu",
                              "--cache-dir", "cache"],
                   "file u/ABB.csv, row 42, timestamp 2020-02-11, column 'high': rule 'high-below-low' broken: "
                   f"high {float(bad.loc[41, 'high'])!r} < low {float(bad.loc[41, 'low'])!r}")
    assert_refused(tmp_path, ["backtest", "--model", "m.safetensors", "--out", "bt", "--device", "cpu",
                              "--set", 'data.symbols=["AAA"]'],
                   "--set data.symbols: a universe key, for --data files (not --sample)")
