"""A universe of real daily series shipped inside public packages, end to end in fresh processes: GOOG
(``backtesting``'s test data, 2004-08-19 .. 2013-03-01) and the S&P 500 and NASDAQ Composite indices (``arch``'s,
1999-01-04 .. 2018-12-31), written as they ship, one symbol a file, into a folder; ``foxhunt train --data DIR``
(tiny epochs, the folds the data fit) then ``foxhunt backtest --run``. The three calendars differ (GOOG ends
five years early: it sits the later folds out)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from tests.universe.walk_checks import check_walk, train_and_backtest_run


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # located, not imported (backtesting would import bokeh)
    assert spec is not None and spec.submodule_search_locations, f"the test extra {name!r} is not installed"
    return Path(list(spec.submodule_search_locations)[0])


def real_universe(d: Path) -> Path:
    """GOOG.csv, SP500.csv.gz, NASDAQ.csv.gz in ``d``, byte for byte as their packages ship them."""
    d.mkdir(parents=True)
    shutil.copy(_package_dir("backtesting") / "test" / "GOOG.csv", d / "GOOG.csv")
    for name in ("sp500", "nasdaq"):
        shutil.copy(_package_dir("arch") / "data" / name / f"{name}.csv.gz", d / f"{name.upper()}.csv.gz")
    return d


def test_real_daily_universe_trains_pooled_and_backtests_per_symbol_and_as_portfolios(tmp_path: Path) -> None:
    real_universe(tmp_path / "stocks")
    run, summary, out = train_and_backtest_run(tmp_path, "stocks", "real")
    assert "universe: 3 symbols, 12210 bars" in out
    check_walk(run, summary, ["GOOG", "NASDAQ", "SP500"])
    members = {r["symbol"] for r in summary["symbols"] if r["fold"] == summary["folds"][-1]["fold"]}
    assert members == {"NASDAQ", "SP500"}  # GOOG's last bar is before the last fold
