"""The real daily sample series shipped inside the arch package."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from foxhunt.config import DataConfig
from foxhunt.data import load_source
from foxhunt.data.bars import BarDataError
from foxhunt.data.samples import SAMPLES, load_sample, sample_path
from foxhunt.data.validate import validate_bars

DAY_NS = 86_400 * 10**9


@pytest.mark.parametrize("name", ["sp500", "nasdaq"])
def test_sample_loads_5031_daily_bars_at_utc_midnight(name: str) -> None:
    bars = load_sample(name)
    assert len(bars) == 5031 and bars.has_volume
    validate_bars(bars)
    assert np.all(bars.timestamps % DAY_NS == 0)
    first, last = (pd.Timestamp(int(t), tz="UTC") for t in bars.timestamps[[0, -1]])
    assert first == pd.Timestamp("1999-01-04", tz="UTC") and last == pd.Timestamp("2018-12-31", tz="UTC")
    assert bars.median_bar_seconds() == 86_400 and name in bars.source


@pytest.mark.parametrize("name", ["sp500", "nasdaq"])
def test_sample_uses_open_high_low_close_volume_not_adj_close(name: str) -> None:
    raw = pd.read_csv(sample_path(name))
    bars = load_sample(name)
    for ours, theirs in (("open", "Open"), ("high", "High"), ("low", "Low"), ("close", "Close"), ("volume", "Volume")):
        assert np.array_equal(getattr(bars, ours), raw[theirs].to_numpy(dtype=np.float64))


def test_nasdaq_has_two_zero_volume_days_which_are_kept() -> None:
    bars = load_sample("nasdaq")
    days = [str(np.datetime64(int(t), "ns").astype("datetime64[D]")) for t in bars.timestamps[bars.volume == 0]]
    assert days == ["2015-05-12", "2018-01-09"]


def test_sample_names_are_case_insensitive() -> None:
    assert len(load_sample(" SP500 ")) == 5031


def test_unknown_sample_lists_the_valid_names() -> None:
    with pytest.raises(BarDataError) as info:
        load_sample("dax")
    assert info.value.rule == "unknown-sample"
    for name in SAMPLES:
        assert name in str(info.value)


def test_load_source_keeps_the_tail_of_a_sample() -> None:
    bars = load_source(DataConfig(source="nasdaq", bars=1000), limit_samples=True)
    full = load_sample("nasdaq")
    assert len(bars) == 1000 and bars.timestamps[-1] == full.timestamps[-1]
