"""load_bars: column aliases, volume, timestamps and time zones, Parquet types, repair, speed."""

from __future__ import annotations

import gzip
import logging
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from foxhunt.data.bars import BarDataError
from foxhunt.data.loader import load_bars

T0 = 1_704_153_600 * 10**9  # 2024-01-02T00:00:00Z in ns
MIN = 60 * 10**9
DAY = 86_400 * 10**9
BODY = ["100,102,99,101,1000", "101,103,100,102,1100", "102,104,101,103,1200"]


def write(tmp_path: Path, text: str, name: str = "bars.csv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def csv_with(timestamps: list[str], header: str = "timestamp,open,high,low,close,volume") -> str:
    return header + "\n" + "".join(f"{t},{b}\n" for t, b in zip(timestamps, BODY))


MINUTES = ["2024-01-02T00:00:00Z", "2024-01-02T00:01:00Z", "2024-01-02T00:02:00Z"]


# --------------------------------------------------------------------------- columns
@pytest.mark.parametrize(
    "header",
    [
        "timestamp,open,high,low,close,volume",
        "Date,Open,High,Low,Close,Volume",
        "DATETIME,OPEN,HIGH,LOW,CLOSE,VOLUME",
        "time,open,high,low,close,volume",
        " Timestamp , Open ,High,Low,Close,Volume",
        "close,volume,Time,low,high,open",
    ],
)
def test_column_aliases_are_case_insensitive_and_order_free(tmp_path: Path, header: str) -> None:
    cells = dict(zip(["timestamp", "open", "high", "low", "close", "volume"], [None, "100", "102", "99", "101", "1000"]))
    names = [h.strip().lower() for h in header.split(",")]
    canon = ["timestamp" if n in ("date", "datetime", "time") else n for n in names]
    row = ",".join(MINUTES[0] if c == "timestamp" else cells[c] for c in canon)
    bars = load_bars(write(tmp_path, header + "\n" + row + "\n"))
    assert (bars.open[0], bars.high[0], bars.low[0], bars.close[0], bars.volume[0]) == (100, 102, 99, 101, 1000)
    assert bars.timestamps[0] == T0 and bars.has_volume


def test_extra_columns_like_adj_close_are_ignored(tmp_path: Path) -> None:
    text = "Date,Open,High,Low,Close,Adj Close,Volume,Note\n2024-01-02,100,102,99,101,55.5,1000,hello\n"
    bars = load_bars(write(tmp_path, text))
    assert bars.close[0] == 101.0 and bars.volume[0] == 1000.0


def test_missing_volume_gives_ones_has_volume_false_and_a_warning(tmp_path: Path, caplog) -> None:
    text = "timestamp,open,high,low,close\n" + "".join(f"{t},{b.rsplit(',', 1)[0]}\n" for t, b in zip(MINUTES, BODY))
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        bars = load_bars(write(tmp_path, text))
    assert not bars.has_volume
    assert np.array_equal(bars.volume, np.ones(3)) and bars.volume.dtype == np.float64
    assert any("volume missing" in r.getMessage() and r.name == "foxhunt.data" for r in caplog.records)


def test_output_arrays_are_int64_ns_and_float64_contiguous(tmp_path: Path) -> None:
    bars = load_bars(write(tmp_path, csv_with(MINUTES)))
    assert bars.timestamps.dtype == np.int64
    for col in ("open", "high", "low", "close", "volume"):
        arr = getattr(bars, col)
        assert arr.dtype == np.float64 and arr.flags.c_contiguous
    assert list(bars.timestamps) == [T0, T0 + MIN, T0 + 2 * MIN]
    assert bars.source == str(tmp_path / "bars.csv")


# --------------------------------------------------------------------------- timestamps
def test_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    ts = ["2024-01-02T09:30:00-05:00", "2024-01-02T16:31:00+01:00", "2024-01-02T15:32:00+0000"]
    bars = load_bars(write(tmp_path, csv_with(ts)))
    assert list(bars.timestamps) == [T0 + 14 * 60 * MIN + 30 * MIN, T0 + 15 * 60 * MIN + 31 * MIN, T0 + 15 * 60 * MIN + 32 * MIN]


def test_different_offsets_in_one_file_are_fine_only_mixing_with_naive_is_not(tmp_path: Path) -> None:
    # A DST change gives two offsets in one file: both are explicit, so this is not "mixed".
    ts = ["2024-03-08T10:00:00-05:00", "2024-03-11T10:00:00-04:00", "2024-03-12T10:00:00-04:00"]
    bars = load_bars(write(tmp_path, csv_with(ts)))
    assert np.diff(bars.timestamps)[0] == 3 * DAY - 3_600 * 10**9


def test_naive_timestamps_are_taken_as_utc(tmp_path: Path) -> None:
    ts = ["2024-01-02 00:00:00", "2024-01-02 00:01:00", "2024-01-02T00:02:00"]
    assert list(load_bars(write(tmp_path, csv_with(ts))).timestamps) == [T0, T0 + MIN, T0 + 2 * MIN]


def test_naive_mixed_with_offset_is_mixed_timezones(tmp_path: Path) -> None:
    ts = ["2024-01-02T00:00:00", "2024-01-02T00:01:00", "2024-01-02T00:02:00+00:00"]
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, csv_with(ts)), repair=True)  # a file-level problem: repair cannot fix it
    assert info.value.rule == "mixed-timezones" and info.value.row == 3


def test_dates_become_utc_midnight(tmp_path: Path) -> None:
    ts = ["2024-01-02", "2024-01-03", "2024-01-04"]
    assert list(load_bars(write(tmp_path, csv_with(ts))).timestamps) == [T0, T0 + DAY, T0 + 2 * DAY]


@pytest.mark.parametrize(
    "ts, opts",
    [
        (["1/2/2024", "1/3/2024", "1/4/2024"], {"dayfirst": False}),  # US month/day/year (the arch samples)
        (["02.01.2024", "03.01.2024", "04.01.2024"], {"dayfirst": True}),
        (["2024/01/02", "2024/01/03", "2024/01/04"], {}),
        (["2024.01.02", "2024.01.03", "2024.01.04"], {}),  # MetaTrader
        (["20240102", "20240103", "20240104"], {}),  # read by pandas as integers: YYYYMMDD, not epoch
    ],
)
def test_common_non_iso_date_layouts(tmp_path: Path, ts: list[str], opts: dict) -> None:
    assert list(load_bars(write(tmp_path, csv_with(ts)), **opts).timestamps) == [T0, T0 + DAY, T0 + 2 * DAY]


@pytest.mark.parametrize("ts", [["1/2/2024", "1/3/2024", "1/4/2024"], ["02.01.2024", "03.01.2024", "04.01.2024"]])
def test_day_month_dates_no_day_above_12_settles_are_refused_naming_data_dayfirst(tmp_path: Path, ts: list[str]) -> None:
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, csv_with(ts)))
    assert info.value.rule == "ambiguous-dates" and info.value.column == "timestamp"
    assert "data.dayfirst = true (day first) or false (month first)" in str(info.value)


def test_day_first_layout_is_chosen_when_month_first_cannot_parse(tmp_path: Path) -> None:
    ts = ["13/01/2024", "14/01/2024", "15/01/2024"]
    assert load_bars(write(tmp_path, csv_with(ts))).timestamps[0] == T0 + 11 * DAY


@pytest.mark.parametrize("scale", [1, 1_000, 1_000_000, 1_000_000_000])
def test_integer_epochs_in_s_ms_us_ns(tmp_path: Path, scale: int) -> None:
    ts = [str((T0 // 10**9 + 60 * i) * scale) for i in range(3)]
    assert list(load_bars(write(tmp_path, csv_with(ts))).timestamps) == [T0, T0 + MIN, T0 + 2 * MIN]


def test_fractional_epoch_seconds(tmp_path: Path) -> None:
    ts = ["1704153600.5", "1704153660.25", "1704153720"]
    got = load_bars(write(tmp_path, csv_with(ts))).timestamps
    assert np.allclose(got - T0, [5e8, MIN + 2.5e8, 2 * MIN], atol=1e3)


def test_nanosecond_iso_timestamps_are_exact(tmp_path: Path) -> None:
    ts = ["2024-01-02T00:00:00.000000001Z", "2024-01-02T00:00:00.000000002Z", "2024-01-02T00:00:01Z"]
    assert list(load_bars(write(tmp_path, csv_with(ts))).timestamps) == [T0 + 1, T0 + 2, T0 + 10**9]


def test_out_of_range_year_is_bad_timestamp(tmp_path: Path) -> None:
    ts = ["2024-01-02T00:00:00Z", "3000-01-01T00:00:00Z", "3000-01-02T00:00:00Z"]
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, csv_with(ts)))
    assert (info.value.rule, info.value.row) == ("bad-timestamp", 2)


def test_gzip_csv_bom_and_trailing_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "bars.csv.gz"
    p.write_bytes(gzip.compress(("\ufeff" + csv_with(MINUTES, "Date,Open,High,Low,Close,Volume") + "\n\n").encode()))
    bars = load_bars(p)
    assert len(bars) == 3 and bars.timestamps[0] == T0


def test_uppercase_extension_is_accepted(tmp_path: Path) -> None:
    assert len(load_bars(write(tmp_path, csv_with(MINUTES), "BARS.CSV"))) == 3


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "nope.csv")
    assert info.value.rule == "unreadable" and "nope.csv" in str(info.value)


# --------------------------------------------------------------------------- parquet
def _pq(tmp_path: Path, ts: pa.Array, name: str = "bars.parquet") -> Path:
    n = len(ts)
    i = np.arange(n, dtype=np.float64)
    table = pa.table({"Date": ts, "Open": 100 + i, "High": 102 + i, "Low": 99 + i, "Close": 101 + i, "Volume": pa.array(np.arange(n) * 10, type=pa.int64())})
    p = tmp_path / name
    pq.write_table(table, p)
    return p


@pytest.mark.parametrize(
    "array",
    [
        pa.array(np.array([T0, T0 + MIN, T0 + 2 * MIN]), type=pa.timestamp("ns", tz="UTC")),
        pa.array(np.array([T0, T0 + MIN, T0 + 2 * MIN]) // 1000, type=pa.timestamp("us")),  # naive = UTC
        pa.array(np.array([T0, T0 + MIN, T0 + 2 * MIN]) // 10**6, type=pa.timestamp("ms", tz="America/New_York")),
        pa.array(MINUTES),
        pa.array(["2024-01-01T19:00:00-05:00", "2024-01-01T19:01:00-05:00", "2024-01-01T19:02:00-05:00"]),
        pa.array(np.array([T0, T0 + MIN, T0 + 2 * MIN]) // 10**9, type=pa.int64()),
    ],
    ids=["ts-ns-utc", "ts-us-naive", "ts-ms-new-york", "string-z", "string-offset", "epoch-int"],
)
def test_parquet_timestamp_types(tmp_path: Path, array: pa.Array) -> None:
    bars = load_bars(_pq(tmp_path, array))
    assert list(bars.timestamps) == [T0, T0 + MIN, T0 + 2 * MIN]
    assert bars.volume.dtype == np.float64 and bars.volume[2] == 20.0


def test_parquet_date32_column_is_utc_midnight(tmp_path: Path) -> None:
    days = pa.array(np.array(["2024-01-02", "2024-01-03", "2024-01-04"], dtype="datetime64[D]"), type=pa.date32())
    assert list(load_bars(_pq(tmp_path, days, "bars.pq")).timestamps) == [T0, T0 + DAY, T0 + 2 * DAY]


# --------------------------------------------------------------------------- rules and repair
def test_first_offending_row_in_file_order_is_reported(tmp_path: Path) -> None:
    rows = [f"{t},{b}" for t, b in zip(MINUTES, BODY)]
    rows[2] = MINUTES[2] + ",102,104,101,103,NaN"  # row 3: not-finite
    rows[1] = MINUTES[1] + ",101,99,100,102,1100"  # row 2: high below low (reported: earlier)
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, "timestamp,open,high,low,close,volume\n" + "\n".join(rows) + "\n"))
    assert (info.value.rule, info.value.row, info.value.column) == ("high-below-low", 2, "high")


def test_within_one_row_the_first_rule_in_rule_order_wins(tmp_path: Path) -> None:
    # open = -1 breaks price-not-positive and low-above-open-close; price comes first.
    text = "timestamp,open,high,low,close,volume\n" + MINUTES[0] + ",-1,102,99,101,1000\n"
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, text))
    assert (info.value.rule, info.value.column) == ("price-not-positive", "open")


def test_error_message_names_file_row_timestamp_column_and_rule(tmp_path: Path) -> None:
    text = "Date,Open,High,Low,Close,Volume\n" + "\n".join(f"{t},{b}" for t, b in zip(MINUTES, BODY)).replace("1100", "-7") + "\n"
    with pytest.raises(BarDataError) as info:
        load_bars(write(tmp_path, text, "my_bars.csv"))
    msg = str(info.value)
    for part in ("my_bars.csv", "row 2", MINUTES[1], "'Volume'", "negative-volume", "-7"):
        assert part in msg


def test_repair_sorts_drops_duplicates_and_bad_rows_and_logs_it(tmp_path: Path, caplog) -> None:
    lines = [
        f"{MINUTES[2]},{BODY[2]}",
        f"{MINUTES[0]},{BODY[0]}",
        f"{MINUTES[0]},100,102,99,100.5,999",  # duplicate of the row above: dropped (first kept)
        f"{MINUTES[1]},101,103,100,102,-5",  # negative volume: dropped
        f"2024-01-02T00:03:00Z,{BODY[1]}",
        f"2024-01-02T00:04:00Z,1,1,1,oops,1",  # non-numeric: dropped
    ]
    p = write(tmp_path, "timestamp,open,high,low,close,volume\n" + "\n".join(lines) + "\n")
    with pytest.raises(BarDataError):
        load_bars(p)
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        bars = load_bars(p, repair=True)
    assert list(bars.timestamps) == [T0, T0 + 2 * MIN, T0 + 3 * MIN]
    assert bars.close[0] == 101.0  # the first of the duplicates in file order
    msg = " ".join(r.getMessage() for r in caplog.records if r.name == "foxhunt.data")
    assert "dropped 3 of 6 rows" in msg
    for part in ("negative-volume 1", "non-numeric 1", "duplicate-timestamp 1", "sorted"):
        assert part in msg


def test_repair_with_nothing_left_fails(tmp_path: Path) -> None:
    p = write(tmp_path, "timestamp,open,high,low,close\n" + MINUTES[0] + ",1,0.5,1,1\n" + MINUTES[1] + ",NaN,1,1,1\n")
    with pytest.raises(BarDataError) as info:
        load_bars(p, repair=True)
    assert info.value.rule == "empty-file" and "dropped all 2 rows" in str(info.value)


def test_repair_on_clean_data_changes_nothing(tmp_path: Path) -> None:
    p = write(tmp_path, csv_with(MINUTES))
    a, b = load_bars(p), load_bars(p, repair=True)
    assert all(np.array_equal(getattr(a, c), getattr(b, c)) for c in ("timestamps", "open", "close", "volume"))


def test_million_row_csv_loads_in_a_few_seconds(tmp_path: Path) -> None:
    n = 1_000_000
    ts = np.char.add(np.datetime_as_string(T0 + np.arange(n) * MIN + np.zeros(1, "datetime64[ns]"), unit="s"), "Z")
    x = 100.0 + np.random.default_rng(0).random(n)
    table = pa.table({"timestamp": ts, "open": x, "high": x + 1, "low": x - 1, "close": x, "volume": x})
    p = tmp_path / "big.csv"
    pacsv.write_csv(table, p)  # Arrow: much faster than pandas.to_csv for building the input
    start = time.perf_counter()
    bars = load_bars(p)
    seconds = time.perf_counter() - start
    assert len(bars) == n
    assert seconds < 10.0, f"1M-row CSV took {seconds:.1f} s"  # ~1.2 s on an idle 2-core box


def test_epoch_ms_column_made_float_by_an_empty_cell_stays_exact(tmp_path: Path) -> None:
    ms = [str((T0 + 123 * 10**6) // 10**6 + 60_000 * i) for i in range(3)]
    ms[1] = ""
    p = write(tmp_path, csv_with(ms))
    with pytest.raises(BarDataError) as info:
        load_bars(p)
    assert (info.value.rule, info.value.row) == ("bad-timestamp", 2)
    assert list(load_bars(p, repair=True).timestamps) == [T0 + 123 * 10**6, T0 + 123 * 10**6 + 2 * MIN]
