"""A corpus of malformed bar files, one defect each, built from a good base file.

Every defect must be rejected with the right rule id, row (1-based data row) and column, with the
file name in the message, and nothing may be written anywhere (the input folder and a cache folder
are snapshotted). The CLI must turn each into exit code 2 and one line naming the rule. With
``repair=True`` file-level defects still fail and row-level defects lose exactly the bad rows.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.bars import BarDataError
from foxhunt.data.loader import load_bars
from foxhunt.data.validate import FILE_RULES

N = 10
COLS = ["timestamp", "open", "high", "low", "close", "volume"]


def ts_text(i: int) -> str:
    return f"2024-01-02T00:{i:02d}:00Z"


def good_rows() -> list[list[str]]:
    """Row i (1-based): ts 00:0i, open 100+i, high 102+i, low 99+i, close 101+i, volume 1000+i."""
    return [[ts_text(i), f"{100 + i}", f"{102 + i}", f"{99 + i}", f"{101 + i}", f"{1000 + i}"] for i in range(1, N + 1)]


def csv_bytes(rows: list[list[str]], header: list[str] = COLS) -> bytes:
    return (",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)).encode()


def good_csv() -> bytes:
    return csv_bytes(good_rows())


def cell(row: int, col: str, value: str) -> Callable[[], bytes]:
    def make() -> bytes:
        rows = good_rows()
        rows[row - 1][COLS.index(col)] = value
        return csv_bytes(rows)

    return make


def good_table(n: int = N) -> pa.Table:
    ts = np.array([np.datetime64(ts_text(i)[:-1], "ns") for i in range(1, n + 1)])
    i = np.arange(1, n + 1, dtype=np.float64)
    return pa.table(
        {
            "timestamp": pa.array(ts, type=pa.timestamp("ns", tz="UTC")),
            "open": 100 + i, "high": 102 + i, "low": 99 + i, "close": 101 + i, "volume": 1000 + i,
        }
    )  # fmt: skip


def pq_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def pq_cell(row: int, col: str, value: object, typ: pa.DataType | None = None) -> Callable[[], bytes]:
    def make() -> bytes:
        t = good_table()
        vals = t.column(col).to_pylist()
        vals[row - 1] = value
        arr = pa.array(vals, type=typ if typ is not None else t.schema.field(col).type)
        return pq_bytes(t.set_column(COLS.index(col), col, arr))

    return make


@dataclass
class Defect:
    id: str
    filename: str
    make: Callable[[], bytes]
    rule: str
    row: int | None = None
    column: str | None = None
    repaired: int | None = None  # rows left after repair=True (None: repair must fail too)
    timestamp: str | None = field(default=None)


def row_defect(id: str, row: int, col: str, value: str, rule: str, fname: str = "bars.csv") -> Defect:
    ts = None if col == "timestamp" else ts_text(row)
    return Defect(id, fname, cell(row, col, value), rule, row, col, N - 1, ts)


def _swap(a: int, b: int) -> Callable[[], bytes]:
    def make() -> bytes:
        rows = good_rows()
        rows[a - 1], rows[b - 1] = rows[b - 1], rows[a - 1]
        return csv_bytes(rows)

    return make


def _insert_line(after: int, line: str) -> Callable[[], bytes]:
    def make() -> bytes:
        lines = good_csv().decode().splitlines(keepends=True)
        lines.insert(after + 1, line)
        return "".join(lines).encode()

    return make


def _columns(header: list[str], keep: list[int]) -> Callable[[], bytes]:
    return lambda: csv_bytes([[r[k] for k in keep] for r in good_rows()], [header[k] for k in keep])


def _junk() -> bytes:
    return np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()


def _latin1() -> bytes:
    rows = [r + ["café"] for r in good_rows()]
    return csv_bytes(rows, COLS + ["note"]).decode().encode("latin-1")


def _ragged() -> bytes:
    rows = good_rows()
    rows[5].append("extra")
    return csv_bytes(rows)


def _short_row() -> bytes:
    rows = good_rows()
    rows[7] = rows[7][:-1]
    return csv_bytes(rows)


def _epoch_with_text() -> bytes:
    rows = good_rows()
    for i, r in enumerate(rows, start=1):
        r[0] = str(1_704_153_600 + 60 * i)
    rows[2][0] = "abc"
    return csv_bytes(rows)


def _truncated_gzip() -> bytes:
    z = gzip.compress(good_csv() * 50)
    return z[: len(z) // 2]


def _pq_transform(fn: Callable[[pa.Table], pa.Table]) -> Callable[[], bytes]:
    return lambda: pq_bytes(fn(good_table()))


def _pq_swap(t: pa.Table) -> pa.Table:
    ts = t.column("timestamp").to_pylist()
    ts[6], ts[7] = ts[7], ts[6]
    return t.set_column(0, "timestamp", pa.array(ts, type=t.schema.field("timestamp").type))


def _pq_dup(t: pa.Table) -> pa.Table:
    ts = t.column("timestamp").to_pylist()
    ts[5] = ts[4]
    return t.set_column(0, "timestamp", pa.array(ts, type=t.schema.field("timestamp").type))


def _pq_mixed_tz(t: pa.Table) -> pa.Table:
    text = [ts_text(i) for i in range(1, N + 1)]
    text[3] = text[3][:-1]  # no offset
    return t.set_column(0, "timestamp", pa.array(text))


CSV_DEFECTS = [
    Defect("csv-zero-bytes", "bars.csv", lambda: b"", "empty-file"),
    Defect("csv-header-only", "bars.csv", lambda: (",".join(COLS) + "\n").encode(), "empty-file"),
    Defect("csv-only-blank-lines", "bars.csv", lambda: b"\n\n \n", "empty-file"),
    Defect("csv-blank-header-line", "bars.csv", lambda: b"\n" + good_csv(), "missing-column"),
    Defect("csv-header-then-blank-lines", "bars.csv", lambda: (",".join(COLS) + "\n\n\n").encode(), "empty-file"),
    Defect("csv-missing-close", "bars.csv", _columns(COLS, [0, 1, 2, 3, 5]), "missing-column", column="close"),
    Defect("csv-missing-timestamp", "bars.csv", lambda: csv_bytes(good_rows(), ["when"] + COLS[1:]), "missing-column", column="timestamp"),
    Defect("csv-no-header", "bars.csv", lambda: good_csv().split(b"\n", 1)[1], "missing-column", column="timestamp"),
    Defect("csv-date-and-timestamp", "bars.csv", lambda: csv_bytes([r + [r[0]] for r in good_rows()], COLS + ["Date"]), "ambiguous-column", column="Date"),
    row_defect("csv-unparseable-timestamp", 4, "timestamp", "not-a-date", "bad-timestamp"),
    row_defect("csv-empty-timestamp", 5, "timestamp", "", "bad-timestamp"),
    row_defect("csv-impossible-date", 6, "timestamp", "2024-02-30T00:06:00Z", "bad-timestamp"),
    Defect("csv-blank-line-inside", "bars.csv", _insert_line(3, "\n"), "bad-timestamp", 4, "timestamp", N),
    Defect("csv-mixed-timezones", "bars.csv", cell(3, "timestamp", "2024-01-02T00:03:00"), "mixed-timezones", 3, "timestamp", None, "2024-01-02T00:03:00"),
    Defect("csv-duplicate-timestamp", "bars.csv", cell(6, "timestamp", ts_text(5)), "duplicate-timestamp", 6, "timestamp", N - 1, ts_text(5)),
    Defect("csv-decreasing-timestamp", "bars.csv", _swap(7, 8), "non-increasing-timestamp", 8, "timestamp", N, ts_text(7)),
    row_defect("csv-nan-close", 3, "close", "NaN", "not-finite"),
    row_defect("csv-empty-open", 2, "open", "", "not-finite"),
    row_defect("csv-inf-high", 4, "high", "inf", "not-finite"),
    row_defect("csv-minus-inf-low", 5, "low", "-inf", "not-finite"),
    row_defect("csv-overflowing-high", 4, "high", "1e400", "not-finite"),
    row_defect("csv-na-volume", 7, "volume", "NA", "not-finite"),
    Defect("csv-short-row", "bars.csv", _short_row, "not-finite", 8, "volume", N - 1, ts_text(8)),
    row_defect("csv-text-close", 9, "close", "abc", "non-numeric"),
    row_defect("csv-two-dots-volume", 2, "volume", "1.2.3", "non-numeric"),
    row_defect("csv-zero-open", 2, "open", "0", "price-not-positive"),
    row_defect("csv-negative-close", 3, "close", "-5", "price-not-positive"),
    row_defect("csv-negative-volume", 4, "volume", "-1", "negative-volume"),
    row_defect("csv-high-below-low", 5, "high", "103", "high-below-low"),
    row_defect("csv-high-below-close", 6, "high", "106.5", "high-below-open-close"),
    row_defect("csv-low-above-open", 7, "low", "107.5", "low-above-open-close"),
    Defect("csv-ragged-row", "bars.csv", _ragged, "unreadable", 6),
    Defect("csv-binary-junk", "bars.csv", _junk, "unreadable"),
    Defect("csv-latin1-encoding", "bars.csv", _latin1, "unreadable"),
    Defect("csv-epoch-with-text", "bars.csv", _epoch_with_text, "bad-timestamp", 3, "timestamp", N - 1, "abc"),
    Defect("gz-corrupt", "bars.csv.gz", lambda: b"\x1f\x8b\x08\x00" + _junk(), "unreadable"),
    Defect("gz-truncated", "bars.csv.gz", _truncated_gzip, "unreadable"),
    Defect("unsupported-txt", "bars.txt", good_csv, "unsupported-format"),
    Defect("unsupported-xlsx", "bars.xlsx", good_csv, "unsupported-format"),
]
PARQUET_DEFECTS = [
    Defect("pq-zero-bytes", "bars.parquet", lambda: b"", "empty-file"),
    Defect("pq-zero-rows", "bars.parquet", lambda: pq_bytes(good_table().slice(0, 0)), "empty-file"),
    Defect("pq-junk", "bars.parquet", _junk, "unreadable"),
    Defect("pq-truncated", "bars.parquet", lambda: pq_bytes(good_table())[:200], "unreadable"),
    Defect("pq-csv-content", "bars.pq", good_csv, "unreadable"),
    Defect("pq-missing-low", "bars.parquet", _pq_transform(lambda t: t.drop_columns(["low"])), "missing-column", column="low"),
    Defect("pq-nan-close", "bars.parquet", pq_cell(4, "close", float("nan")), "not-finite", 4, "close", N - 1),
    Defect("pq-null-open", "bars.parquet", pq_cell(2, "open", None), "not-finite", 2, "open", N - 1),
    Defect("pq-null-timestamp", "bars.parquet", pq_cell(3, "timestamp", None), "bad-timestamp", 3, "timestamp", N - 1),
    Defect("pq-decreasing-timestamp", "bars.parquet", _pq_transform(_pq_swap), "non-increasing-timestamp", 8, "timestamp", N),
    Defect("pq-duplicate-timestamp", "bars.parquet", _pq_transform(_pq_dup), "duplicate-timestamp", 6, "timestamp", N - 1),
    Defect("pq-text-price", "bars.parquet", lambda: pq_bytes(good_table().set_column(2, "high", pa.array([str(102 + i) for i in range(1, 5)] + ["x"] + [str(102 + i) for i in range(6, N + 1)]))), "non-numeric", 5, "high", N - 1),
    Defect("pq-mixed-timezones", "bars.parquet", _pq_transform(_pq_mixed_tz), "mixed-timezones", 4, "timestamp"),
    Defect("pq-high-below-low", "bars.parquet", pq_cell(5, "high", 50.0), "high-below-low", 5, "high", N - 1),
    Defect("pq-negative-volume", "bars.parquet", pq_cell(9, "volume", -3.0), "negative-volume", 9, "volume", N - 1),
    Defect("pq-zero-open", "bars.parquet", pq_cell(1, "open", 0.0), "price-not-positive", 1, "open", N - 1),
]  # fmt: skip
DEFECTS = CSV_DEFECTS + PARQUET_DEFECTS
IDS = [d.id for d in DEFECTS]


def _write(workdir, d: Defect):
    path = workdir / "in" / d.filename
    path.write_bytes(d.make())
    return path


def test_corpus_is_large_and_has_one_distinct_defect_per_file() -> None:
    assert len(DEFECTS) >= 30
    assert len(set(IDS)) == len(IDS)
    assert {d.filename.split(".", 1)[1] for d in DEFECTS} >= {"csv", "csv.gz", "parquet", "pq"}


@pytest.mark.parametrize("d", DEFECTS, ids=IDS)
def test_defect_rejected_with_rule_row_column_file_name_and_nothing_written(d: Defect, workdir, snapshot) -> None:
    path = _write(workdir, d)
    before = snapshot(workdir)
    with pytest.raises(BarDataError) as info:
        load_bars(path)
    err = info.value
    assert (err.rule, err.row, err.column) == (d.rule, d.row, d.column)
    assert err.path == str(path) and path.name in str(err)
    assert f"rule '{d.rule}'" in str(err)
    if d.timestamp is not None:
        assert err.timestamp == d.timestamp
    if d.row is not None and d.rule not in ("bad-timestamp", "unreadable"):
        assert err.timestamp  # a row with a readable timestamp is named by it too
    assert snapshot(workdir) == before


@pytest.mark.parametrize("d", DEFECTS, ids=IDS)
def test_cli_validate_exits_2_with_one_line_naming_the_rule(d: Defect, workdir, snapshot) -> None:
    path = _write(workdir, d)
    before = snapshot(workdir)
    result = CliRunner().invoke(app, ["data", "validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"rule '{d.rule}'" in lines[0] and path.name in lines[0]
    assert snapshot(workdir) == before


@pytest.mark.parametrize("d", DEFECTS, ids=IDS)
def test_repair_fixes_row_defects_by_dropping_rows_and_still_fails_file_defects(d: Defect, workdir) -> None:
    path = _write(workdir, d)
    if d.repaired is None:
        assert d.rule in FILE_RULES
        with pytest.raises(BarDataError) as info:
            load_bars(path, repair=True)
        assert info.value.rule == d.rule
    else:
        bars = load_bars(path, repair=True)
        assert len(bars) == d.repaired
        assert np.all(np.diff(bars.timestamps) > 0)


def test_cli_validate_prints_ok_and_exits_0_on_good_data(workdir, snapshot) -> None:
    path = workdir / "in" / "bars.csv"
    path.write_bytes(good_csv())
    before = snapshot(workdir)
    result = CliRunner().invoke(app, ["data", "validate", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich may wrap the line at the terminal width
    assert text.startswith(f"ok {path}") and f"{N} bars" in text and "volume present" in text
    assert snapshot(workdir) == before


def test_good_base_files_load_in_both_formats(workdir) -> None:
    a = workdir / "in" / "a.csv"
    b = workdir / "in" / "b.parquet"
    a.write_bytes(good_csv())
    b.write_bytes(pq_bytes(good_table()))
    x, y = load_bars(a), load_bars(b)
    assert len(x) == len(y) == N
    for col in ("timestamps", "open", "high", "low", "close", "volume"):
        assert np.array_equal(getattr(x, col), getattr(y, col))


def test_features_build_on_bad_data_leaves_cache_dir_untouched(workdir, snapshot) -> None:
    pytest.importorskip("foxhunt.features.cache")
    path = workdir / "in" / "bars.csv"
    path.write_bytes(cell(3, "close", "NaN")())
    before = snapshot(workdir)
    result = CliRunner().invoke(app, ["features", "build", str(path), "--cache-dir", str(workdir / "cache"), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert "rule 'not-finite'" in result.output
    assert snapshot(workdir) == before
