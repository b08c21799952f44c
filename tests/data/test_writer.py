"""write_bars: exact round trips through load_bars, file layout, atomic replace, nothing on error."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import foxhunt.data.writer as writer
from foxhunt.cli import app
from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.loader import load_bars
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars

COLS = ("timestamps", "open", "high", "low", "close", "volume")
EXTS = ["csv", "csv.gz", "parquet", "pq"]


def assert_same(a: Bars, b: Bars) -> None:
    for col in COLS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype and np.array_equal(x, y), col
    assert a.has_volume == b.has_volume


def awkward_bars() -> Bars:
    """Floats whose shortest text is long or tiny, and timestamps with nanoseconds."""
    t = np.array([0, 1, 1_000, 10**9 + 7, 1_704_153_600 * 10**9 + 123_456_789], dtype=np.int64)
    o = np.array([0.1, 1 / 3, 5e-324, 1e300, 123456789.12345678])
    h = o * (1 + 2**-52) + np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    return Bars(t, o, h, o.copy(), o.copy(), np.array([0.0, 1.5, 2**53, 1e-7, 7.0]), True, "awkward")


@pytest.mark.parametrize("ext", EXTS)
def test_round_trip_of_generated_bars_is_exact(tmp_path: Path, ext: str) -> None:
    bars = generate_bars(3000, seed=5)
    assert_same(load_bars(write_bars(bars, tmp_path / f"b.{ext}")), bars)


@pytest.mark.parametrize("ext", EXTS)
def test_round_trip_of_awkward_floats_and_nanosecond_timestamps_is_exact(tmp_path: Path, ext: str) -> None:
    bars = awkward_bars()
    assert_same(load_bars(write_bars(bars, tmp_path / f"b.{ext}")), bars)


@pytest.mark.parametrize("ext", EXTS)
def test_bars_without_volume_are_written_without_a_volume_column(tmp_path: Path, ext: str) -> None:
    bars = dataclasses.replace(generate_bars(50, seed=1), volume=np.ones(50), has_volume=False)
    p = write_bars(bars, tmp_path / f"b.{ext}")
    if ext.startswith("csv"):
        opener = gzip.open if ext.endswith("gz") else open
        with opener(p, "rt") as f:
            assert f.readline().strip() == "timestamp,open,high,low,close"
    else:
        assert pq.read_schema(p).names == ["timestamp", "open", "high", "low", "close"]
    assert_same(load_bars(p), bars)


def test_csv_layout_is_iso_utc_z_and_plain_numbers(tmp_path: Path) -> None:
    bars = generate_bars(3, seed=1, bar_seconds=60)
    lines = write_bars(bars, tmp_path / "b.csv").read_text().splitlines()
    assert lines[0] == "timestamp,open,high,low,close,volume"
    assert lines[1].startswith("2024-01-02T00:00:00Z,") and lines[2].startswith("2024-01-02T00:01:00Z,")
    assert '"' not in "".join(lines)


def test_parquet_timestamp_column_is_utc_nanoseconds(tmp_path: Path) -> None:
    schema = pq.read_schema(write_bars(generate_bars(3), tmp_path / "b.parquet"))
    assert str(schema.field("timestamp").type) == "timestamp[ns, tz=UTC]"


def test_gzip_output_is_deterministic(tmp_path: Path) -> None:
    bars = generate_bars(500, seed=2)
    assert write_bars(bars, tmp_path / "a.csv.gz").read_bytes() == write_bars(bars, tmp_path / "b.csv.gz").read_bytes()


def test_replaces_an_existing_file_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "b.csv"
    target.write_text("old")
    write_bars(generate_bars(10), target)
    assert [p.name for p in tmp_path.iterdir()] == ["b.csv"]
    assert len(load_bars(target)) == 10


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    assert write_bars(generate_bars(5), tmp_path / "x" / "y" / "b.parquet").is_file()


def test_invalid_bars_are_refused_and_nothing_is_written(tmp_path: Path, snapshot) -> None:
    good = generate_bars(10)
    bad = dataclasses.replace(good, high=good.low - 1.0)
    (tmp_path / "b.csv").write_text("old")
    before = snapshot(tmp_path)
    with pytest.raises(BarDataError) as info:
        write_bars(bad, tmp_path / "b.csv")
    assert info.value.rule == "high-below-low" and info.value.row == 1
    assert snapshot(tmp_path) == before


def test_unsupported_extension_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(BarDataError) as info:
        write_bars(generate_bars(10), tmp_path / "b.json")
    assert info.value.rule == "unsupported-format"
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "b.csv"
    target.write_text("old")

    def boom(bars: Bars, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(writer, "_write_csv", boom)
    with pytest.raises(OSError):
        write_bars(generate_bars(10), target)
    assert [p.name for p in tmp_path.iterdir()] == ["b.csv"] and target.read_text() == "old"


def test_cli_data_sample_writes_a_loadable_file_and_nothing_on_bad_output_name(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["data", "sample", "--out", str(tmp_path / "s.csv"), "--bars", "200", "--seed", "3"])
    assert ok.exit_code == 0, ok.output
    assert_same(load_bars(tmp_path / "s.csv"), generate_bars(200, seed=3))
    bad = runner.invoke(app, ["data", "sample", "--out", str(tmp_path / "s.txt"), "--bars", "200"])
    assert bad.exit_code == 2 and "unsupported-format" in bad.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prices=st.lists(st.floats(min_value=5e-324, max_value=1e308, allow_nan=False, allow_infinity=False), min_size=1, max_size=20),
    gaps=st.lists(st.integers(min_value=1, max_value=10**15), min_size=20, max_size=20),
    ext=st.sampled_from(["csv", "parquet"]),
)
def test_round_trip_is_exact_for_any_positive_float_and_increasing_timestamps(tmp_path: Path, prices, gaps, ext) -> None:
    p = np.array(prices, dtype=np.float64)
    t = np.cumsum(np.array(gaps[: len(p)], dtype=np.int64)) - 10**15  # includes times before 1970
    bars = Bars(t, p, p.copy(), p.copy(), p.copy(), p[::-1].copy(), True, "hypothesis")
    assert_same(load_bars(write_bars(bars, tmp_path / f"h.{ext}")), bars)
