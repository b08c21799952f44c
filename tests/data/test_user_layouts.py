"""load_bars on the files people have (issue 38): pandas' df.to_csv(), MetaTrader Date + Time
columns, Dukascopy day-first times, Binance / CCXT epochs with and without a header, Yahoo's Adj
Close; each loads with the right bars and says what it inferred, or is refused naming the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foxhunt.data.bars import BarDataError
from foxhunt.data.loader import load_bars

N = 40
HOUR = 3_600 * 10**9
DAY = 24 * HOUR
T0 = int(pd.Timestamp("2017-01-01 22:00").as_unit("ns").value)


def frame(n: int = N, start: str = "2017-01-01 22:00", freq: str = "h") -> pd.DataFrame:
    """n bars indexed by time (ns): a random walk with consistent OHLC and integer volume."""
    idx = pd.date_range(start, periods=n, freq=freq).as_unit("ns")
    rng = np.random.default_rng(1)
    c = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    o = np.r_[c[0], c[:-1]]
    return pd.DataFrame({"Open": o, "High": np.maximum(o, c) * 1.001, "Low": np.minimum(o, c) * 0.999, "Close": c,
                         "Volume": rng.integers(1, 1000, n)}, index=idx)


def check_bars(bars, df: pd.DataFrame) -> None:
    assert bars.timestamps.tolist() == df.index.tz_localize(None).as_unit("ns").asi8.tolist() if df.index.tz else \
        bars.timestamps.tolist() == df.index.asi8.tolist()
    np.testing.assert_allclose(bars.close, df["Close"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(bars.volume, df["Volume"].to_numpy())


def test_pandas_to_csv_index_column_with_an_empty_name_is_the_timestamp(tmp_path: Path) -> None:
    df = frame()
    df.to_csv(tmp_path / "a.csv")
    bars = load_bars(tmp_path / "a.csv")
    check_bars(bars, df)
    assert bars.notes == ("timestamps: the first column '' (an index, as pandas writes it)",
                          "times without a UTC offset taken as UTC")


@pytest.mark.parametrize("name", ["Unnamed: 0", "index"])
def test_index_like_first_column_names_are_the_timestamp(tmp_path: Path, name: str) -> None:
    df = frame()
    df.rename_axis(name).to_csv(tmp_path / "a.csv")
    check_bars(load_bars(tmp_path / "a.csv"), df)


def test_a_row_number_first_column_beside_a_date_column_is_ignored(tmp_path: Path) -> None:
    df = frame()
    df.rename_axis("Date").reset_index().to_csv(tmp_path / "a.csv")  # ",Date,Open,...": 0, 1, 2 ... first
    check_bars(load_bars(tmp_path / "a.csv"), df)


def test_a_row_number_index_without_times_is_refused_as_no_timestamp_column(tmp_path: Path) -> None:
    frame().reset_index(drop=True).to_csv(tmp_path / "a.csv")
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert (info.value.rule, info.value.column) == ("missing-column", "timestamp")
    assert "the column '' holds numbers, not times (epoch numbers 0 .. 39 fall in 1971..2200 in no unit" in str(info.value)


def test_time_zone_aware_index_becomes_utc_without_a_naive_note(tmp_path: Path) -> None:
    df = frame().tz_localize("America/New_York")
    df.to_csv(tmp_path / "a.csv")  # "2017-01-01 22:00:00-05:00"
    bars = load_bars(tmp_path / "a.csv")
    assert bars.timestamps[0] == T0 + 5 * HOUR
    assert not any("UTC" in n for n in bars.notes)


def test_parquet_written_by_pandas_with_a_datetime_index(tmp_path: Path) -> None:
    df = frame()
    df.to_parquet(tmp_path / "a.parquet")  # the index is a column named after it, or __index_level_0__
    check_bars(load_bars(tmp_path / "a.parquet"), df)


def test_metatrader_tab_separated_date_and_time_columns_are_joined(tmp_path: Path) -> None:
    df = frame()
    mt = pd.DataFrame({"<DATE>": df.index.strftime("%Y.%m.%d"), "<TIME>": df.index.strftime("%H:%M:%S"),
                       "<OPEN>": df.Open.to_numpy(), "<HIGH>": df.High.to_numpy(), "<LOW>": df.Low.to_numpy(),
                       "<CLOSE>": df.Close.to_numpy(), "<TICKVOL>": df.Volume.to_numpy(), "<VOL>": 0, "<SPREAD>": 3})
    mt.to_csv(tmp_path / "a.csv", sep="\t", index=False)
    bars = load_bars(tmp_path / "a.csv")
    check_bars(bars, df)
    assert bars.notes == ("timestamps: columns '<DATE>' and '<TIME>' joined", "times without a UTC offset taken as UTC",
                          "volume from '<TICKVOL>' ('<VOL>' is all zero)")


def test_date_and_time_columns_with_a_bad_time_name_the_joined_columns(tmp_path: Path) -> None:
    text = "Date,Time,Open,High,Low,Close\n2024-01-02,09:30,1,1,1,1\n2024-01-02,25:99,1,1,1,1\n"
    (tmp_path / "a.csv").write_text(text)
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert (info.value.rule, info.value.row, info.value.column) == ("bad-timestamp", 2, "Date + Time")


def dukascopy(tmp_path: Path, n: int) -> tuple[Path, pd.DataFrame]:
    df = frame(n)
    out = df.copy()
    out.index = df.index.strftime("%d.%m.%Y %H:%M:%S.000")
    out.rename_axis("Gmt time").to_csv(tmp_path / "duka.csv")
    return tmp_path / "duka.csv", df


def test_day_first_times_are_read_so_when_a_day_above_12_settles_it(tmp_path: Path) -> None:
    path, df = dukascopy(tmp_path, 300)  # hourly from 1 January: the 13th comes at row 267
    bars = load_bars(path)
    check_bars(bars, df)
    assert "timestamps: day first (row 267, '13.01.2017 00:00:00.000', has a day above 12 in the first field)" in bars.notes


def test_month_first_dates_are_read_so_when_a_day_above_12_in_the_second_field_settles_it(tmp_path: Path) -> None:
    df = frame(30, "2024-01-02", "D")
    out = df.copy()
    out.index = [f"{t.month}/{t.day}/{t.year}" for t in df.index]
    out.rename_axis("Date").to_csv(tmp_path / "a.csv")
    bars = load_bars(tmp_path / "a.csv")
    check_bars(bars, df)
    assert "timestamps: month first (row 12, '1/13/2024', has a day above 12 in the second field)" in bars.notes


def test_day_first_times_no_day_settles_need_data_dayfirst(tmp_path: Path) -> None:
    path, df = dukascopy(tmp_path, 100)  # 1 to 6 January: every time reads both ways
    with pytest.raises(BarDataError) as info:
        load_bars(path)
    assert str(info.value) == (
        f"file {path}, column 'Gmt time': rule 'ambiguous-dates' broken: '01.01.2017 22:00:00.000' .. '06.01.2017 01:00:00.000' "
        "read as day/month and as month/day, and no day above 12 settles which; set data.dayfirst = true (day first) or "
        "false (month first), e.g. --set data.dayfirst=true")
    check_bars(load_bars(path, dayfirst=True), df)
    month_first = load_bars(path, dayfirst=False).timestamps
    assert month_first[0] == T0  # 01.01: the same day either way
    assert month_first[5] == pd.Timestamp("2017-02-01 03:00").value  # '02.01.2017 03:00' read as 1 February


def test_timestamp_format_reads_a_layout_no_inference_knows(tmp_path: Path) -> None:
    df = frame()
    out = df.copy()
    out.index = df.index.strftime("%H:%M %d|%m|%Y")
    out.rename_axis("time").to_csv(tmp_path / "a.csv")
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert info.value.rule == "bad-timestamp" and info.value.row == 1
    assert "no known layout reads this column; set data.timestamp_format" in str(info.value)
    bars = load_bars(tmp_path / "a.csv", timestamp_format="%H:%M %d|%m|%Y")
    check_bars(bars, df)
    assert bars.notes[0] == "timestamps: layout '%H:%M %d|%m|%Y' (data.timestamp_format)"


def test_a_format_pandas_refuses_is_one_file_level_error(tmp_path: Path) -> None:
    frame().to_csv(tmp_path / "a.csv")
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv", timestamp_format="%Y-%m-%d %H:%M:%S %Q")
    assert (info.value.rule, info.value.column, info.value.row) == ("bad-timestamp-format", "", None)
    assert str(info.value).endswith("data.timestamp_format '%Y-%m-%d %H:%M:%S %Q': 'Q' is a bad directive in format "
                                    "'%Y-%m-%d %H:%M:%S %Q'")


@pytest.mark.parametrize("unit, per_s", [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_epoch_timestamps_are_read_in_the_unit_their_magnitude_settles(tmp_path: Path, unit: str, per_s: int) -> None:
    df = frame()
    out = df.copy()
    out.index = df.index.asi8 // (10**9 // per_s)
    out.rename_axis("timestamp").to_csv(tmp_path / "a.csv")
    bars = load_bars(tmp_path / "a.csv")
    check_bars(bars, df)
    words = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
    assert bars.notes == (f"timestamps: epoch {words} (by magnitude)",)


def test_epochs_no_unit_puts_in_1971_2200_need_data_timestamp_unit(tmp_path: Path) -> None:
    text = "timestamp,open,high,low,close\n" + "".join(f"{i * 3600},1,1,1,1\n" for i in range(5))
    (tmp_path / "a.csv").write_text(text)
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert str(info.value).endswith("rule 'ambiguous-epoch' broken: epoch numbers 0 .. 14400 fall in 1971..2200 in no unit "
                                    "(s, ms, us, ns); set data.timestamp_unit to read them in one, e.g. --set data.timestamp_unit=s")
    assert load_bars(tmp_path / "a.csv", timestamp_unit="s").timestamps.tolist() == [i * HOUR for i in range(5)]


def test_one_epoch_far_outside_the_inferred_units_range_is_a_bad_row(tmp_path: Path) -> None:
    rows = [str(1_704_153_600 + 60 * i) for i in range(5)]
    rows[3] = "9000000000000000000"
    (tmp_path / "a.csv").write_text("timestamp,open,high,low,close\n" + "".join(f"{r},1,1,1,1\n" for r in rows))
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert (info.value.rule, info.value.row) == ("bad-timestamp", 4)
    assert "reads as epoch seconds in 1971..2200 by magnitude; data.timestamp_unit sets the unit" in str(info.value)


def test_binance_kline_file_without_a_header(tmp_path: Path) -> None:
    df = frame()
    ms = df.index.asi8 // 10**6
    k = pd.DataFrame({"t": ms, "o": df.Open, "h": df.High, "l": df.Low, "c": df.Close, "v": df.Volume, "ct": ms + 3_599_999,
                      "q": 1.5, "n": 7, "tb": 0.5, "tq": 0.7, "i": 0})
    k.to_csv(tmp_path / "BTCUSDT-1h-2017-01.csv", header=False, index=False)
    bars = load_bars(tmp_path / "BTCUSDT-1h-2017-01.csv")
    check_bars(bars, df)
    assert bars.notes == ("no header line: columns read as Binance kline columns", "timestamps: epoch milliseconds (by magnitude)")


def test_binance_kline_file_with_its_header(tmp_path: Path) -> None:
    df = frame()
    us = df.index.asi8 // 10**3  # Binance's spot files moved to microseconds
    k = pd.DataFrame({"open_time": us, "open": df.Open, "high": df.High, "low": df.Low, "close": df.Close, "volume": df.Volume,
                      "close_time": us + 3_599_999_999, "quote_volume": 1.0, "count": 3, "taker_buy_volume": 0.5,
                      "taker_buy_quote_volume": 0.5, "ignore": 0})
    k.to_csv(tmp_path / "k.csv", index=False)
    check_bars(load_bars(tmp_path / "k.csv"), df)


def test_ccxt_rows_without_a_header(tmp_path: Path) -> None:
    df = frame()
    rows = np.column_stack([df.index.asi8 // 10**6, df[["Open", "High", "Low", "Close", "Volume"]].to_numpy()])
    pd.DataFrame(rows).astype({0: "int64"}).to_csv(tmp_path / "a.csv", header=False, index=False)
    bars = load_bars(tmp_path / "a.csv")
    check_bars(bars, df)
    assert bars.notes[0] == "no header line: columns read as timestamp, open, high, low, close, volume (CCXT)"


def test_a_headerless_line_of_no_known_width_names_the_header_to_add(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv")
    assert info.value.rule == "missing-column" and "add a header line: timestamp,open,high,low,close,volume" in str(info.value)


def yahoo(tmp_path: Path) -> tuple[Path, pd.DataFrame, np.ndarray]:
    df = frame(30, "2024-01-02", "D")
    factor = np.linspace(0.5, 1.0, len(df))  # dividends and a split, as an adjusted close has them
    out = df.copy()
    out.insert(4, "Adj Close", df.Close * factor)
    out.rename_axis("Date").to_csv(tmp_path / "GOOG.csv")
    return tmp_path / "GOOG.csv", df, factor


def test_adj_close_is_ignored_and_said_so_without_data_adjust(tmp_path: Path) -> None:
    path, df, _ = yahoo(tmp_path)
    bars = load_bars(path)
    check_bars(bars, df)
    assert bars.notes[0] == "'Adj Close' ignored (data.adjust = true scales open, high, low and close by it / close)"


def test_data_adjust_scales_open_high_low_close_by_adj_close_over_close(tmp_path: Path) -> None:
    path, df, factor = yahoo(tmp_path)
    bars = load_bars(path, adjust=True)
    for col in ("Open", "High", "Low", "Close"):
        np.testing.assert_allclose(getattr(bars, col.lower()), df[col].to_numpy() * factor, rtol=1e-12)
    np.testing.assert_allclose(bars.volume, df.Volume.to_numpy())
    assert bars.notes[0] == "prices adjusted by 'Adj Close' / 'Close' (data.adjust = true)"
    assert np.all(bars.high >= np.maximum(bars.open, bars.close)) and np.all(bars.low <= np.minimum(bars.open, bars.close))


def test_data_adjust_checks_the_adj_close_cells_like_prices(tmp_path: Path) -> None:
    path, _, _ = yahoo(tmp_path)
    lines = path.read_text().splitlines()
    cells = lines[4].split(",")
    cells[5] = "-1"
    lines[4] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BarDataError) as info:
        load_bars(path, adjust=True)
    assert (info.value.rule, info.value.row, info.value.column) == ("price-not-positive", 4, "Adj Close")
    load_bars(path)  # ignored when not adjusting


def test_data_adjust_without_an_adj_close_column_is_refused(tmp_path: Path) -> None:
    frame().rename_axis("Date").to_csv(tmp_path / "a.csv")
    with pytest.raises(BarDataError) as info:
        load_bars(tmp_path / "a.csv", adjust=True)
    assert info.value.rule == "missing-column" and str(info.value).endswith("; set data.adjust = false")
