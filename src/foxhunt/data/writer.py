"""Write Bars to CSV (optionally gzipped) or Parquet, atomically, so that ``load_bars`` reads back
exactly the same arrays.

CSV layout: a header ``timestamp,open,high,low,close,volume`` (no volume column when
``has_volume`` is False); timestamps as ISO-8601 UTC with a trailing "Z" ("2024-01-02T00:00:00Z",
with a fraction of a second only when some timestamp needs it, up to nanoseconds); prices and
volume in the shortest text that reads back as the same float64 (Arrow's round-trip formatting).
Parquet: ``timestamp`` as timestamp[ns, tz=UTC] and float64 columns.
"""

from __future__ import annotations

import gzip
import os
import secrets
from pathlib import Path

import numpy as np
import pyarrow as pa

from foxhunt.data.bars import Bars
from foxhunt.data.loader import file_format
from foxhunt.data.validate import validate_bars

__all__ = ["write_bars"]


def write_bars(bars: Bars, path: str | Path) -> Path:
    """Write ``bars`` to ``path`` (.csv, .csv.gz, .parquet or .pq) and return the path.

    The bars are validated first (BarDataError, nothing written, when they break a rule). The
    data goes to a temporary file in the same directory, which is then renamed over ``path``
    (``os.replace``), so readers never see a half-written file. Missing parent directories are
    created.
    """
    p = Path(path)
    fmt = file_format(p)
    validate_bars(bars, path=str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name in the same directory (so os.replace is atomic); "x" mode respects the umask.
    tmp = p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "xb") as f:
            if fmt == "parquet":
                _write_parquet(bars, f)
            elif p.name.lower().endswith(".gz"):
                # No name and mtime=0 in the header: the same bars give the same bytes (the
                # temporary file's name would leak in otherwise). Level 3: ~2.5x faster than the
                # default 9 on bar CSVs for ~10 % more bytes.
                with gzip.GzipFile(filename="", fileobj=f, mode="wb", compresslevel=3, mtime=0) as gz:
                    _write_csv(bars, gz)
            else:
                _write_csv(bars, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def _table(bars: Bars, timestamps: pa.Array) -> pa.Table:
    cols = {"timestamp": timestamps}
    for name in ("open", "high", "low", "close") + (("volume",) if bars.has_volume else ()):
        cols[name] = pa.array(np.asarray(getattr(bars, name), dtype=np.float64))
    return pa.table(cols)


def _write_parquet(bars: Bars, f: object) -> None:
    import pyarrow.parquet as pq

    ts = pa.array(np.asarray(bars.timestamps, dtype=np.int64), type=pa.timestamp("ns", tz="UTC"))
    pq.write_table(_table(bars, ts), f)


def _iso_utc(ns: np.ndarray) -> pa.Array:
    """[T] int64 UTC ns -> [T] ISO-8601 strings with 'Z'; the fraction has as many digits as needed."""
    sub = ns % 1_000_000_000
    unit = "s" if not sub.any() else "ms" if not (sub % 1_000_000).any() else "us" if not (sub % 1000).any() else "ns"
    text = np.datetime_as_string(ns.astype("datetime64[ns]"), unit=unit)
    return pa.array(np.char.add(text, "Z"))


def _write_csv(bars: Bars, f: object) -> None:
    import pyarrow.csv as pacsv

    table = _table(bars, _iso_utc(np.asarray(bars.timestamps, dtype=np.int64)))
    # Arrow quotes header names; write a plain header, then the rows unquoted (no cell needs quotes).
    f.write((",".join(table.column_names) + "\n").encode())  # type: ignore[attr-defined]
    if len(bars):
        pacsv.write_csv(table, f, pacsv.WriteOptions(include_header=False, quoting_style="none"))

