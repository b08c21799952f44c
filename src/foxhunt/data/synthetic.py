"""A synthetic market: GARCH(1,1)-t volatility, Markov regimes, intraday seasonality, OHLCV bars.

Model, per bar t (all returns are log returns; sigma_bar is the base per-bar volatility for 20 %
a year: 24/7 bars for bar_seconds < 1 day, 252 business days a year for daily bars):

* Regime ``g_t``: a Markov chain over ``REGIMES`` (trend up, trend down, mean-reverting, high
  volatility, low volatility); it stays with probability 1 - 1/MEAN_REGIME_BARS and otherwise jumps
  to one of the other regimes uniformly. Each regime sets a drift, a long-run variance level and
  an Ornstein-Uhlenbeck strength (mean-reverting regime only).
* GARCH(1,1) with unit-variance Student-t(6) innovations z_t, on the deseasonalised scale:
  ``h_t = omega(g_t) + alpha * z_{t-1}^2 * h_{t-1} + beta * h_{t-1}``, omega = (1-alpha-beta) *
  level(g_t), so a regime change moves the variance towards its new level at the GARCH pace.
* Intraday U-shaped seasonality of volatility ``s(tod)`` (mean of s^2 over a day = 1) and of volume.
* Return ``r_t = mu_t + sigma_t z_t - kappa_t * d_{t-1}`` with ``sigma_t = sigma_bar sqrt(h_t) s(tod)``,
  ``mu_t`` the regime drift (in units of sigma_bar), and ``d`` the distance of the log price from a
  slowly moving anchor (a random walk that starts at the price where the mean-reverting regime
  begins): an OU pull toward a moving anchor.
* Bars: open = previous close (daily bars: times a small overnight gap), a Brownian bridge of
  SUB_STEPS steps from open to close inside the bar, high/low = max/min of that path (open and close
  included, so high >= max(open, close) and low <= min(open, close) hold exactly); prices are
  exp(log price), so they stay positive.
* Volume = base * volume-seasonality * (0.5 + |r_t| / expected sigma) * lognormal noise, rounded
  to whole units (>= 1): correlated with |return| and with the time of day.

Nothing is planted to be predictable beyond what the regimes imply by construction (small trend
drifts, OU reversion); ``regimes=False`` removes even that (a GARCH-t martingale). ``signal > 0`` adds an explicit, weak, documented edge: ``mu_t +=
signal * sign(r_{t-1}) * sigma_t``, where the observable is the sign of the previous bar's realised
close-to-close log return, log(close[t-1] / close[t-2]) (0 for the first bar). The per-bar Sharpe
of following it is about ``signal``.

Speed: the GARCH variance recursion is nonlinear in the returns but, because the standardised
innovations z are drawn up front, it is an *affine recurrence with random coefficients* in h:
``h_t = a_t h_{t-1} + b_t`` with ``a_t = alpha z_{t-1}^2 + beta``, ``b_t = omega_t``. That is
solved exactly (not approximated) by :func:`affine_scan`, a blocked scan: sqrt(T) vectorised steps
inside blocks plus sqrt(T) scalar steps across blocks. The OU deviation is the same kind of
recurrence. The signal's sign feedback is solved by fixed-point iteration (see ``_returns``).
1M bars take well under a second or two on one core.

Timestamps: bar_seconds < 86400: regular 24/7 spacing from ``start`` (no sessions, no gaps);
bar_seconds == 86400: business days (Mon-Fri, no holidays) at UTC midnight, from the first
business day on or after ``start``; bar_seconds > 86400: regular spacing from ``start``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from foxhunt.data.bars import Bars
from foxhunt.errors import ConfigError

REGIMES = ("trend_up", "trend_down", "mean_revert", "high_vol", "low_vol")
_DRIFT = np.array([0.03, -0.03, 0.0, 0.0, 0.0])  # per bar, in units of sigma_bar
_VOL = np.array([1.0, 1.1, 0.9, 1.6, 0.6])  # long-run volatility multiplier
_VOL = _VOL / np.sqrt(np.mean(_VOL**2))  # so that the average variance over regimes is sigma_bar^2
_KAPPA = np.array([0.0, 0.0, 0.05, 0.0, 0.0])  # OU pull per bar (half-life ~14 bars)
ANCHOR_STEP = 0.1  # anchor random-walk step, in units of sigma_bar
MEAN_REGIME_BARS = 400
# GARCH(1,1): persistence 0.98; with t(6) innovations (kurtosis 6) the GARCH kurtosis is finite (~9):
# beta^2 + 2 alpha beta + 6 alpha^2 < 1.
ALPHA, BETA, NU = 0.05, 0.93, 6.0
ANNUAL_VOL = 0.20
SUB_STEPS = 6
DAILY_GAP = 0.3  # overnight gap std for daily bars, in units of the bar's sigma
START_PRICE = 100.0
BASE_VOLUME = 1000.0
_DAY = 86_400
_CHUNK = 1 << 20  # bars per chunk for the sub-bar paths (bounds memory to ~60 MB a chunk)


@dataclass(frozen=True)
class SyntheticMarket:
    """Bars plus the hidden state behind them (for tests and planted-signal generators).

    regime: [T] int8 index into REGIMES (-1 everywhere with regimes=False). sigma: [T] float64 conditional std of the log return.
    log_return: [T] float64 close-to-close log return (the first relative to START_PRICE).
    """

    bars: Bars
    regime: np.ndarray
    sigma: np.ndarray
    log_return: np.ndarray


def generate_bars(
    n_bars: int,
    seed: int = 7,
    bar_seconds: int = 60,
    start: str = "2024-01-02T00:00:00Z",
    *,
    signal: float = 0.0,
    regimes: bool = True,
) -> Bars:
    """``n_bars`` synthetic OHLCV bars; the same arguments give identical arrays.

    Returns Bars with [T] int64 UTC-ns timestamps and [T] float64 prices/volume, valid under every
    rule of ``validate.py``. See the module docstring for the model and ``signal``.
    """
    return simulate(n_bars, seed, bar_seconds, start, signal=signal, regimes=regimes).bars


def simulate(
    n_bars: int,
    seed: int = 7,
    bar_seconds: int = 60,
    start: str = "2024-01-02T00:00:00Z",
    *,
    signal: float = 0.0,
    regimes: bool = True,
) -> SyntheticMarket:
    """Like :func:`generate_bars`, also returning regimes, sigmas and returns.

    regimes=False: one neutral regime (no drift, no OU pull, long-run variance 1; ``regime`` is
    all -1): a pure GARCH-t martingale with seasonality, for "no edge anywhere" baselines.
    """
    n = int(n_bars)
    if n < 1:
        raise ValueError(f"n_bars must be >= 1, got {n_bars}")
    if bar_seconds < 1:
        raise ValueError(f"bar_seconds must be >= 1, got {bar_seconds}")
    if signal < 0:
        raise ValueError(f"signal must be >= 0, got {signal}")
    # One independent stream per component: changing how one is drawn leaves the others intact.
    r_reg, r_z, r_anchor, r_gap, r_path, r_vol = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(6))
    ts = _timestamps(n, bar_seconds, start)
    daily = bar_seconds >= _DAY
    bars_per_year = 252.0 if bar_seconds == _DAY else 365.25 * _DAY / bar_seconds
    sigma_bar = ANNUAL_VOL / np.sqrt(bars_per_year)

    regime = _regimes(n, r_reg)
    drift, vol, kappa = _DRIFT[regime], _VOL[regime], _KAPPA[regime]
    if not regimes:
        regime = np.full(n, -1)
        drift, vol, kappa = np.zeros(n), np.ones(n), np.zeros(n)
    z = r_z.standard_t(NU, n) * np.sqrt((NU - 2.0) / NU)  # unit variance
    s_vol, s_volume = _seasonality(ts, daily)

    a = np.empty(n)
    a[0] = 0.0
    a[1:] = ALPHA * z[:-1] ** 2 + BETA
    level = vol**2
    b = (1.0 - ALPHA - BETA) * level
    b[0] = level[0]  # start at the regime's long-run variance
    h = affine_scan(a, b)
    sigma = sigma_bar * np.sqrt(h) * s_vol

    eta = r_anchor.standard_normal(n) * (ANCHOR_STEP * sigma_bar)
    r = _returns(drift * sigma_bar, sigma * z, kappa, eta, sigma, signal)

    log_close = np.log(START_PRICE) + np.cumsum(r)
    log_prev = np.empty(n)
    log_prev[0] = np.log(START_PRICE)
    log_prev[1:] = log_close[:-1]
    gap = r_gap.standard_normal(n) * (DAILY_GAP * sigma) if daily else np.zeros(n)
    log_open = log_prev + gap
    o, hi, lo, c = _ohlc(log_open, log_close, sigma, r_path)

    expected = sigma_bar * s_vol
    noise = np.exp(r_vol.standard_normal(n) * 0.4 - 0.08)  # mean ~1
    volume = np.maximum(1.0, np.rint(BASE_VOLUME * s_volume * (0.5 + np.abs(r) / expected) * noise))

    src = f"synthetic(n={n}, seed={seed}, bar_seconds={bar_seconds}, start={start}, signal={signal}, regimes={regimes})"
    bars = Bars(ts, o, hi, lo, c, volume, has_volume=True, source=src)
    return SyntheticMarket(bars=bars, regime=regime.astype(np.int8), sigma=sigma, log_return=r)


# --------------------------------------------------------------------------- building blocks
def affine_scan(a: np.ndarray, b: np.ndarray, x0: float = 0.0) -> np.ndarray:
    """Solve x_t = a_t * x_{t-1} + b_t for t = 0..T-1 with x_{-1} = x0, exactly.

    a, b: [T] float64. Returns [T] float64. Blocked scan: the series is cut into ~sqrt(T) blocks;
    inside every block the running product P and offset C (x = P * x_start + C) are built with
    ~sqrt(T) vectorised steps over all blocks at once, then ~sqrt(T) scalar steps chain the block
    starts. Same arithmetic as the plain loop up to rounding (one extra multiply-add per value).
    a_t may be 0 (a reset) or large; nothing is divided or exponentiated.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[0]
    if n == 0:
        return np.empty(0)
    width = max(1, int(np.sqrt(n)))
    m = -(-n // width)
    pad = m * width - n
    # [width, m]: row k holds step k of every block, so each vectorised step reads one contiguous row.
    A = np.concatenate([a, np.ones(pad)]).reshape(m, width).T.copy()
    B = np.concatenate([b, np.zeros(pad)]).reshape(m, width).T.copy()
    P = np.empty_like(A)
    C = np.empty_like(B)
    P[0] = A[0]
    C[0] = B[0]
    for k in range(1, width):
        np.multiply(A[k], P[k - 1], out=P[k])
        np.multiply(A[k], C[k - 1], out=C[k])
        C[k] += B[k]
    starts = np.empty(m)
    y = float(x0)
    for j, (p_end, c_end) in enumerate(zip(P[-1].tolist(), C[-1].tolist())):
        starts[j] = y
        y = p_end * y + c_end
    return (P * starts + C).T.reshape(-1)[:n]


def _returns(
    mu: np.ndarray, eps: np.ndarray, kappa: np.ndarray, eta: np.ndarray, sigma: np.ndarray, signal: float
) -> np.ndarray:
    """[T] log returns r_t = mu_t + eps_t - kappa_t d_{t-1} (+ signal * sign(r_{t-1}) * sigma_t).

    The OU deviation d (log price minus anchor) is reset to 0 when a mean-reverting stretch
    starts and is 0 outside one: d_t = (1 - kappa_t) d_{t-1} + mu_t + eps_t - eta_t there.
    With a signal, the drift depends on the sign of the previous return, which depends on the
    drift: a causal (lower-triangular) system, solved by iterating "compute all returns from the
    current signs, recompute the signs" to a fixed point. A sign can only change where
    |eps| < |drift| (rare for a weak signal), and a change moves at least one bar forward per
    pass, so this ends after a handful of vectorised passes with the exact sequential answer.
    """
    mr = kappa > 0
    a = np.where(mr, 1.0 - kappa, 0.0)
    a[1:] *= mr[:-1]  # d_{t-1} = 0 at the first bar of a stretch: start from the anchor

    def once(drift: np.ndarray) -> np.ndarray:
        d = affine_scan(a, np.where(mr, drift + eps - eta, 0.0))
        d_prev = np.concatenate([[0.0], d[:-1]])
        return drift + eps - kappa * d_prev

    if signal == 0.0:
        return once(mu)
    signs = np.zeros(mu.shape[0])
    for _ in range(10_000):
        r = once(mu + signal * signs * sigma)
        new = np.concatenate([[0.0], np.sign(r[:-1])])
        if np.array_equal(new, signs):
            return r
        signs = new
    raise RuntimeError("signal fixed point did not converge")  # pragma: no cover - cannot happen (causal)


def _regimes(n: int, rng: np.random.Generator) -> np.ndarray:
    """[T] int64 regime path of the Markov chain (geometric stays, uniform jumps to other regimes).

    Sampling the jump chain and the holding times is exactly the Markov chain with
    P(stay) = 1 - 1/MEAN_REGIME_BARS and vectorises: next = (current + U{1..R-1}) mod R.
    """
    k = len(REGIMES)
    first = int(rng.integers(k))
    states, lengths = [], []
    total = 0
    while total < n:  # almost always one pass; draw more segments if the first batch was short
        m = n // MEAN_REGIME_BARS + 16
        lengths.append(rng.geometric(1.0 / MEAN_REGIME_BARS, m))
        states.append(rng.integers(1, k, m))
        total += int(lengths[-1].sum())
    steps = np.concatenate(states)
    steps[0] = 0
    seg_state = (first + np.cumsum(steps)) % k
    return np.repeat(seg_state, np.concatenate(lengths))[:n]


def _seasonality(ts: np.ndarray, daily: bool) -> tuple[np.ndarray, np.ndarray]:
    """[T] volatility and [T] volume multipliers: U-shapes over the UTC day (1 for daily bars).

    x in [-1, 1) is the position in the day; vol ~ 1 + x^2 scaled so mean(vol^2) = 1 over a day,
    volume ~ 1 + 2 x^2 scaled to mean 1: both highest around midnight UTC ("open"/"close").
    """
    n = ts.shape[0]
    if daily:
        return np.ones(n), np.ones(n)
    x = 2.0 * ((ts // 1_000_000_000) % _DAY) / _DAY - 1.0
    x2 = x * x
    vol = (1.0 + x2) / np.sqrt(1.0 + 2.0 / 3.0 + 1.0 / 5.0)
    volume = (1.0 + 2.0 * x2) / (1.0 + 2.0 / 3.0)
    return vol, volume


def _timestamps(n: int, bar_seconds: int, start: str) -> np.ndarray:
    """[T] int64 UTC ns; see the module docstring for the calendar."""
    t0 = pd.Timestamp(start)
    t0 = t0.tz_localize("UTC") if t0.tz is None else t0.tz_convert("UTC")
    # Python ints: the last bar's time must fit int64 ns (the arange below would wrap silently).
    # n business days span at most ((n - 1) // 5 + 1) weeks.
    span_s = ((n - 1) // 5 + 1) * 7 * _DAY if bar_seconds == _DAY else (n - 1) * bar_seconds
    if n > 0 and t0.as_unit("ns").value + span_s * 1_000_000_000 > np.iinfo(np.int64).max:
        raise ConfigError(
            f"data: {n} bars of {bar_seconds} s from {start} end after 2262-04-11, the last time int64 "
            "nanoseconds can hold; use fewer bars (data.bars) or shorter ones (data.bar_seconds)"
        )
    if bar_seconds == _DAY:
        days = pd.bdate_range(start=t0.normalize(), periods=n)
        return days.as_unit("ns").asi8.astype(np.int64, copy=True)
    return t0.as_unit("ns").value + np.arange(n, dtype=np.int64) * (bar_seconds * 1_000_000_000)


def _ohlc(
    log_open: np.ndarray, log_close: np.ndarray, sigma: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Open, high, low, close [T] from a Brownian bridge of SUB_STEPS steps between open and close.

    The bridge variance over the bar is sigma^2, so the range scales with the bar's volatility.
    Open and close are path points, so high/low bound them exactly in float64.
    """
    n = log_open.shape[0]
    o, hi, lo, c = (np.empty(n) for _ in range(4))
    frac = np.arange(1, SUB_STEPS) / SUB_STEPS  # [K-1] interior times
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        lo_, lc_, sg = log_open[s:e], log_close[s:e], sigma[s:e]
        w = np.cumsum(rng.standard_normal((e - s, SUB_STEPS)), axis=1) * (sg / np.sqrt(SUB_STEPS))[:, None]
        bridge = w[:, :-1] - frac * w[:, -1:]
        inner = np.exp(lo_[:, None] + frac * (lc_ - lo_)[:, None] + bridge)  # [n, K-1]
        o[s:e] = np.exp(lo_)
        c[s:e] = np.exp(lc_)
        hi[s:e] = np.maximum(np.maximum(o[s:e], c[s:e]), inner.max(axis=1))
        lo[s:e] = np.minimum(np.minimum(o[s:e], c[s:e]), inner.min(axis=1))
    return o, hi, lo, c
