"""The feature spec: layout, warm-up, guards, targets, calendar and volume encodings."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.features.featureset import TARGET_HORIZONS
from foxhunt.features.spec import (
    FEATURE_SPEC_VERSION,
    FEATURES,
    WARMUP,
    build_features,
    feature_names,
    volume_feature_names,
)

from .conftest import gbm_bars, with_prices
from .feature_reference import calendar_ref


def test_there_are_exactly_51_unique_snake_case_feature_names() -> None:
    names = feature_names()
    assert len(names) == 51 and len(set(names)) == 51
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", n) for n in names)
    for required in ("ret_log_5", "rsi_14", "macd_hist", "atr_14", "bb_pctb_20", "stoch_k_14", "volume_z_20", "tod_sin", "dow_cos"):
        assert required in names
    assert isinstance(FEATURE_SPEC_VERSION, str) and FEATURE_SPEC_VERSION


def test_feature_set_has_the_documented_shapes_dtypes_and_metadata() -> None:
    bars = gbm_bars(800)
    fs = build_features(bars)
    T = len(bars)
    assert fs.features.shape == (T, 51) and fs.features.dtype == torch.float32
    assert fs.targets.shape == (T, 4) and fs.targets.dtype == torch.float32
    assert fs.ohlc.shape == (T, 4) and fs.ohlc.dtype == torch.float64
    assert fs.volume.dtype == torch.float64 and fs.timestamps.dtype == torch.int64
    assert fs.names == feature_names() and fs.n_features == 51
    assert fs.warmup == WARMUP == max(f.lookback for f in FEATURES)
    assert fs.spec_version == FEATURE_SPEC_VERSION and fs.source_sha256 == bars.content_hash()
    assert np.array_equal(fs.ohlc[:, 3].numpy(), bars.close) and np.array_equal(fs.timestamps.numpy(), bars.timestamps)


def test_warmup_rows_are_exactly_zero_and_later_rows_finite() -> None:
    fs = build_features(gbm_bars(1000, bar_seconds=900))  # 10 days: the calendar columns vary too
    assert torch.all(fs.features[:WARMUP] == 0)
    assert torch.isfinite(fs.features[WARMUP:]).all()
    # Every feature actually varies after the warm-up (none is accidentally constant).
    assert torch.all(fs.features[WARMUP:].std(dim=0) > 0)


@pytest.mark.parametrize("n", [0, 1, 5, WARMUP, WARMUP + 1])
def test_short_series_build_with_the_same_layout(n: int) -> None:
    fs = build_features(gbm_bars(max(n, 1)).slice(0, n))
    assert fs.features.shape == (n, 51) and fs.targets.shape == (n, 4)
    assert torch.all(fs.features[: min(n, WARMUP)] == 0) and torch.isfinite(fs.features).all()


def _pathological(kind: str, n: int = 900) -> Bars:
    b = gbm_bars(n, seed=5)
    ones = np.ones(n)
    if kind == "constant_price":
        p = 100.1 * ones
        return with_prices(b, p, p.copy(), p.copy(), p.copy())
    if kind == "constant_price_zero_volume":
        p = 37.7 * ones
        return with_prices(b, p, p.copy(), p.copy(), p.copy(), v=np.zeros(n))
    if kind == "zero_range_bars":  # o = h = l = c, but the price moves bar to bar
        c = b.close
        return with_prices(b, c.copy(), c.copy(), c.copy(), c.copy())
    if kind == "zero_volume":
        return with_prices(b, b.open, b.high, b.low, b.close, v=np.zeros(n))
    if kind == "constant_volume":
        return with_prices(b, b.open, b.high, b.low, b.close, v=1234.567 * ones)
    if kind == "tiny_moves":
        c = 1e4 * (1 + 1e-12 * np.cumsum(np.sign(np.sin(np.arange(n)))))
        return with_prices(b, c.copy(), c.copy(), c.copy(), c, v=np.where(np.arange(n) % 7 == 0, 0.0, 5.0))
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind", ["constant_price", "constant_price_zero_volume", "zero_range_bars", "zero_volume", "constant_volume", "tiny_moves"]
)
def test_pathological_bars_give_no_nan_or_inf(kind: str) -> None:
    fs = build_features(_pathological(kind))
    assert torch.isfinite(fs.features).all()
    assert torch.all(fs.features[:WARMUP] == 0)


def test_constant_prices_give_neutral_indicator_values() -> None:
    fs = build_features(_pathological("constant_price_zero_volume"))
    row = dict(zip(fs.names, fs.features[-1].tolist()))
    for name in ("ret_log_1", "rvol_20", "atr_14", "bb_bandwidth_20", "ret_skew_20", "volume_z_20", "close_loc"):
        assert row[name] == 0.0, name
    # EMAs of a constant equal it up to rounding of the chunked scan.
    for name in ("macd_line", "macd_hist", "ema_ratio_100"):
        assert abs(row[name]) < 1e-12, name
    assert row["rsi_14"] == 50.0 and row["stoch_k_14"] == 50.0 and row["bb_pctb_20"] == 0.5


def test_non_positive_prices_raise_a_clear_error_naming_feature_and_row() -> None:
    b = gbm_bars(600)
    c = b.close.copy()
    c[450] = 0.0
    with pytest.raises(BarDataError, match=r"row 451.*rule 'features finite'"):
        build_features(with_prices(b, b.open, b.high, b.low, c))


def test_read_only_bar_arrays_are_accepted_without_warnings() -> None:
    import warnings

    b = gbm_bars(400)
    for a in (b.timestamps, b.open, b.high, b.low, b.close, b.volume):
        a.setflags(write=False)  # as arrays from a loaded file are
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fs = build_features(b)
    assert fs.features.shape == (400, 51)


def test_targets_are_forward_log_returns_with_nan_tail() -> None:
    bars = gbm_bars(700)
    tg = build_features(bars).targets.numpy()
    c = bars.close
    for j, h in enumerate(TARGET_HORIZONS):
        expect = np.log(c[h:] / c[:-h]).astype(np.float32)
        np.testing.assert_allclose(tg[: len(c) - h, j], expect, rtol=1e-6, atol=1e-9)
        assert np.isnan(tg[len(c) - h :, j]).all() and np.isfinite(tg[: len(c) - h, j]).all()


def test_intraday_bars_encode_time_of_day_and_day_of_week() -> None:
    bars = gbm_bars(3000, bar_seconds=300)  # 300 bars per day: several days
    assert bars.is_intraday()
    fs = build_features(bars)
    ref = calendar_ref(bars.timestamps, intraday=True)
    for name in ("tod_sin", "tod_cos", "dow_sin", "dow_cos"):
        col = fs.features[WARMUP:, fs.names.index(name)].numpy()
        np.testing.assert_allclose(col, ref[name][WARMUP:].astype(np.float32), atol=1e-7)
    tod = fs.features[WARMUP:, fs.names.index("tod_sin")]
    assert tod.min() < -0.99 and tod.max() > 0.99


def test_daily_bars_zero_time_of_day_and_keep_day_of_week() -> None:
    # Weekday closes at 21:00 UTC.
    days = np.busday_offset("2020-01-01", np.arange(700), roll="forward").astype("datetime64[ns]")
    ts = (days + np.timedelta64(21, "h")).astype(np.int64)
    b = gbm_bars(700, seed=9, sigma=1e-2)
    daily = Bars(ts, b.open, b.high, b.low, b.close, b.volume, source="daily")
    assert not daily.is_intraday()
    fs = build_features(daily)
    assert torch.all(fs.features[:, fs.names.index("tod_sin")] == 0)
    assert torch.all(fs.features[:, fs.names.index("tod_cos")] == 0)
    weekday = (ts // 86_400_000_000_000 + 3) % 7
    expect = np.sin(2 * math.pi * weekday / 7).astype(np.float32)
    np.testing.assert_allclose(fs.features[WARMUP:, fs.names.index("dow_sin")].numpy(), expect[WARMUP:], atol=1e-7)
    assert weekday.max() <= 4  # business days only: Monday..Friday


def test_missing_volume_gives_exactly_zero_volume_features_and_leaves_the_rest() -> None:
    with_vol = gbm_bars(800, has_volume=True)
    no_vol = Bars(
        with_vol.timestamps, with_vol.open, with_vol.high, with_vol.low, with_vol.close, np.ones(800), has_volume=False
    )
    a, b = build_features(with_vol), build_features(no_vol)
    vol_idx = [a.names.index(n) for n in volume_feature_names()]
    assert len(vol_idx) == 4 and not b.has_volume
    assert torch.all(b.features[:, vol_idx] == 0)
    assert torch.all(a.features[WARMUP:, vol_idx] != 0)
    rest = [i for i in range(51) if i not in vol_idx]
    assert torch.equal(a.features[:, rest], b.features[:, rest])
