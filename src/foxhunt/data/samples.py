"""Real daily index series shipped inside the ``arch`` package (no network access).

``sp500``: S&P 500 index, ``nasdaq``: NASDAQ Composite; each 5031 trading days from 1999-01-04 to
2018-12-31 (arch 8.0), files ``arch/data/<name>/<name>.csv.gz`` with columns
Date (US month/day/year), Open, High, Low, Close, Adj Close, Volume. We use Open/High/Low/Close/
Volume (Adj Close is ignored by the loader); each date becomes UTC midnight of that day.

Data quality, checked against every rule of ``validate.py`` (arch 8.0.0): no row breaks a rule:
no missing values, high >= max(open, close) and low <= min(open, close) on every day, dates
strictly increasing. NASDAQ has two days with volume 0 (2015-05-12 and 2018-01-09): volume >= 0 is
allowed, so they are kept as shipped (volume features see a 0 there). Nothing is repaired: the
files go through the strict loader, so a future arch release with a bad row fails loudly with
that row instead of being silently fixed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.loader import load_bars

__all__ = ["SAMPLES", "load_sample", "sample_path"]

SAMPLES = {
    "sp500": "S&P 500 index, daily, 1999-01-04 .. 2018-12-31 (arch package data)",
    "nasdaq": "NASDAQ Composite index, daily, 1999-01-04 .. 2018-12-31 (arch package data)",
}


def sample_path(name: str) -> Path:
    """Where the sample's CSV lives inside the installed ``arch`` package (without importing arch,
    which would pull in its estimation stack)."""
    key = _check_name(name)
    spec = importlib.util.find_spec("arch")
    if spec is None or not spec.submodule_search_locations:
        raise BarDataError("unreadable", "the 'arch' package is not installed", path=f"arch/data/{key}/{key}.csv.gz")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / key / f"{key}.csv.gz"


def load_sample(name: str) -> Bars:
    """The named daily series as Bars: [T] int64 UTC-midnight ns timestamps, [T] float64 OHLCV.

    Raises BarDataError rule 'unknown-sample' (listing the valid names) for any other name.
    """
    key = _check_name(name)
    path = sample_path(key)
    bars = load_bars(path)  # strict: the same validator as user files, no repair
    return dataclasses.replace(bars, source=f"arch:{key} ({path})")


def _check_name(name: str) -> str:
    key = str(name).strip().lower()
    if key not in SAMPLES:
        raise BarDataError("unknown-sample", f"no sample named {name!r}; valid names: {', '.join(SAMPLES)}")
    return key
