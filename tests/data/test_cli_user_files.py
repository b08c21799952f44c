"""`foxhunt data validate` on the files people have, as the user runs it (a fresh process each):
each file, written here in its tool's layout, loads with the right bars and says what was
inferred, or is refused in one exact line with exit code 2; nothing is written either way (issue 38)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cli_run import assert_refused, listing, run_cli
from tests.data.test_user_layouts import dukascopy, frame

NAIVE = "  read: times without a UTC offset taken as UTC"


def validated(cwd: Path, *args: str) -> list[str]:
    """stdout lines of a successful `foxhunt data validate ARGS` that wrote nothing."""
    before = listing(cwd)
    res = run_cli(cwd, "data", "validate", *args)
    assert (res.returncode, res.stderr) == (0, ""), res.stdout + res.stderr
    assert listing(cwd) == before
    return res.stdout.splitlines()


def epoch_file(cwd: Path, per_s: int) -> None:
    df = frame()
    df.index = df.index.asi8 // (10**9 // per_s)
    df.rename_axis("timestamp").to_csv(cwd / "a.csv")


def adj_file(cwd: Path) -> None:
    df = frame(30, "2024-01-02", "D")
    df.insert(4, "Adj Close", df.Close * 0.5)
    df.rename_axis("Date").to_csv(cwd / "a.csv")


def date_time_file(cwd: Path) -> None:
    df = frame()
    out = pd.DataFrame({"Date": df.index.strftime("%Y-%m-%d"), "Time": df.index.strftime("%H:%M"), "Open": df.Open,
                        "High": df.High, "Low": df.Low, "Close": df.Close, "Volume": df.Volume})
    out.to_csv(cwd / "a.csv", index=False)


HOURLY = "ok a.csv: 40 bars every 1 h (hourly), 2017-01-01 22:00:00 → 2017-01-03 13:00:00, volume present"
CASES = {
    "pandas-index": (lambda d: frame().to_csv(d / "a.csv"), [],
                     [HOURLY, "  read: timestamps: the first column '' (an index, as pandas writes it)", NAIVE]),
    "tz-aware-strings": (lambda d: frame().tz_localize("Europe/Berlin").to_csv(d / "a.csv"), [],
                         ["ok a.csv: 40 bars every 1 h (hourly), 2017-01-01 21:00:00 → 2017-01-03 12:00:00, volume present",
                          "  read: timestamps: the first column '' (an index, as pandas writes it)"]),
    "date-and-time": (date_time_file, [], [HOURLY, "  read: timestamps: columns 'Date' and 'Time' joined", NAIVE]),
    "day-first-with-option": (lambda d: dukascopy(d, 100)[0].rename(d / "a.csv"), ["--set", "data.dayfirst=true"],
                              ["ok a.csv: 100 bars every 1 h (hourly), 2017-01-01 22:00:00 → 2017-01-06 01:00:00, volume present",
                               "  read: timestamps: layout '%d.%m.%Y %H:%M:%S.%f'", "  read: timestamps: day first (data.dayfirst = true)",
                               NAIVE]),
    "epoch-s": (lambda d: epoch_file(d, 1), [], [HOURLY, "  read: timestamps: epoch seconds (by magnitude)"]),
    "epoch-ms": (lambda d: epoch_file(d, 10**3), [], [HOURLY, "  read: timestamps: epoch milliseconds (by magnitude)"]),
    "epoch-ns": (lambda d: epoch_file(d, 10**9), [], [HOURLY, "  read: timestamps: epoch nanoseconds (by magnitude)"]),
    "adj-close-adjusted": (adj_file, ["--set", "data.adjust=true"],
                           ["ok a.csv: 30 bars every 1 day (daily), 2024-01-02 00:00:00 → 2024-01-31 00:00:00, volume present",
                            "  read: prices adjusted by 'Adj Close' / 'Close' (data.adjust = true)",
                            "  read: dates without a UTC offset read as UTC midnight"]),
    "adj-close-ignored": (adj_file, [],
                          ["ok a.csv: 30 bars every 1 day (daily), 2024-01-02 00:00:00 → 2024-01-31 00:00:00, volume present",
                           "  read: 'Adj Close' ignored (data.adjust = true scales open, high, low and close by it / close)",
                           "  read: dates without a UTC offset read as UTC midnight"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_file_layouts_validate_in_a_fresh_process_and_say_what_was_inferred(tmp_path: Path, case: str) -> None:
    make, args, lines = CASES[case]
    make(tmp_path)
    assert validated(tmp_path, "a.csv", *args) == lines


REFUSED = {
    "day-first-without-option": (
        lambda d: dukascopy(d, 100)[0].rename(d / "a.csv"), [],
        "file a.csv, column 'Gmt time': rule 'ambiguous-dates' broken: '01.01.2017 22:00:00.000' .. '06.01.2017 01:00:00.000' "
        "read as day/month and as month/day, and no day above 12 settles which; set data.dayfirst = true (day first) or "
        "false (month first), e.g. --set data.dayfirst=true"),
    "epoch-no-unit-fits": (
        lambda d: (d / "a.csv").write_text("timestamp,open,high,low,close\n" + "".join(f"{i * 60},1,1,1,1\n" for i in range(3))),
        [], "file a.csv, column 'timestamp': rule 'ambiguous-epoch' broken: epoch numbers 0 .. 120 fall in 1971..2200 in no unit "
            "(s, ms, us, ns); set data.timestamp_unit to read them in one, e.g. --set data.timestamp_unit=s"),
    "adjust-without-adj-close": (
        lambda d: frame().rename_axis("Date").to_csv(d / "a.csv"), ["--set", "data.adjust=true"],
        "file a.csv, column 'Adj Close': rule 'missing-column' broken: data.adjust = true needs an adjusted close column "
        "('Adj Close'); the file has ['Date', 'Open', 'High', 'Low', 'Close', 'Volume']; set data.adjust = false"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_user_files_that_cannot_be_read_alone_are_one_line_naming_the_option(tmp_path: Path, case: str) -> None:
    make, args, line = REFUSED[case]
    make(tmp_path)
    assert_refused(tmp_path, ["data", "validate", "a.csv", *args], line)


def test_validate_takes_only_data_keys_in_set(tmp_path: Path) -> None:
    frame().to_csv(tmp_path / "a.csv")
    assert_refused(tmp_path, ["data", "validate", "a.csv", "--set", "env.cost_bps=1"],
                   "--set env.cost_bps=1: foxhunt data validate takes data.* keys only")


def test_loaded_bars_of_a_validated_layout_are_the_frames_bars(tmp_path: Path) -> None:
    """The fresh-process checks above see the line; this one the values behind it (same loader)."""
    from foxhunt.data.loader import load_bars

    df = frame()
    df.to_csv(tmp_path / "a.csv")
    bars = load_bars(tmp_path / "a.csv")
    assert bars.timestamps.tolist() == df.index.asi8.tolist()
    np.testing.assert_array_equal(bars.open, df.Open.to_numpy())


def test_features_build_takes_the_same_read_options(tmp_path: Path) -> None:
    df = frame(400, "2017-01-01 22:00", "10min")  # 1 to 4 January: day and month read both ways
    df.index = df.index.strftime("%d.%m.%Y %H:%M")
    df.rename_axis("Gmt time").to_csv(tmp_path / "a.csv")
    assert_refused(tmp_path, ["features", "build", "a.csv", "--cache-dir", "cache"],
                   "file a.csv, column 'Gmt time': rule 'ambiguous-dates' broken: '01.01.2017 22:00' .. '04.01.2017 16:30' read "
                   "as day/month and as month/day, and no day above 12 settles which; set data.dayfirst = true (day first) or "
                   "false (month first), e.g. --set data.dayfirst=true")
    res = run_cli(tmp_path, "features", "build", "a.csv", "--cache-dir", "cache", "--device", "cpu", "--set", "data.dayfirst=true")
    assert res.returncode == 0 and res.stdout.startswith("built in "), res.stdout + res.stderr
    assert "(400 bars × 51 features, warm-up 303 bars)" in " ".join(res.stdout.split())
