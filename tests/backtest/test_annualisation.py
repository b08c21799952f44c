"""Bars per year are counted from the bars present in the data, for every calendar shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from foxhunt.backtest.annualisation import infer_bars_per_year, resolve_bars_per_year
from foxhunt.config import build_config
from foxhunt.data import load_source


def _ns(index: pd.DatetimeIndex) -> np.ndarray:
    return index.as_unit("ns").asi8.astype(np.int64)


def test_daily_equity_bars_of_the_sp500_sample_give_about_252():
    bars = load_source(build_config({"data": {"source": "sp500"}}).data)
    assert infer_bars_per_year(bars.timestamps) == pytest.approx(252.0, abs=1.5)


def test_business_days_with_holidays_count_the_holidays_as_missing():
    days = pd.bdate_range("2001-01-01", "2020-12-31")
    holidays = days[::26]  # ~10 a year, like an exchange calendar
    present = days.difference(holidays)
    want = len(present) / 20.0  # bars per calendar year over 20 whole years
    assert infer_bars_per_year(_ns(present)) == pytest.approx(want, rel=2e-3)
    assert 245 < want < 253


def test_weekly_bars_give_52_and_monthly_bars_12():
    assert infer_bars_per_year(_ns(pd.date_range("2000-01-07", "2019-12-27", freq="W-FRI"))) == pytest.approx(
        365.25 / 7, rel=1e-3)
    assert infer_bars_per_year(_ns(pd.date_range("2000-01-31", "2019-12-31", freq="ME"))) == pytest.approx(12.0, rel=5e-3)


def test_session_only_five_minute_bars_count_78_a_weekday_not_calendar_time():
    days = pd.bdate_range("2021-01-04", "2022-12-30")
    session = pd.timedelta_range("09:30:00", "15:55:00", freq="5min")  # 78 bar opens a session
    assert len(session) == 78
    ts = (_ns(days)[:, None] + session.as_unit("ns").asi8[None, :]).reshape(-1)
    want = 78 * 5 * 365.25 / 7  # 20,349.6: every weekday is a session here
    assert infer_bars_per_year(ts) == pytest.approx(want, rel=1e-3)
    # three weeks of the same calendar already give the exact rate (whole weeks are counted)
    assert infer_bars_per_year(ts[: 78 * 15]) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("start", ["2020-01-01 00:00", "2021-06-15 13:00"])
def test_24_7_hourly_bars_give_365_days_of_24_bars(start):
    ts = _ns(pd.date_range(start, periods=3 * 8_766, freq="h"))
    assert infer_bars_per_year(ts) == pytest.approx(8_766.0, rel=1e-9)  # 365.25 days × 24
    assert infer_bars_per_year(ts[:100]) == pytest.approx(8_766.0, rel=1e-9)  # under a week: the spacing


def test_degenerate_series_fall_back_to_252_and_the_override_wins():
    assert infer_bars_per_year(np.array([0], np.int64)) == 252.0
    assert infer_bars_per_year(np.array([5, 5], np.int64)) == 252.0
    ts = _ns(pd.date_range("2020-01-01", periods=1_000, freq="h"))
    a = resolve_bars_per_year(ts, 6_205.0)
    assert a.bars_per_year == 6_205.0 and a.source == "set by the user" and "6,205.0" in a.describe()
    assert resolve_bars_per_year(ts).source == "inferred from the data"
    with pytest.raises(ValueError, match="bars_per_year"):
        resolve_bars_per_year(ts, 0.0)
