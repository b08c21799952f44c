"""Small bar files for the universe tests: random walks on a chosen calendar, written as a user's tools
write them (CSV with a Date column, Parquet, gzipped CSV, FinRL's long table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def bars_frame(index: pd.DatetimeIndex, seed: int) -> pd.DataFrame:
    """OHLCV rows on ``index``: a random walk with consistent high / low and integer volume."""
    n = len(index)
    rng = np.random.default_rng(seed)
    c = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    o = np.r_[c[0], c[:-1]]
    return pd.DataFrame({"date": index, "open": o, "high": np.maximum(o, c) * 1.002, "low": np.minimum(o, c) * 0.998, "close": c,
                         "volume": rng.integers(1, 1000, n).astype(np.float64)})


def days(start: str, n: int, freq: str = "D") -> pd.DatetimeIndex:
    return pd.date_range(start, periods=n, freq=freq)


def write(path: Path, df: pd.DataFrame) -> Path:
    """``df`` as CSV, gzipped CSV or Parquet by ``path``'s extension."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".parquet"):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)  # .csv.gz: pandas gzips by the extension
    return path


# Three symbols on different calendars: every day; business days starting later; every day but
# with a 30-day gap; and different lengths.
SPECS = {
    "AAA": (days("2020-01-01", 520), 1),
    "BBB": (pd.bdate_range("2020-02-03", periods=480), 2),
    "CCC": (days("2020-03-01", 460).delete(slice(200, 230)), 3),
}


def frames() -> dict[str, pd.DataFrame]:
    return {s: bars_frame(idx, seed) for s, (idx, seed) in SPECS.items()}


def universe_dir(d: Path) -> Path:
    """AAA.csv, BBB.parquet, CCC.csv.gz in ``d`` (plus a README the loader skips)."""
    f = frames()
    write(d / "AAA.csv", f["AAA"])
    write(d / "BBB.parquet", f["BBB"])
    write(d / "CCC.csv.gz", f["CCC"])
    (d / "README.txt").write_text("not bars")
    return d


def finrl_file(path: Path) -> Path:
    """The same three symbols as one FinRL table: date, tic, open, high, low, close, volume, day;
    sorted by date, then ticker (a symbol's rows are not adjacent)."""
    rows = [df.assign(tic=s) for s, df in frames().items()]
    long = pd.concat(rows).sort_values(["date", "tic"], kind="stable")
    long["date"] = long["date"].dt.strftime("%Y-%m-%d")
    long["day"] = 0
    return write(path, long[["date", "tic", "open", "high", "low", "close", "volume", "day"]])
