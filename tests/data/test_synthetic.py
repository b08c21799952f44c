"""The synthetic market: determinism, validity, speed, GARCH-like facts, seasonality, signal."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from foxhunt.data.synthetic import MEAN_REGIME_BARS, REGIMES, _returns, affine_scan, generate_bars, simulate
from foxhunt.data.validate import validate_bars
from foxhunt.errors import ConfigError

COLS = ("timestamps", "open", "high", "low", "close", "volume")


def _acf(x: np.ndarray, lag: int = 1) -> float:
    x = x - x.mean()
    return float(np.dot(x[:-lag], x[lag:]) / np.dot(x, x))


@pytest.fixture(scope="module")
def market():
    """200k one-minute bars (about 5 months, 24/7), shared by the property tests."""
    return simulate(200_000, seed=11)


# --------------------------------------------------------------------------- affine scan
@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 10_007])
def test_affine_scan_equals_the_plain_recursion(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.random(n) * 1.2
    a[::13] = 0.0  # resets
    b = rng.standard_normal(n)
    got = affine_scan(a, b, x0=0.7)
    ref = np.empty(n)
    x = 0.7
    for i in range(n):
        x = a[i] * x + b[i]
        ref[i] = x
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_returns_with_signal_equal_the_sequential_loop() -> None:
    """The fixed-point solution of the sign feedback is the exact causal recursion."""
    rng = np.random.default_rng(5)
    n = 3000
    kappa = np.where((np.arange(n) // 200) % 3 == 1, 0.05, 0.0)  # mean-reverting stretches
    mu = rng.normal(0, 0.01, n)
    sigma = 0.5 + rng.random(n)
    eps = sigma * rng.standard_normal(n)
    eta = rng.normal(0, 0.1, n)
    signal = 0.5  # strong, so that many signs depend on the drift
    got = _returns(mu, eps, kappa, eta, sigma, signal)
    ref = np.empty(n)
    d = 0.0
    prev_r = 0.0
    for t in range(n):
        drift = mu[t] + signal * np.sign(prev_r) * sigma[t]
        d_prev = d if (t > 0 and kappa[t - 1] > 0) else 0.0
        ref[t] = drift + eps[t] - kappa[t] * d_prev
        d = (1 - kappa[t]) * d_prev + drift + eps[t] - eta[t] if kappa[t] > 0 else 0.0
        prev_r = ref[t]
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- determinism, validity
def test_same_seed_gives_identical_arrays_and_different_seeds_differ() -> None:
    a, b, c = generate_bars(5000, seed=3), generate_bars(5000, seed=3), generate_bars(5000, seed=4)
    for col in COLS:
        assert np.array_equal(getattr(a, col), getattr(b, col))
    assert a.content_hash() == b.content_hash() != c.content_hash()
    assert not np.array_equal(a.close, c.close)
    assert np.array_equal(a.timestamps, c.timestamps)


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
@pytest.mark.parametrize("n", [1, 2, 101, 20_000])
@pytest.mark.parametrize("bar_seconds", [1, 60, 3_600, 86_400, 7 * 86_400])
def test_generated_bars_pass_every_validation_rule(seed: int, n: int, bar_seconds: int) -> None:
    if n * bar_seconds > (2262 - 2024) * 365 * 86_400:  # 20,000 weeks from 2024: past int64 ns
        with pytest.raises(ConfigError, match="end after 2262-04-11"):
            generate_bars(n, seed=seed, bar_seconds=bar_seconds)
        return
    bars = generate_bars(n, seed=seed, bar_seconds=bar_seconds)
    validate_bars(bars)
    assert len(bars) == n and bars.has_volume
    assert bars.timestamps.dtype == np.int64 and all(getattr(bars, c).dtype == np.float64 for c in COLS[1:])
    assert np.all(bars.low > 0) and np.all(bars.volume >= 1)


def test_million_bars_are_fast_and_valid() -> None:
    start = time.perf_counter()
    bars = generate_bars(1_000_000, seed=2)
    seconds = time.perf_counter() - start
    validate_bars(bars)
    assert seconds < 5.0, f"1M bars took {seconds:.1f} s"  # ~1.2 s on an idle 2-core box


def test_open_is_previous_close_for_intraday_bars() -> None:
    bars = generate_bars(1000, seed=1)
    assert bars.open[0] == pytest.approx(100.0)
    assert np.array_equal(bars.open[1:], bars.close[:-1])


def test_intraday_timestamps_are_regular_24_7_from_start() -> None:
    bars = generate_bars(5000, bar_seconds=300, start="2024-03-01T12:00:00+01:00")
    assert bars.timestamps[0] == pd.Timestamp("2024-03-01T11:00:00Z").value
    assert np.all(np.diff(bars.timestamps) == 300 * 10**9)


def test_daily_bars_are_business_days_at_utc_midnight_with_gaps() -> None:
    bars = generate_bars(600, bar_seconds=86_400, start="2024-01-06T15:00:00Z")  # a Saturday
    idx = pd.DatetimeIndex(bars.timestamps.astype("datetime64[ns]"))
    assert idx[0] == pd.Timestamp("2024-01-08")  # rolled forward to Monday
    assert np.all(idx.day_of_week < 5) and np.all(bars.timestamps % (86_400 * 10**9) == 0)
    assert not np.array_equal(bars.open[1:], bars.close[:-1])  # overnight gaps
    assert bars.median_bar_seconds() == 86_400 and not bars.is_intraday()


def test_bad_arguments_are_rejected() -> None:
    for kwargs in ({"n_bars": 0}, {"n_bars": 10, "bar_seconds": 0}, {"n_bars": 10, "signal": -0.1}):
        with pytest.raises(ValueError):
            generate_bars(**kwargs)


# --------------------------------------------------------------------------- statistical facts
def test_volatility_clusters_and_tails_are_fat(market) -> None:
    r = market.log_return
    assert _acf(r**2, 1) > 0.05 and _acf(r**2, 10) > 0.02
    z = r - r.mean()
    kurtosis = float(np.mean(z**4) / np.mean(z**2) ** 2)
    assert kurtosis > 4.0  # Gaussian: 3


def test_annualised_volatility_is_about_twenty_percent(market) -> None:
    annual = market.log_return.std() * np.sqrt(365.25 * 24 * 60)
    assert 0.12 < annual < 0.30


def test_volume_is_correlated_with_absolute_return(market) -> None:
    assert np.corrcoef(market.bars.volume, np.abs(market.log_return))[0, 1] > 0.3


def test_intraday_volatility_and_volume_are_u_shaped(market) -> None:
    hour = (market.bars.timestamps // (3_600 * 10**9)) % 24
    edge = (hour <= 1) | (hour >= 22)
    middle = (hour >= 10) & (hour <= 13)
    r = np.abs(market.log_return)
    assert r[edge].mean() > 1.3 * r[middle].mean()
    assert market.bars.volume[edge].mean() > 1.3 * market.bars.volume[middle].mean()


def test_regimes_follow_the_markov_chain(market) -> None:
    reg = market.regime
    assert set(np.unique(reg)) == set(range(len(REGIMES)))
    switches = int(np.count_nonzero(np.diff(reg)))
    mean_stay = len(reg) / (switches + 1)
    assert 0.7 * MEAN_REGIME_BARS < mean_stay < 1.3 * MEAN_REGIME_BARS
    # high-volatility regime has a larger average sigma than the low-volatility one
    assert market.sigma[reg == REGIMES.index("high_vol")].mean() > 2 * market.sigma[reg == REGIMES.index("low_vol")].mean()


def test_no_sign_signal_by_default_and_a_weak_one_when_asked(market) -> None:
    def edge(m) -> float:
        r = m.log_return
        return float(np.mean(np.sign(r[:-1]) * r[1:] / m.sigma[1:]))

    assert abs(edge(market)) < 0.02
    planted = simulate(200_000, seed=11, signal=0.1)
    assert 0.08 < edge(planted) < 0.12
    validate_bars(planted.bars)


def test_without_regimes_the_market_is_a_martingale_with_garch_volatility() -> None:
    m = simulate(200_000, seed=11, regimes=False)
    validate_bars(m.bars)
    assert np.all(m.regime == -1)
    z = m.log_return / m.sigma
    assert abs(z.mean()) < 0.01 and abs(_acf(z, 1)) < 0.01
    assert _acf(m.log_return**2, 1) > 0.05
    assert not np.array_equal(m.bars.close, simulate(200_000, seed=11).bars.close)
