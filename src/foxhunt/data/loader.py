"""Load a bar file (CSV, gzipped CSV, Parquet) into :class:`Bars`, strictly validated.

Columns (matched case-insensitively, surrounding spaces ignored; any other column, e.g.
"Adj Close", is ignored): ``timestamp`` | ``date`` | ``datetime`` | ``time`` -> timestamp, and
``open``, ``high``, ``low``, ``close``, ``volume``. Volume is optional: without it the bars get
``has_volume=False``, volume filled with ones, and a "volume missing" warning is logged.

Timestamps become int64 UTC nanoseconds:

* ISO-8601 text, with or without an offset ("2024-01-02T09:30:00-05:00", "...Z", "2024-01-02").
  Text with an offset is converted to UTC. **Text without an offset is taken to be UTC already**
  (it is not localised to any exchange time zone). A column mixing both is ``mixed-timezones``.
* A few common non-ISO layouts ("1/4/1999", "04.01.1999", "19990104", ...). The layout is chosen
  from the first 500 values: the one that parses most of them, ties resolved in the order of
  ``_FORMATS`` (so an ambiguous "01/02/2024" column is read as US month/day/year).
* Integer or float epoch numbers; the unit (s, ms, us, ns) is inferred from the largest magnitude
  in the column (< 1e11 s, < 1e14 ms, < 1e17 us, else ns). An all-integer column of values
  between 1e7 and 3e7 that all read as YYYYMMDD dates is taken as dates (as epoch seconds they
  would all fall in 1970). Float epochs carry float64 precision (about 0.25 us today).
* Parquet timestamp columns (naive = UTC, aware converted) and date columns (UTC midnight).

CSV specifics: UTF-8 (a BOM is fine); rows are counted from the first line after the header
(row 1); a blank line inside the data is a row with an empty timestamp (``bad-timestamp``), blank
lines at the very end are not rows. Rule ids and the repair mode are described in ``validate.py``.
pandas is used here only (``data/`` is the one layer allowed to touch it).
"""

from __future__ import annotations

import csv
import gzip
import logging
import re
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.validate import VALUE_COLUMNS, RawColumns, check

log = logging.getLogger("foxhunt.data")

__all__ = ["load_bars", "file_format"]

_ALIASES = {"timestamp": "timestamp", "date": "timestamp", "datetime": "timestamp", "time": "timestamp"}
_ALIASES.update({c: c for c in VALUE_COLUMNS})
_REQUIRED = ("timestamp", "open", "high", "low", "close")
_SUFFIXES = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
_FORMATS = (
    "ISO8601",
    "%m/%d/%Y", "%d/%m/%Y", "%m/%d/%Y %H:%M", "%m/%d/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y %H:%M:%S",
    "%Y/%m/%d", "%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%d.%m.%Y", "%d.%m.%Y %H:%M", "%d.%m.%Y %H:%M:%S",
    "%Y%m%d", "%Y%m%d %H:%M:%S", "%d-%b-%Y", "%d %b %Y",
)  # fmt: skip
# An explicit offset after a time of day: "...10:00Z", "...10:00:00.5+01:00", "...10:00 -0500".
_TZ_RE = r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"
_NA_TEXT = {"", "nan", "na", "n/a", "null", "none", "-nan", "+nan"}
_NAT = np.iinfo(np.int64).min
_UNIT_NS = {"D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def file_format(path: str | Path) -> str:
    """'csv' or 'parquet' from the file name (.csv, .csv.gz, .parquet, .pq; any case)."""
    name = Path(path).name.lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise BarDataError(
        "unsupported-format", f"unknown extension; use one of {', '.join(_SUFFIXES)}", path=str(path)
    )


def load_bars(path: str | Path, *, repair: bool = False) -> Bars:
    """Read and validate a bar file; see the module docstring for columns and timestamps.

    Returns Bars: [T] int64 UTC-ns timestamps, strictly increasing; [T] float64 OHLCV.
    Raises BarDataError naming the file, row (1-based data row), timestamp, column and rule.
    repair=True sorts rows and drops bad ones (logged on the ``foxhunt.data`` logger) but still
    fails on file-level problems and when no row is left. Reads only; never writes anything.
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
    names, series = _read_csv(p, label) if fmt == "csv" else _read_parquet(p, label)
    raw = _raw_columns(label, names, series)
    bars = check(raw, repair=repair)
    if not bars.has_volume:
        # Logged only once the data passed, so that a bad file gets exactly one message.
        log.warning("volume missing in %s: volume set to 1.0 (has_volume=False)", label)
    return bars


# --------------------------------------------------------------------------- columns
def _resolve(header: list[str], label: str) -> dict[str, int]:
    """Canonical name -> column position. Raises missing-column / ambiguous-column."""
    found: dict[str, int] = {}
    for i, name in enumerate(header):
        canon = _ALIASES.get(str(name).strip().lstrip("\ufeff").lower())
        if canon is None:
            continue
        if canon in found:
            first = header[found[canon]]
            raise BarDataError(
                "ambiguous-column", f"both '{first}' and '{name}' name the {canon} column", path=label, column=str(name)
            )
        found[canon] = i
    for canon in _REQUIRED:
        if canon not in found:
            accepted = [k for k, v in _ALIASES.items() if v == canon]
            raise BarDataError(
                "missing-column",
                f"no {canon} column (accepted names, any case: {', '.join(accepted)}); the file has {list(header)}",
                path=label,
                column=canon,
            )
    return found


def _read_csv(p: Path, label: str) -> tuple[dict[str, str], dict[str, pd.Series]]:
    gz = p.name.lower().endswith(".gz")
    try:
        with (gzip.open(p, "rt", encoding="utf-8-sig", newline="") if gz else open(p, encoding="utf-8-sig", newline="")) as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is not None and not any(h.strip() for h in header):
                if not any(any(c.strip() for c in row) for row in reader):
                    header = None  # only blank lines: nothing at all
                else:
                    raise BarDataError("missing-column", "the first line (the header) is blank", path=label)
            first_row = next(reader, None) if header is not None else None
        if header is None:
            raise BarDataError("empty-file", "no header and no data rows", path=label)
        header = [h.strip() for h in header]
        cols = _resolve(header, label)
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
        row = int(m.group(1)) - 1 if m else None
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
    series = {canon: df.iloc[:, pos] for canon, pos in cols.items()}
    return {canon: header[pos] for canon, pos in cols.items()}, series


def _read_parquet(p: Path, label: str) -> tuple[dict[str, str], dict[str, pd.Series]]:
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
    cols = _resolve(header, label)
    if table.num_rows == 0:
        raise BarDataError("empty-file", "no data rows", path=label)
    series = {}
    for canon, pos in cols.items():
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
            series[canon] = col.to_pandas()
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise BarDataError("unreadable", f"column of type {col.type} ({exc})", path=label, column=header[pos]) from None
    return {canon: header[pos] for canon, pos in cols.items()}, series


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


def _raw_columns(label: str, names: dict[str, str], series: dict[str, pd.Series]) -> RawColumns:
    """Parse every used column; ``names`` maps canonical names to the file's column names."""
    ts, ok = _parse_timestamps(series["timestamp"], label, names["timestamp"])
    values, non_numeric = {}, {}
    for canon in VALUE_COLUMNS:
        if canon in series:
            values[canon], non_numeric[canon] = _numeric(series[canon])

    def cell_text(canon: str, row: int) -> str | None:
        v = series[canon].iloc[row]
        return None if pd.api.types.is_scalar(v) and pd.isna(v) else str(v)

    return RawColumns(label, ts, ok, values, non_numeric, names, cell_text)


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


def _dt64_to_ns(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy datetime64[any unit] -> ([T] int64 ns, [T] ok); NaT and out-of-range values not ok."""
    unit, count = np.datetime_data(arr.dtype)
    iv = arr.view(np.int64)
    ok = iv != _NAT
    mult = _UNIT_NS[unit] * count
    if mult == 1:
        return iv.copy(), ok
    lim = np.iinfo(np.int64).max // mult  # beyond this the value does not fit int64 ns (1677..2262)
    ok &= (iv <= lim) & (iv >= -lim)
    return np.where(ok, iv, 0) * mult, ok


def _epoch_to_ns(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Epoch numbers -> int64 ns; the unit is inferred from the column's largest magnitude."""
    v = np.asarray(v)
    n = v.shape[0]
    ok = np.isfinite(v) if v.dtype.kind == "f" else np.ones(n, dtype=bool)
    if not ok.any():
        return np.zeros(n, dtype=np.int64), ok
    good = v[ok]
    integral = v.dtype.kind in "iu" or bool(np.all(good == np.round(good)))
    if v.dtype.kind == "f" and integral and np.abs(good).max() < 2.0**53:
        # Whole numbers in a float column (an empty cell made it float): scale them as integers,
        # since e.g. epoch ms * 1e6 is not exact in float64.
        v = np.where(ok, v, 0.0).astype(np.int64)
        good = v[ok]
    if integral and good.min() >= 1e7 and good.max() < 3e7:
        as_text = pd.Series(np.where(ok, v, 0).astype(np.int64).astype(str))
        dates = pd.to_datetime(as_text, format="%Y%m%d", errors="coerce")
        if bool(dates[ok].notna().all()):
            ns, ok2 = _dt64_to_ns(dates.to_numpy(dtype="datetime64[ns]"))
            return ns, ok & ok2
    mag = float(np.abs(good).max())
    scale = 10**9 if mag < 1e11 else 10**6 if mag < 1e14 else 10**3 if mag < 1e17 else 1
    if v.dtype.kind in "iu":
        iv = v.astype(np.int64)
        lim = np.iinfo(np.int64).max // scale
        ok &= (iv <= lim) & (iv >= -lim)
        return np.where(ok, iv, 0) * scale, ok
    f = np.where(ok, v, 0.0) * float(scale)
    ok &= np.abs(f) < 9.2e18
    return np.round(np.where(ok, f, 0.0)).astype(np.int64), ok


def _parse_timestamps(s: pd.Series, label: str, colname: str) -> tuple[np.ndarray, np.ndarray]:
    """[T] int64 UTC ns and [T] bool ok. Raises mixed-timezones (a file-level problem)."""
    dt = s.dtype
    if isinstance(dt, pd.DatetimeTZDtype):
        return _dt64_to_ns(s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy())
    if pd.api.types.is_datetime64_dtype(dt):
        return _dt64_to_ns(s.to_numpy())  # naive: taken as UTC
    if pd.api.types.is_bool_dtype(dt):
        return np.zeros(len(s), dtype=np.int64), np.zeros(len(s), dtype=bool)
    if pd.api.types.is_numeric_dtype(dt):
        v = s.to_numpy()
        return _epoch_to_ns(v if v.dtype.kind in "iuf" else s.to_numpy(dtype=np.float64, na_value=np.nan))
    return _parse_text(s, label, colname)


def _parse_text(s: pd.Series, label: str, colname: str) -> tuple[np.ndarray, np.ndarray]:
    n = len(s)
    notnull = s.notna().to_numpy()
    text = s.astype("str").str.strip()
    idx = np.flatnonzero(notnull)
    if idx.shape[0] == 0:
        return np.zeros(n, dtype=np.int64), notnull
    sample = text.iloc[idx[:500]]
    # Digits only: epoch numbers (pandas keeps such a column as text when one cell is bad);
    # a layout below replaces this only when it parses strictly more of the sample.
    best, best_count = "epoch", int(sample.str.fullmatch(r"[+-]?\d+(?:\.\d*)?").sum())
    if best_count < len(sample):
        for fmt in _FORMATS:
            count = int(pd.to_datetime(sample, format=fmt, errors="coerce", utc=True).notna().sum())
            if count > best_count:
                best, best_count = fmt, count
            if count == len(sample):
                break  # earlier formats win ties, so a full score ends the search
    if best == "epoch":
        ns, ok = _epoch_to_ns(pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
        return ns, ok & notnull
    parsed = pd.to_datetime(text, format=best, errors="coerce", utc=True)
    ns, ok = _dt64_to_ns(parsed.dt.tz_localize(None).to_numpy())
    ok &= notnull
    if best == "ISO8601" and ok.any():
        _check_one_timezone_style(text, s, ok, label, colname)
    return ns, ok


def _check_one_timezone_style(text: pd.Series, s: pd.Series, ok: np.ndarray, label: str, colname: str) -> None:
    """Raise mixed-timezones when some parsed timestamps carry an offset and others do not."""
    if bool(text[ok].str.endswith("Z").all()):  # the common all-UTC case, without a regex pass
        return
    aware = text.str.contains(_TZ_RE, regex=True).to_numpy(dtype=bool, na_value=False)
    kinds = aware[ok]
    if kinds.all() or not kinds.any():
        return
    rows = np.flatnonzero(ok)
    first = int(rows[0])
    row = int(rows[np.argmax(kinds != kinds[0])])
    has, hasnt = ("has", "has no") if aware[first] else ("has no", "has")
    raise BarDataError(
        "mixed-timezones",
        f"row {first + 1} ({s.iloc[first]}) {has} UTC offset but this row {hasnt}; "
        "use offsets everywhere or nowhere (no offset = UTC)",
        path=label,
        row=row + 1,
        timestamp=str(s.iloc[row]),
        column=colname,
    )
