"""The CLI's error boundary and path handling, run as the user runs it (a fresh process per command):
bad data, bad paths and bad config files are one exact line on stderr, exit code 2, and nothing
written; odd but valid file names travel as paths, never through TOML text (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foxhunt.cli import error_line, one_line
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars
from foxhunt.errors import PathError
from tests.cli_run import assert_refused, listing, run_cli

HEADER = "timestamp,open,high,low,close,volume\n"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a few bad bar files, a plain file and a directory named like outputs."""
    (tmp_path / "overflow.csv").write_text(HEADER + "9000000000000000000,1,1,1,1,1\n-9000000000000000000,1,1,1,1,1\n")
    (tmp_path / "extra.csv").write_text(HEADER + "2024-01-01,1,1,1,1,1,5\n2024-01-02,1,1,1,1,1\n")
    (tmp_path / "three.csv").write_text(HEADER + "".join(f"2024-01-0{d},1,1,1,1,1\n" for d in (1, 2, 3)))
    ts = pa.array([1_704_067_200 * 10**9, 1_704_153_600 * 10**9], type=pa.timestamp("ns"))
    pq.write_table(pa.table({"timestamp": ts, "open": pa.array([[1.0, 2.0], [2.0]]), "high": [1.0, 2.0],
                             "low": [1.0, 2.0], "close": [1.0, 2.0]}), tmp_path / "list.parquet")
    (tmp_path / "[bold]bad\nname.csv").write_text(HEADER + "2024-01-01,1,1,1,-1,1\n")
    (tmp_path / "a_file").write_text("not a directory")
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "binary.toml").write_bytes(b"\xfe\xff\x00[run]")
    return tmp_path


@pytest.mark.slow
def test_data_errors_are_one_exact_line_exit_2_and_write_nothing(work: Path) -> None:
    cases = [
        (["data", "validate", "overflow.csv", "--set", "data.timestamp_unit=ns"],
         "file overflow.csv, row 2, timestamp -9000000000000000000, column 'timestamp': rule 'non-increasing-timestamp' "
         "broken: earlier than row 1 (9000000000000000000); timestamps must increase"),
        (["data", "validate", "extra.csv"],
         "file extra.csv, row 1: rule 'unreadable' broken: malformed CSV: expected 6 fields (the header's), saw 7"),
        (["data", "validate", "list.parquet"],
         "file list.parquet, column 'open': rule 'bad-column-type' broken: Parquet type list<element: double> cannot "
         "hold open values; expected a number or text column"),
        # rich markup and a newline in a file name are shown literally, on one line
        (["data", "validate", "[bold]bad\nname.csv"],
         "file [bold]bad\\nname.csv, row 1, timestamp 2024-01-01, column 'close': rule 'price-not-positive' broken: "
         "close = -1.0; prices must be > 0"),
    ]
    for args, line in cases:
        assert_refused(work, args, line)


@pytest.mark.slow
def test_output_path_errors_are_refused_before_any_work(work: Path) -> None:
    cases = [
        (["features", "build", "three.csv", "--cache-dir", "a_file"], "--cache-dir a_file: exists and is not a directory"),
        (["features", "build", "three.csv", "--cache-dir", "a_file/cache"], "--cache-dir a_file/cache: a_file is not a directory"),
        (["features", "build", "three.csv", "--cache-dir", "cache"],
         "file three.csv: rule 'too-few-bars' broken: 3 bars; the features need a 303-bar warm-up, so at least 304 bars"),
        (["data", "sample", "--bars", "200", "--out", "dir.csv"], "--out dir.csv: is a directory; expected a file name"),
        (["data", "sample", "--bars", "200", "--out", "a_file/bars.csv"], "--out a_file/bars.csv: a_file is not a directory"),
        (["prepare", "--config", "binary.toml"], "binary.toml: not a TOML text file (byte 0 is not UTF-8)"),
        (["prepare", "--set", 'features.cache_dir="a_file"'], "features.cache_dir a_file: exists and is not a directory"),
    ]
    for args, line in cases:
        assert_refused(work, args, line)


@pytest.mark.slow
def test_data_paths_travel_as_paths_not_through_toml_text(tmp_path: Path) -> None:
    bars = generate_bars(1_000, seed=3)
    odd = ['a"b.csv', "new\nline.csv"]
    for name in odd + ["other.csv"]:
        write_bars(bars, tmp_path / name)
    common = ["--device", "cpu", "--set", "folds.train=300", "--set", "folds.val=200", "--set", "folds.purge=10",
              "--set", 'features.cache_dir="cache"']
    # A name that used to close the TOML string and comment out the rest loads nothing else.
    assert_refused(tmp_path, ["prepare", "--data", 'other.csv" #.csv', *common],
                   "file other.csv\" #.csv: rule 'unreadable' broken: no such file")
    for name in odd:  # valid files with a quote or a newline in the name are loaded
        res = run_cli(tmp_path, "prepare", "--data", name, *common)
        assert res.returncode == 0, res.stderr
        assert "market data on cpu: 1000 bars" in res.stdout
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1  # the same bars: one cache entry


def test_the_boundary_message_is_one_line_and_names_the_path_of_an_os_error() -> None:
    assert one_line("a\nb\tc\x00d") == "a\\nb\\tc\\x00d"
    assert error_line(IsADirectoryError(21, "Is a directory", "out/x")) == "out/x: Is a directory"
    assert error_line(OSError(18, "Invalid cross-device link", "a", None, "b")) == "a -> b: Invalid cross-device link"
    assert error_line(PathError("--out", "x\ny", "exists and is not a directory")) == "--out x\\ny: exists and is not a directory"
    assert error_line(ValueError("a bug")) is None  # anything else is a bug: a traceback, not a line


def test_listing_sees_every_file_and_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    assert set(listing(tmp_path)) == {"d", "d/f"}
