"""`foxhunt train --data DIR` on a universe writes its portfolios (per fold and stitched, agent beside buy-and-hold
and the in-sample quant rule), per-symbol rows and report.html, and `foxhunt backtest --run` on that run gives
the same rows, number for number (fresh processes, CPU)."""

from __future__ import annotations

from pathlib import Path

from tests.universe.conftest import universe_files
from tests.universe.walk_checks import check_walk, train_and_backtest_run


def test_universe_run_writes_portfolio_and_symbol_rows_and_backtest_run_reproduces_them(tmp_path: Path) -> None:
    universe_files(tmp_path / "u")
    run, summary, out = train_and_backtest_run(tmp_path, "u", "walk", "--folds", "2")
    assert "portfolios, out of sample" in out and "report: runs/walk/report.html" in out
    check_walk(run, summary, ["AAA", "BBB", "CCC"])
