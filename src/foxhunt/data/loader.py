"""Load a bar file (CSV, gzipped CSV, Parquet) into :class:`Bars`, strictly validated.

Which column is which (names as pandas, Yahoo Finance, MetaTrader, Binance, CCXT and Dukascopy
write them; files without a header) is ``columns.py``; how the timestamp column is read (layouts,
epoch units, day-first dates, time zones, the ``data.timestamp_*`` / ``data.dayfirst`` options) is
``timestamps.py``; the rules every row must pass and the ``repair`` mode are ``validate.py``. What
was inferred to read a file (the layout, the unit, a joined Date + Time, an ignored Adj Close) is
``Bars.notes``. Volume is optional: without it the bars get ``has_volume=False``, volume filled
with ones, and a "volume missing" warning is logged.

CSV specifics: UTF-8 (a BOM is fine); the delimiter is the commonest of ``,`` tab ``;`` in the first
line (MetaTrader 5 writes tabs); rows are counted from the first line after the header (row 1; the
first line in a file without a header); a blank line inside the data is a row with an empty
timestamp (``bad-timestamp``), blank lines at the very end are not rows. pandas is used here only
(``data/`` is the one layer allowed to touch it).
"""

from __future__ import annotations

import csv
import gzip
import itertools
import logging
import re
import warnings
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.columns import Layout, headerless, headerless_note, resolve
from foxhunt.data.timestamps import TimeOptions, parse_timestamps
from foxhunt.data.validate import PRICE_COLUMNS, RawColumns, check

log = logging.getLogger("foxhunt.data")

__all__ = ["load_bars", "bars_of", "file_format", "read_file", "raw_columns"]

_SUFFIXES = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
_NA_TEXT = {"", "nan", "na", "n/a", "null", "none", "-nan", "+nan"}
_DELIMITERS = (",", "\t", ";")


def file_format(path: str | Path) -> str:
    """'csv' or 'parquet' from the file name (.csv, .csv.gz, .parquet, .pq; any case)."""
    name = Path(path).name.lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise BarDataError(
        "unsupported-format", f"unknown extension; use one of {', '.join(_SUFFIXES)}", path=str(path)
    )


def load_bars(path: str | Path, *, repair: bool = False, timestamp_format: str | None = None, dayfirst: bool | None = None,
              timestamp_unit: str | None = None, adjust: bool = False) -> Bars:
    """Read and validate a bar file; see the module docstring for columns and timestamps.

    Returns Bars: [T] int64 UTC-ns timestamps, strictly increasing; [T] float64 OHLCV; ``notes``.
    Raises BarDataError naming the file, row (1-based data row), timestamp, column and rule.
    repair=True sorts rows and drops bad ones (logged on the ``foxhunt.data`` logger) but still
    fails on file-level problems and when no row is left. timestamp_format, dayfirst,
    timestamp_unit: how to read the timestamps (``timestamps.TimeOptions``; None: inferred);
    adjust: scale open, high, low and close by the Adj Close column / close. Never writes anything.
    """
    label, layout, columns = read_file(path, adjust=adjust)
    return bars_of(label, layout, columns, TimeOptions(timestamp_format, dayfirst, timestamp_unit), repair=repair)


def bars_of(label: str, layout: Layout, columns: dict[int, pd.Series], opts: TimeOptions, *, repair: bool = False) -> Bars:
    """The validated bars of a file already read (``read_file``): parse, check every rule, ``repair``."""
    bars = check(raw_columns(label, layout, columns, opts), repair=repair)
    if not bars.has_volume:
        # Logged only once the data passed, so that a bad file gets exactly one message.
        log.warning("volume missing in %s: volume set to 1.0 (has_volume=False)", label)
    return bars


def read_file(path: str | Path, *, adjust: bool = False,
              find_symbol: Callable[[list[str], str], int | None] | None = None) -> tuple[str, Layout, dict[int, pd.Series]]:
    """The file-level checks and the read: (label, layout, {column position: the file's column}).

    find_symbol(header, label): the position of a symbol column to read as well (``Layout.symbol``;
    ``foxhunt.data.long_table``), or None; a single-series load reads no symbol column.
    Raises BarDataError for every file-level rule (unreadable, empty, missing or ambiguous columns).
    """
    p = Path(path)
    label = str(p)
    fmt = file_format(p)
    if "\0" in label:
        raise BarDataError("unreadable", "a path cannot contain a NUL byte", path=repr(label))
    if not p.exists():
        raise BarDataError("unreadable", "no such file", path=label)
    if not p.is_file():
        raise BarDataError("unreadable", "not a regular file", path=label)
    if p.stat().st_size == 0:
        raise BarDataError("empty-file", "the file is 0 bytes", path=label)
    read = _read_csv if fmt == "csv" else _read_parquet
    layout, columns = read(p, label, adjust, find_symbol)
    return label, layout, columns


# --------------------------------------------------------------------------- files
def _delimiter(line: str) -> str:
    """The commonest of , tab ; in the header line (a comma on a tie)."""
    counts = [line.count(d) for d in _DELIMITERS]
    return _DELIMITERS[int(np.argmax(counts))]


def _read_csv(p: Path, label: str, adjust: bool, find_symbol: Callable[[list[str], str], int | None] | None = None,
              ) -> tuple[Layout, dict[int, pd.Series]]:
    gz = p.name.lower().endswith(".gz")
    names: tuple[str, ...] | None = None  # the layout's names when the file has no header line
    try:
        with (gzip.open(p, "rt", encoding="utf-8-sig", newline="") if gz else open(p, encoding="utf-8-sig", newline="")) as f:
            line = f.readline()
            sep = _delimiter(line)
            reader = csv.reader(itertools.chain([line], f), delimiter=sep)
            header = next(reader, None)
            if header is not None and not any(h.strip() for h in header):
                if not any(any(c.strip() for c in row) for row in reader):
                    header = None  # only blank lines: nothing at all
                else:
                    raise BarDataError("missing-column", "the first line (the header) is blank", path=label)
            if header is not None:
                try:
                    names = headerless([h.strip() for h in header])
                except BarDataError as exc:
                    raise BarDataError(exc.rule, exc.detail, path=label, column=exc.column) from None
            first_row = header if names is not None else next(reader, None) if header is not None else None
        if header is None:
            raise BarDataError("empty-file", "no header and no data rows", path=label)
        header = list(names) if names is not None else [h.strip() for h in header]
        layout = resolve(header, label, adjust=adjust)
        if find_symbol is not None:
            layout.symbol = find_symbol(header, label)
        if names is not None:
            layout.notes.insert(0, headerless_note(len(header)))
        # pandas rejects a longer row anywhere but in the first data row, whose extra fields it
        # silently drops (index_col=False): that row is checked here, as every later row is there.
        if first_row is not None and len(first_row) > len(header):
            raise BarDataError(
                "unreadable", f"malformed CSV: expected {len(header)} fields (the header's), saw {len(first_row)}",
                path=label, row=1,
            )
        # All columns are read (no usecols) so that a row with too many fields is an error rather
        # than silently cut; index_col=False stops pandas turning a longer first row into an index.
        # A ParserWarning ("loss of data") is an error too: nothing is dropped silently.
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(
                p,
                sep=sep,
                header=None if names is not None else "infer",
                names=list(names) if names is not None else None,
                index_col=False,
                skip_blank_lines=False,  # keep blank lines as rows so that row numbers match lines - 1
                encoding="utf-8",
                compression="gzip" if gz else None,
                low_memory=False,
            )
    except UnicodeDecodeError as exc:
        raise BarDataError("unreadable", f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=label) from None
    except pd.errors.EmptyDataError:
        raise BarDataError("empty-file", "no header and no data rows", path=label) from None
    except pd.errors.ParserWarning as exc:
        raise BarDataError("unreadable", f"malformed CSV: {str(exc).strip()}", path=label) from None
    except pd.errors.ParserError as exc:
        m = re.search(r"line (\d+)", str(exc))
        row = int(m.group(1)) - (1 if names is None else 0) if m else None
        raise BarDataError("unreadable", f"malformed CSV: {str(exc).strip()}", path=label, row=row) from None
    except (gzip.BadGzipFile, EOFError, zlib.error, csv.Error, OSError) as exc:
        raise BarDataError("unreadable", f"{type(exc).__name__}: {exc}", path=label) from None
    # Trailing blank lines read as all-NaN rows; they are not data.
    filled = np.flatnonzero(~df.isna().all(axis=1).to_numpy())
    if filled.shape[0] == 0:
        raise BarDataError("empty-file", "a header but no data rows", path=label)
    df = df.iloc[: int(filled[-1]) + 1]
    if df.shape[1] != len(header):
        raise BarDataError("unreadable", f"header has {len(header)} fields, pandas read {df.shape[1]}", path=label)
    return layout, {pos: df.iloc[:, pos] for pos in _used(layout)}


def _used(layout: Layout) -> list[int]:
    extra = [c for c in (layout.time_col, layout.symbol) if c is not None]
    return [*layout.cols.values(), *extra, *layout.volume]


def _read_parquet(p: Path, label: str, adjust: bool, find_symbol: Callable[[list[str], str], int | None] | None = None,
                  ) -> tuple[Layout, dict[int, pd.Series]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(p)
        # Full validation catches what a damaged file can still decode to (e.g. text that is not
        # UTF-8, in cells or in column names), which would otherwise fail later in conversions.
        table.validate(full=True)
        header = list(table.column_names)
    except (pa.ArrowException, OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise BarDataError("unreadable", f"not a readable Parquet file ({exc})", path=label) from None
    layout = resolve(header, label, adjust=adjust)
    if find_symbol is not None:
        layout.symbol = find_symbol(header, label)
    if table.num_rows == 0:
        raise BarDataError("empty-file", "no data rows", path=label)
    roles = {pos: canon for canon, pos in layout.cols.items()}
    roles.update({pos: "volume" for pos in layout.volume})
    if layout.time_col is not None:
        roles[layout.time_col] = "time"
    if layout.symbol is not None:
        roles[layout.symbol] = "symbol"
    columns = {}
    for pos, canon in roles.items():
        col = table.column(pos)
        if not _parquet_type_ok(canon, col.type):
            want = "a timestamp, date, number or text" if canon == "timestamp" else "a number or text"
            raise BarDataError(
                "bad-column-type", f"Parquet type {col.type} cannot hold {canon} values; expected {want} column",
                path=label, column=header[pos],
            )
        if pa.types.is_date(col.type):
            col = col.cast(pa.timestamp("s"))  # a date is that day's UTC midnight
        try:
            columns[pos] = col.to_pandas()
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise BarDataError("unreadable", f"column of type {col.type} ({exc})", path=label, column=header[pos]) from None
    return layout, columns


def _parquet_type_ok(canon: str, typ: "object") -> bool:
    """Whether a Parquet column of Arrow type ``typ`` can hold the ``canon`` column's values.

    Numbers and text (parsed cell by cell, like CSV) always can; timestamps and dates only in the
    timestamp column; nested (list, struct, map), boolean, duration and time-of-day types never.
    """
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(typ):
        typ = typ.value_type  # type: ignore[attr-defined]
    text = (t.is_string(typ) or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ)
            or t.is_fixed_size_binary(typ) or getattr(t, "is_string_view", lambda _: False)(typ))
    if text or t.is_null(typ) or t.is_integer(typ) or t.is_floating(typ) or t.is_decimal(typ):
        return True
    return canon == "timestamp" and (t.is_timestamp(typ) or t.is_date(typ))


# --------------------------------------------------------------------------- columns -> RawColumns
def _joined(date: pd.Series, time: pd.Series) -> pd.Series:
    """"DATE TIME" text of separate date and time columns (empty where either is)."""
    d = date.dt.strftime("%Y-%m-%d") if pd.api.types.is_datetime64_any_dtype(date.dtype) else date.astype("str").str.strip()
    out = d + " " + time.astype("str").str.strip()
    return out.where(date.notna() & time.notna())


def _volume(layout: Layout, columns: dict[int, pd.Series]) -> tuple[int | None, list[str]]:
    """The volume column used: the preferred one, unless it is all zero and another is not."""
    if not layout.volume:
        return None, []
    first = layout.volume[0]
    for pos in layout.volume:
        v = _numeric(columns[pos])[0]
        if np.nan_to_num(v).any():
            if pos == first:
                return pos, []
            return pos, [f"volume from '{layout.header[pos]}' ('{layout.header[first]}' is all zero)"]
    return first, []


def raw_columns(label: str, layout: Layout, columns: dict[int, pd.Series], opts: TimeOptions) -> RawColumns:
    """Parse every used column (``columns``: position -> the file's column)."""
    series = {canon: columns[pos] for canon, pos in layout.cols.items()}
    if layout.time_col is not None:
        series["timestamp"] = _joined(series["timestamp"], columns[layout.time_col])
    vol, vol_notes = _volume(layout, columns)
    if vol is not None:
        series["volume"] = columns[vol]
        layout.volume = [vol]
    names = {canon: layout.name(canon) for canon in series}
    try:
        times = parse_timestamps(series["timestamp"], label, names["timestamp"], opts)
    except BarDataError as exc:
        if not (layout.index_col and exc.rule == "ambiguous-epoch"):
            raise
        raise BarDataError("missing-column", f"no timestamp column (accepted names, any case: timestamp, datetime, date, time, "
                           f"open_time, gmt time, date + time); the column {layout.name('timestamp')!r} holds numbers, not times "
                           f"({exc.detail.split(';')[0]})", path=label, column="timestamp") from None
    values, non_numeric = {}, {}
    for canon in (*PRICE_COLUMNS, "volume", "adj_close"):
        if canon in series:
            values[canon], non_numeric[canon] = _numeric(series[canon])

    def cell_text(canon: str, row: int) -> str | None:
        v = series[canon].iloc[row]
        return None if pd.api.types.is_scalar(v) and pd.isna(v) else str(v)

    notes = [*layout.notes, *times.notes, *vol_notes]
    return RawColumns(label, times.ns, times.ok, values, non_numeric, names, cell_text, notes=tuple(notes), ts_hint=times.hint)


# --------------------------------------------------------------------------- cells
def _numeric(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """[T] float64 values (NaN for empty/NA/text) and [T] bool 'cell is text that is not a number'."""
    n = len(s)
    if pd.api.types.is_bool_dtype(s.dtype):
        return np.full(n, np.nan), s.notna().to_numpy()
    if pd.api.types.is_numeric_dtype(s.dtype):
        return s.to_numpy(dtype=np.float64, na_value=np.nan), np.zeros(n, dtype=bool)
    try:
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError):
        num = np.array([_to_float(x) for x in s.tolist()], dtype=np.float64)
    bad = np.zeros(n, dtype=bool)
    # Only the cells that did not convert are inspected one by one (few in any real file):
    # "NaN"/"null" text is a missing value (not-finite), anything else is not a number.
    for i in np.flatnonzero(np.isnan(num) & s.notna().to_numpy()):
        bad[i] = str(s.iloc[i]).strip().lower() not in _NA_TEXT
    return num, bad


def _to_float(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
