"""A universe of symbols (issue 47): every input form loads the same universe, the layout's offsets
are right on calendars with gaps and late starts, and every universe rule is one exact error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foxhunt.config import build_config
from foxhunt.data.bars import BarDataError
from foxhunt.data.loader import load_bars
from foxhunt.data import load_source
from foxhunt.data.universe import UniverseNotAvailable, load_universe, symbol_of, universe_of
from foxhunt.errors import ConfigError
from tests.data.universe_files import SPECS, bars_frame, days, finrl_file, frames, universe_dir, write


def data_cfg(**keys: object):
    return build_config({"data": {"source": "file", "path": "unused", **keys}}).data


def same_universe(a, b) -> None:
    assert a.symbols == b.symbols
    assert np.array_equal(a.offsets, b.offsets)
    for name in ("timestamps", "open", "high", "low", "close", "volume"):
        assert np.array_equal(a.column(name), b.column(name)), name


def test_directory_files_glob_and_finrl_long_table_load_the_same_universe(tmp_path: Path) -> None:
    d = universe_dir(tmp_path / "u")
    cfg = data_cfg()
    by_dir = load_universe([d], cfg)
    by_files = load_universe([d / "CCC.csv.gz", d / "AAA.csv", d / "BBB.parquet"], cfg)
    by_glob = load_universe([str(d / "*.*")], cfg)  # the README matches the pattern and is skipped: not a bar file
    by_table = load_universe([finrl_file(tmp_path / "finrl.csv")], cfg)
    by_parquet_table = load_universe([finrl_file(tmp_path / "finrl.parquet")], cfg)
    assert by_dir.symbols == ("AAA", "BBB", "CCC")
    for other in (by_files, by_glob, by_table, by_parquet_table):
        same_universe(by_dir, other)
    assert by_dir.files == tuple(str(d / n) for n in ("AAA.csv", "BBB.parquet", "CCC.csv.gz"))
    assert by_table.from_table == (True, True, True) and by_table.whole_file == (False, False, False)
    assert by_dir.from_table == (False, False, False) and by_dir.whole_file == (True, True, True)


def test_offsets_follow_each_calendar_with_gaps_and_late_starts(tmp_path: Path) -> None:
    u = load_universe([universe_dir(tmp_path)], data_cfg())
    counts = [len(SPECS[s][0]) for s in u.symbols]
    assert counts == [520, 480, 430]  # CCC: 460 days less a 30-day gap
    assert u.offsets.tolist() == [0, 520, 1000, 1430] and u.counts.tolist() == counts
    for s, symbol in enumerate(u.symbols):
        ts = u.timestamps[u.rows(s)]
        assert np.array_equal(ts, SPECS[symbol][0].as_unit("ns").asi8)  # each symbol's own calendar, time-sorted
        assert np.all(np.diff(ts) > 0)
        assert np.array_equal(u.column("close")[u.rows(s)], frames()[symbol]["close"].to_numpy())


def test_each_file_symbol_is_bitwise_the_single_file_load(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    u = load_universe([d], data_cfg())
    for s, name in enumerate(("AAA.csv", "BBB.parquet", "CCC.csv.gz")):
        alone = load_bars(d / name)
        for c in ("timestamps", "open", "high", "low", "close", "volume"):
            a, b = getattr(u.bars[s], c), getattr(alone, c)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (name, c)
        assert (u.bars[s].source, u.bars[s].notes, u.bars[s].has_volume) == (alone.source, alone.notes, alone.has_volume)
        assert u.bars[s].content_hash() == alone.content_hash()


def test_bars_in_memory_make_the_same_universe_as_their_files(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    loaded = load_universe([d], data_cfg())
    same_universe(loaded, universe_of({s: b for s, b in zip(loaded.symbols[::-1], loaded.bars[::-1])}))
    with pytest.raises(BarDataError, match="mixed-intervals"):
        universe_of({"D": loaded.bars[0], "M": load_bars(write(tmp_path / "m.csv", bars_frame(days("2020-01-01", 50, "min"), 1)))})


def test_symbol_names_strip_only_the_bar_file_extension() -> None:
    assert [symbol_of(p) for p in ("AAPL.csv.gz", "BRK.B.csv", "btc-usd.PARQUET", "x.pq")] == ["AAPL", "BRK.B", "btc-usd", "x"]


def test_a_bad_file_among_good_ones_is_its_own_error_naming_file_row_and_rule(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    bad = frames()["AAA"]
    bad.loc[7, "high"] = bad.loc[7, "low"] * 0.5
    write(d / "ABC.csv", bad)
    with pytest.raises(BarDataError) as e:
        load_universe([d], data_cfg())
    assert (e.value.path, e.value.row, e.value.rule) == (str(d / "ABC.csv"), 8, "high-below-low")


def test_a_bad_row_in_a_long_table_names_the_file_row_and_the_symbol(tmp_path: Path) -> None:
    path = finrl_file(tmp_path / "finrl.csv")
    df = pd.read_csv(path)
    row = int(np.flatnonzero(df.tic == "BBB")[5])
    df.loc[row, "close"] = -1.0
    df.to_csv(path, index=False)
    with pytest.raises(BarDataError) as e:
        load_universe([path], data_cfg())
    assert str(e.value) == (f"file {path}, row {row + 1}, timestamp {df.date[row]}, column 'close': rule 'price-not-positive' "
                            "broken: close = -1.0; prices must be > 0 (symbol BBB)")


def test_a_duplicate_row_in_a_long_table_names_both_file_rows(tmp_path: Path) -> None:
    path = finrl_file(tmp_path / "finrl.csv")
    df = pd.read_csv(path)
    rows = np.flatnonzero(df.tic == "CCC")
    df.loc[rows[3], "date"] = df.date[rows[2]]
    df.to_csv(path, index=False)
    with pytest.raises(BarDataError) as e:
        load_universe([path], data_cfg())
    assert (e.value.rule, e.value.row) == ("duplicate-timestamp", rows[3] + 1)
    assert e.value.detail == f"same timestamp as row {rows[2] + 1} (symbol CCC)"


def test_an_empty_symbol_cell_is_refused_with_its_row(tmp_path: Path) -> None:
    path = finrl_file(tmp_path / "finrl.csv")
    df = pd.read_csv(path)
    df.loc[4, "tic"] = None
    df.to_csv(path, index=False)
    with pytest.raises(BarDataError, match=r"row 5, column 'tic': rule 'missing-symbol' broken"):
        load_universe([path], data_cfg())


def test_symbol_column_key_names_a_column_of_any_name(tmp_path: Path) -> None:
    path = finrl_file(tmp_path / "long.csv")
    pd.read_csv(path).rename(columns={"tic": "Asset"}).to_csv(path, index=False)
    assert load_universe([path], data_cfg(symbol_column="asset")).symbols == ("AAA", "BBB", "CCC")
    with pytest.raises(BarDataError, match="no symbol column 'code' \\(data.symbol_column\\)"):
        load_universe([path], data_cfg(symbol_column="code"))


def test_mixed_daily_and_minute_bars_are_refused_naming_both_files_and_intervals(tmp_path: Path) -> None:
    write(tmp_path / "DAY.csv", bars_frame(days("2020-01-01", 400), 1))
    write(tmp_path / "MIN.csv", bars_frame(days("2020-01-01", 400, "min"), 2))
    with pytest.raises(BarDataError) as e:
        load_universe([tmp_path], data_cfg())
    assert str(e.value) == (f"file {tmp_path / 'MIN.csv'}: rule 'mixed-intervals' broken: symbol MIN has bars every 1 min here, "
                            f"symbol DAY every 1 day in file {tmp_path / 'DAY.csv'}; a universe has one bar interval (resample, or "
                            "split the universe)")


def test_24_7_and_24_5_daily_calendars_are_one_interval(tmp_path: Path) -> None:
    write(tmp_path / "BTC.csv", bars_frame(days("2020-01-01", 400), 1))
    write(tmp_path / "SPY.csv", bars_frame(pd.bdate_range("2020-01-01", periods=300), 2))
    assert load_universe([tmp_path], data_cfg()).symbols == ("BTC", "SPY")


def test_a_symbol_in_two_files_is_refused(tmp_path: Path) -> None:
    d = universe_dir(tmp_path / "u")
    write(tmp_path / "other" / "AAA.parquet", frames()["AAA"])
    with pytest.raises(BarDataError) as e:
        load_universe([d, tmp_path / "other"], data_cfg())
    assert str(e.value) == (f"file {d / 'AAA.csv'}: rule 'duplicate-symbol' broken: symbol 'AAA' is also in file "
                            f"{tmp_path / 'other' / 'AAA.parquet'}; one symbol a file")


def test_the_same_file_reached_twice_is_read_once(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    assert load_universe([d, d / "AAA.csv", str(d / "*.csv")], data_cfg()).symbols == ("AAA", "BBB", "CCC")


def test_data_symbols_restricts_and_an_unknown_symbol_lists_those_there(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    u = load_universe([d], data_cfg(symbols=["CCC", "AAA"]))
    assert u.symbols == ("AAA", "CCC") and u.offsets.tolist() == [0, 520, 950]
    with pytest.raises(ConfigError) as e:
        load_universe([d], data_cfg(symbols=["AAA", "ZZZ"]))
    assert str(e.value) == "data.symbols: 'ZZZ' is not in the universe; it has AAA, BBB, CCC"


def test_an_empty_directory_and_a_pattern_that_matches_nothing_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(BarDataError, match="rule 'no-bar-files' broken: the directory holds no bar file"):
        load_universe([tmp_path / "empty"], data_cfg())
    with pytest.raises(BarDataError, match="rule 'no-bar-files' broken: the pattern matches no bar file"):
        load_universe([str(tmp_path / "*.csv")], data_cfg())


def test_load_source_takes_a_universe_of_one_symbol_and_refuses_several_in_one_line(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    bbb = load_source(build_config({"data": {"source": "file", "path": str(d), "symbols": ["BBB"]}}).data)
    assert bbb.content_hash() == load_bars(d / "BBB.parquet").content_hash() and bbb.source == str(d / "BBB.parquet")
    with pytest.raises(UniverseNotAvailable) as e:  # what train, backtest, tune and --resume read their data with
        load_source(build_config({"data": {"source": "file", "path": str(d / "AAA.csv"), "paths": [str(d / "*.gz")]}}).data)
    assert str(e.value) == ("the data name a universe of 2 symbols (AAA, CCC): `foxhunt train` (pooled training) and "
                            "`foxhunt backtest --model` take a universe; this command takes one symbol: give one file, or pick "
                            "one symbol with --set 'data.symbols=[\"AAA\"]'")


@pytest.mark.parametrize("keys, message", [
    ({"symbols": []}, "data.symbols: an empty list"),
    ({"symbols": ["A", "A"]}, "data.symbols: 'A' twice"),
    ({"symbol_column": " "}, "data.symbol_column: an empty name"),
    ({"min_train_bars": 0}, "min_train_bars"),
    ({"source": "synthetic", "path": None, "symbols": ["A"]}, "data.symbols applies to files \\(data.source = 'file'\\), not to "
     "data.source = 'synthetic'"),
])
def test_universe_keys_are_validated(keys: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        data_cfg(**keys)
