"""load_bars on the inputs that used to slip through: int64 overflow in the time order, a longer
first data row, Parquet columns of a type that cannot hold the field (issue 11)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.loader import load_bars
from foxhunt.data.validate import FILE_RULES, validate_bars

HEADER = "timestamp,open,high,low,close\n"


def _csv(tmp_path: Path, body: str, name: str = "bars.csv") -> Path:
    p = tmp_path / name
    p.write_text(HEADER + body)
    return p


@pytest.mark.parametrize("first, second", [(9 * 10**18, -9 * 10**18), (2, -(2**63 - 1))])
def test_decreasing_timestamps_whose_difference_overflows_int64_are_rejected(tmp_path: Path, first: int, second: int) -> None:
    p = _csv(tmp_path, f"{first},1,1,1,1\n{second},1,1,1,1\n")
    with pytest.raises(BarDataError) as e:
        load_bars(p, timestamp_unit="ns")  # far outside 1971..2200: no unit is inferred for them
    assert (e.value.rule, e.value.row, e.value.column) == ("non-increasing-timestamp", 2, "timestamp")
    assert f"earlier than row 1 ({first})" in str(e.value)


def test_increasing_timestamps_spanning_more_than_int64_load_and_have_a_positive_spacing(tmp_path: Path) -> None:
    p = _csv(tmp_path, f"{-9 * 10**18},1,1,1,1\n{9 * 10**18},1,1,1,1\n")
    bars = load_bars(p, timestamp_unit="ns")
    assert bars.timestamps.tolist() == [-9 * 10**18, 9 * 10**18]
    assert bars.median_bar_seconds() == pytest.approx(18e9)  # not the wrapped negative difference


def test_repair_sorts_rows_whose_difference_overflows_int64(tmp_path: Path) -> None:
    p = _csv(tmp_path, f"{9 * 10**18},1,1,1,1\n{-9 * 10**18},2,2,2,2\n")
    bars = load_bars(p, repair=True, timestamp_unit="ns")
    assert bars.timestamps.tolist() == [-9 * 10**18, 9 * 10**18] and bars.close.tolist() == [2.0, 1.0]


def test_validate_bars_rejects_an_in_memory_series_whose_order_overflows(tmp_path: Path) -> None:
    one = np.ones(2)
    bars = Bars(np.array([2, -(2**63 - 1)], dtype=np.int64), one, one, one, one, one)
    with pytest.raises(BarDataError, match="non-increasing-timestamp"):
        validate_bars(bars)


@pytest.mark.parametrize("row", [1, 2])
def test_an_extra_field_is_rejected_on_the_first_data_row_as_on_any_other(tmp_path: Path, row: int) -> None:
    rows = ["2024-01-01,1,1,1,1", "2024-01-02,1,1,1,1", "2024-01-03,1,1,1,1"]
    rows[row - 1] += ",5"
    p = _csv(tmp_path, "".join(r + "\n" for r in rows))
    with pytest.raises(BarDataError) as e:
        load_bars(p)
    assert (e.value.rule, e.value.row) == ("unreadable", row)
    assert "expected 5 fields" in str(e.value).lower() and "saw 6" in str(e.value)


def test_a_shorter_first_row_is_a_row_error_not_a_silent_shift(tmp_path: Path) -> None:
    p = _csv(tmp_path, "2024-01-01,1,1,1\n2024-01-02,1,1,1,1\n")
    with pytest.raises(BarDataError) as e:
        load_bars(p)
    assert (e.value.rule, e.value.row, e.value.column) == ("not-finite", 1, "close")


def _parquet(tmp_path: Path, column: str, arr: pa.Array) -> Path:
    ts = pa.array(np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[ns]"))
    cols = {"timestamp": ts, "open": pa.array([1.0, 2.0]), "high": pa.array([1.0, 2.0]),
            "low": pa.array([1.0, 2.0]), "close": pa.array([1.0, 2.0])}
    cols[column] = arr
    p = tmp_path / "bars.parquet"
    pq.write_table(pa.table(cols), p)
    return p


BAD_TYPES = {
    "list<double>": pa.array([[1.0, 2.0], [2.0]], type=pa.list_(pa.float64())),
    "empty list": pa.array([[], [2.0]], type=pa.list_(pa.float64())),
    "struct": pa.array([{"a": 1.0}, {"a": 2.0}]),
    "map": pa.array([[("a", 1.0)], [("a", 2.0)]], type=pa.map_(pa.string(), pa.float64())),
    "bool": pa.array([True, False]),
    "duration": pa.array([1, 2], type=pa.duration("s")),
    "time": pa.array([1, 2], type=pa.time32("s")),
}


@pytest.mark.parametrize("column", ["open", "timestamp"])
@pytest.mark.parametrize("kind", sorted(BAD_TYPES))
def test_a_parquet_column_of_a_type_that_cannot_hold_the_field_is_a_clear_data_error(tmp_path: Path, column: str, kind: str) -> None:
    p = _parquet(tmp_path, column, BAD_TYPES[kind])
    with pytest.raises(BarDataError) as e:
        load_bars(p)
    assert (e.value.rule, e.value.column, e.value.path) == ("bad-column-type", column, str(p))
    assert f"Parquet type {str(BAD_TYPES[kind].type).split('<')[0].split('[')[0]}" in str(e.value)
    assert "bad-column-type" in FILE_RULES
    with pytest.raises(BarDataError, match="bad-column-type"):
        load_bars(p, repair=True)  # a file-level problem: repair cannot fix it


def test_a_timestamp_typed_price_column_is_rejected_not_read_as_nanoseconds(tmp_path: Path) -> None:
    p = _parquet(tmp_path, "close", pa.array(np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[ns]")))
    with pytest.raises(BarDataError, match="bad-column-type"):
        load_bars(p)


@pytest.mark.parametrize("arr", [
    pa.array([1, 2], type=pa.decimal128(5, 2)),
    pa.array(["1", "2"]).dictionary_encode(),
    pa.array([1, 2], type=pa.int8()),
    pa.array([1.0, 2.0], type=pa.float32()),
], ids=["decimal", "dictionary<string>", "int8", "float32"])
def test_number_and_text_like_parquet_price_types_still_load(tmp_path: Path, arr: pa.Array) -> None:
    bars = load_bars(_parquet(tmp_path, "open", arr))
    assert bars.open.tolist() == [1.0, 2.0]
