"""Property: any mutation of a good bar file either loads to bars that pass validation, or raises
BarDataError (the project's data error) — never another exception (issue 11).

Mutations of a good CSV (plain or gzipped): byte flips, truncation, inserted and deleted fields,
odd cell values (overflowing epochs, NaN/inf text, control characters, quotes...), deleted,
duplicated and swapped lines. Mutations of a good Parquet file: a column changed to another Arrow
type (list, struct, bool, timestamp, dictionary, decimal, null...), odd cell values, then byte
flips or truncation of the file. Loaded bars are checked by ``validate_bars`` and, independently,
by plain numpy (strictly increasing int64 times, finite positive prices, high/low bounds).
Derandomized and bounded (a few seconds), so CI sees the same examples every run; 3,000 random
examples of each passed (FOXHUNT_FUZZ_EXAMPLES=3000) after the fixes of issue 11.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.loader import load_bars
from foxhunt.data.validate import validate_bars

COLS = ["timestamp", "open", "high", "low", "close", "volume"]
N = 8
# FOXHUNT_FUZZ_EXAMPLES=3000 runs a long random (not derandomized) search; CI runs 150 fixed examples.
_LONG = os.environ.get("FOXHUNT_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_LONG or 150), deadline=None, derandomize=not _LONG,
                suppress_health_check=[HealthCheck.too_slow])

ODD_VALUES = [
    "", " ", "nan", "NaN", "inf", "-inf", "1e400", "-1", "0", "-0.0", "9e18", "-9e18", "9223372036854775807",
    "-9223372036854775808", "18446744073709551616", "0x10", "1_000", "１", "\x00", "\x7f", '"', '""', "'", "a,b",
    '"1,5"', "\\N", "1e-400", "2262-04-12", "1677-09-21", "2024-13-45", "2024-01-02T00:00:00+99:00", "NaT", "None",
    "True", "20240102", "1/2/2024", "99999999999999999999999", "1.7976931348623157e308", "-", "+", ".", "e5",
]


def good_rows() -> list[list[str]]:
    return [[f"2024-01-02T00:{i:02d}:00Z", f"{100 + i}", f"{102 + i}", f"{99 + i}", f"{101 + i}", f"{1000 + i}"]
            for i in range(N)]


def good_table() -> pa.Table:
    ts = np.datetime64("2024-01-02T00:00", "ns") + np.arange(N) * np.timedelta64(60, "s")
    i = np.arange(N, dtype=np.float64)
    return pa.table({"timestamp": pa.array(ts, type=pa.timestamp("ns", tz="UTC")),
                     "open": 100 + i, "high": 102 + i, "low": 99 + i, "close": 101 + i, "volume": 1000 + i})


def check_property(data: bytes, name: str) -> None:
    """Load ``data`` saved as ``name`` with and without repair; BarDataError or valid bars only."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        for repair in (False, True):
            try:
                bars = load_bars(path, repair=repair)
            except BarDataError as exc:
                assert str(exc) and exc.rule
                continue
            validate_bars(bars)
            assert_independently_valid(bars)


def assert_independently_valid(bars: Bars) -> None:
    ts = bars.timestamps
    assert ts.dtype == np.int64 and len(bars) >= 1
    assert np.all(ts[1:] > ts[:-1])  # compared, not subtracted
    prices = np.stack([bars.open, bars.high, bars.low, bars.close])
    assert prices.dtype == np.float64 and np.all(np.isfinite(prices)) and np.all(prices > 0)
    assert np.all(bars.high >= np.maximum(bars.open, bars.close)) and np.all(bars.low <= np.minimum(bars.open, bars.close))
    assert np.all(np.isfinite(bars.volume)) and np.all(bars.volume >= 0)


# --------------------------------------------------------------------------- CSV
@st.composite
def csv_row_edits(draw: st.DrawFn) -> list[list[str]]:
    rows = [list(COLS)] + good_rows()
    for _ in range(draw(st.integers(0, 3))):
        r = draw(st.integers(0, len(rows) - 1)) if rows else 0
        kind = draw(st.sampled_from(["odd", "text", "insert", "delete", "dup", "swap", "drop_line", "blank"]))
        if not rows:
            break
        row = rows[r]
        c = draw(st.integers(0, max(0, len(row) - 1)))
        if kind == "odd" and row:
            row[c] = draw(st.sampled_from(ODD_VALUES))
        elif kind == "text" and row:
            row[c] = draw(st.text(max_size=6))
        elif kind == "insert":
            row.insert(draw(st.integers(0, len(row))), draw(st.sampled_from(["5", "", "x", "2024-01-02"])))
        elif kind == "delete" and row:
            del row[c]
        elif kind == "dup":
            rows.insert(r, list(row))
        elif kind == "swap":
            r2 = draw(st.integers(0, len(rows) - 1))
            rows[r], rows[r2] = rows[r2], rows[r]
        elif kind == "drop_line":
            del rows[r]
        elif kind == "blank":
            rows.insert(r, [])
    return rows


def bytes_edits(draw: st.DrawFn, data: bytes) -> bytes:
    """0-2 byte flips and maybe a truncation."""
    b = bytearray(data)
    for _ in range(draw(st.integers(0, 2))):
        if b:
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
    if b and draw(st.booleans()) and draw(st.booleans()):
        del b[draw(st.integers(0, len(b) - 1)):]
    return bytes(b)


@FUZZ
@given(data=st.data())
def test_mutated_csv_loads_to_valid_bars_or_raises_bar_data_error(data: st.DataObject) -> None:
    rows = data.draw(csv_row_edits())
    text = "".join(",".join(r) + "\n" for r in rows)
    try:
        raw = text.encode("utf-8", "surrogatepass")
    except UnicodeEncodeError:  # pragma: no cover - st.text avoids lone surrogates by default
        raw = text.encode("utf-8", "replace")
    raw = data.draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + raw
    gz = data.draw(st.booleans())
    if gz and data.draw(st.booleans()):
        raw = bytes_edits(data.draw, gzip.compress(raw, mtime=0))  # flips in the compressed stream
    else:
        raw = bytes_edits(data.draw, raw)
        if gz:
            raw = gzip.compress(raw, mtime=0)
    check_property(raw, "bars.csv.gz" if gz else "bars.csv")


# --------------------------------------------------------------------------- Parquet
def _num(v: object) -> float:
    """Any cell value of any column type (after earlier retyping) as a finite float, for retyping."""
    if hasattr(v, "timestamp"):
        return float(v.timestamp())  # type: ignore[union-attr]
    if isinstance(v, list):
        return _num(v[0]) if v else 0.0
    if isinstance(v, dict):
        return _num(next(iter(v.values()), 0.0))
    if isinstance(v, bytes):
        v = v.decode(errors="replace")
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return f if np.isfinite(f) and abs(f) < 1e18 else 0.0  # representable as int64 and decimal(38)


def _retyped(col: pa.ChunkedArray, kind: str) -> pa.Array:
    vals = col.to_pylist()
    floats = [_num(v) for v in vals]
    if kind == "string":
        return pa.array([str(v) for v in vals])
    if kind == "large_string":
        return pa.array([str(v) for v in vals], type=pa.large_string())
    if kind == "dictionary":
        return pa.array([str(v) for v in vals]).dictionary_encode()
    if kind == "binary":
        return pa.array([str(v).encode() for v in vals])
    if kind == "int64":
        return pa.array([int(f) for f in floats])
    if kind == "float32":
        return pa.array(floats, type=pa.float32())
    if kind == "decimal":
        return pa.array([round(f) for f in floats], type=pa.decimal128(38, 0))
    if kind == "bool":
        return pa.array([f > 100 for f in floats])
    if kind == "list":
        return pa.array([[f] for f in floats], type=pa.list_(pa.float64()))
    if kind == "struct":
        return pa.array([{"v": f} for f in floats])
    if kind == "timestamp_s":
        return pa.array([int(f) for f in floats], type=pa.timestamp("s"))
    if kind == "date32":
        return pa.array([int(f) % 100_000 for f in floats], type=pa.date32())
    if kind == "duration":
        return pa.array([int(f) for f in floats], type=pa.duration("s"))
    if kind == "null":
        return pa.nulls(len(vals))
    raise AssertionError(kind)


TYPES = ["string", "large_string", "dictionary", "binary", "int64", "float32", "decimal", "bool", "list", "struct",
         "timestamp_s", "date32", "duration", "null"]
PARQUET_ODD = [None, float("nan"), float("inf"), -1.0, 0.0, 1e308, -1e-300, 5e18]


@FUZZ
@given(data=st.data())
def test_mutated_parquet_loads_to_valid_bars_or_raises_bar_data_error(data: st.DataObject) -> None:
    table = good_table()
    for _ in range(data.draw(st.integers(0, 2))):
        c = data.draw(st.integers(0, len(COLS) - 1))
        if data.draw(st.booleans()):
            arr = _retyped(table.column(c), data.draw(st.sampled_from(TYPES)))
        else:
            vals = table.column(c).to_pylist()
            r = data.draw(st.integers(0, N - 1))
            if c == 0:
                vals[r] = data.draw(st.sampled_from([None, vals[(r + 1) % N], vals[0]]))
            elif pa.types.is_floating(table.schema.field(c).type):
                vals[r] = data.draw(st.sampled_from(PARQUET_ODD))
            else:
                vals[r] = None  # a retyped column: an empty cell
            arr = pa.array(vals, type=table.schema.field(c).type)
        table = table.set_column(c, table.schema.field(c).name, arr)
    if data.draw(st.booleans()):
        table = table.drop_columns([COLS[data.draw(st.integers(0, len(COLS) - 1))]])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    raw = buf.getvalue()
    if data.draw(st.integers(0, 3)) == 0:  # a quarter of the files also get byte flips / truncation
        raw = bytes_edits(data.draw, raw)
    check_property(raw, "bars.parquet")
