"""Fixtures for the feature tests: small GBM bar series with consistent OHLC and volume."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from foxhunt.data.bars import Bars

MONDAY_2024 = np.datetime64("2024-01-01T00:00:00", "ns").astype(np.int64)
"""2024-01-01 00:00 UTC, a Monday."""


def gbm_bars(
    n: int,
    seed: int = 7,
    bar_seconds: int = 60,
    has_volume: bool = True,
    sigma: float = 1e-3,
    start_ns: int = int(MONDAY_2024),
) -> Bars:
    """n bars of geometric Brownian motion: open = previous close (plus a small gap), high/low
    outside open and close by half-normal amounts, lognormal volume (ones when has_volume is False)."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, sigma, n)))
    prev = np.concatenate([[100.0], close[:-1]])
    open_ = prev * np.exp(rng.normal(0.0, sigma / 5, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, sigma / 2, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, sigma / 2, n)))
    volume = rng.lognormal(6.0, 0.8, n) if has_volume else np.ones(n)
    ts = start_ns + np.arange(n, dtype=np.int64) * np.int64(bar_seconds) * 1_000_000_000
    return Bars(ts, open_, high, low, close, volume, has_volume=has_volume, source=f"gbm(n={n}, seed={seed})")


@pytest.fixture
def make_bars() -> Callable[..., Bars]:
    """Factory: make_bars(n, seed=7, bar_seconds=60, has_volume=True, sigma=1e-3) -> Bars."""
    return gbm_bars


def with_prices(bars: Bars, o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray, v: np.ndarray | None = None) -> Bars:
    """A copy of bars with new price (and optionally volume) columns."""
    return Bars(
        bars.timestamps.copy(), o, h, lo, c, bars.volume.copy() if v is None else v,
        has_volume=bars.has_volume, source=bars.source,
    )
