"""Causal indicator functions, one per indicator family (the formulas behind the feature spec).

All inputs are float64 tensors ``[T]`` in time order on any device (prices > 0, volume >= 0);
all outputs are float64 ``[T]``. Row t uses rows <= t only, and every function is prefix-stable
(built from ``foxhunt.features.ops``), so truncating the input never changes an earlier output bit.
Rows before an indicator's lookback hold finite but unformed values; ``build_features`` zeroes them.

Divisions are guarded: a window with no range / no variance / no volume yields the indicator's
neutral value (documented per function) rather than inf or NaN.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from foxhunt.features.ops import ema, rolling_max, rolling_mean, rolling_min, rolling_sum, safe_div

VAR_FLOOR = 1e-10
"""A rolling variance below VAR_FLOOR * E[x^2] is rounding noise of the sum formula: treated as 0."""

LN2 = math.log(2.0)


def lag(x: torch.Tensor, k: int) -> torch.Tensor:
    """x[t-k], repeating x[0] for t < k (edge padding keeps log-ratios finite in the warm-up).  [T] -> [T]."""
    if k == 0:
        return x
    k = min(k, x.shape[-1])
    return torch.cat([x[..., :1].expand(*x.shape[:-1], k), x[..., : x.shape[-1] - k]], dim=-1)


def log_return(close: torch.Tensor, h: int) -> torch.Tensor:
    """log(close[t] / close[t-h]); 0 for t < h.  [T] -> [T], natural-log units."""
    return torch.log(close / lag(close, h))


def rolling_mean_var(x: torch.Tensor, w: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Trailing-window mean, population variance and E[x^2] from window sums.  [T] -> 3 x [T].

    var = E[x^2] - E[x]^2 (clamped at 0, and set to 0 below the relative rounding floor). Suited to
    series whose mean is not huge next to their spread (returns, volume); prices use
    ``rolling_var_two_pass``.
    """
    m = rolling_mean(x, w)
    e2 = rolling_mean(x * x, w)
    var = (e2 - m * m).clamp_min(0.0)
    var = torch.where(var > VAR_FLOOR * e2, var, torch.zeros_like(var))
    return m, var, e2


def rolling_var_two_pass(x: torch.Tensor, w: int, mean: torch.Tensor) -> torch.Tensor:
    """Population variance about the window's own mean, sum of (x[t-k] - mean[t])^2 over k < w.

    [T] -> [T]. w shifted elementwise passes: no cancellation, which matters for prices whose
    20-bar std is 1e-4 of their level; the fixed summation order keeps it prefix-stable.
    """
    acc = torch.zeros_like(x)
    for k in range(w):
        d = lag(x, k) - mean
        acc += d * d
    return acc / w


# --------------------------------------------------------------------------- volatility & distribution
def realised_vol(r1: torch.Tensor, w: int) -> torch.Tensor:
    """sqrt(mean of r1^2 over w bars): per-bar realised volatility (uncentred, log-return units)."""
    return torch.sqrt(rolling_mean(r1 * r1, w))


def parkinson_vol(high: torch.Tensor, low: torch.Tensor, w: int) -> torch.Tensor:
    """Parkinson range volatility: sqrt(mean(ln(H/L)^2) / (4 ln 2)) over w bars, per bar."""
    hl = torch.log(high / low)
    return torch.sqrt(rolling_mean(hl * hl, w) / (4.0 * LN2))


def garman_klass_vol(o: torch.Tensor, h: torch.Tensor, lo: torch.Tensor, c: torch.Tensor, w: int) -> torch.Tensor:
    """Garman-Klass volatility: sqrt(mean(0.5 ln(H/L)^2 - (2 ln2 - 1) ln(C/O)^2)), mean clamped at 0."""
    hl = torch.log(h / lo)
    co = torch.log(c / o)
    gk = 0.5 * (hl * hl) - (2.0 * LN2 - 1.0) * (co * co)
    return torch.sqrt(rolling_mean(gk, w).clamp_min(0.0))


def safe_log_ratio(a: torch.Tensor, b: torch.Tensor, floor: float = 1e-3) -> torch.Tensor:
    """log((a + f b) / ((1 + f) b)) for a, b >= 0: log(a/b) kept finite when a = 0; 0 where b = 0."""
    num = a + floor * b
    den = (1.0 + floor) * b
    return torch.log(safe_div(num, den, fill=1.0))


def skew_kurt(r1: torch.Tensor, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rolling skewness and excess kurtosis of r1 over w bars (population moments); 0 with no variance."""
    m, var, e2 = rolling_mean_var(r1, w)
    r2 = r1 * r1
    e3 = rolling_mean(r2 * r1, w)
    e4 = rolling_mean(r2 * r2, w)
    mm = m * m
    mu3 = e3 - 3.0 * m * e2 + 2.0 * mm * m
    mu4 = e4 - 4.0 * m * e3 + 6.0 * mm * e2 - 3.0 * mm * mm
    ok = var > 0
    skew = safe_div(mu3, var * torch.sqrt(var))
    kurt = torch.where(ok, safe_div(mu4, var * var) - 3.0, torch.zeros_like(var))
    return skew, kurt


def autocorr_1(r1: torch.Tensor, w: int) -> torch.Tensor:
    """Correlation of (r1[s], r1[s-1]) over the w pairs s in [t-w+1, t]; 0 with no variance. In [-1, 1]."""
    m, var, _ = rolling_mean_var(r1, w)
    # The lagged series' window at t is the series' window at t-1.
    m_lag, var_lag = lag(m, 1), lag(var, 1)
    cross = rolling_mean(r1 * lag(r1, 1), w)
    cov = cross - m * m_lag
    den = torch.sqrt(var * var_lag)
    return safe_div(cov, den).clamp(-1.0, 1.0)


def efficiency_ratio(close: torch.Tensor, w: int) -> torch.Tensor:
    """Kaufman efficiency |c[t] - c[t-w]| / sum |c[s] - c[s-1]| over w bars; in [0, 1], 0 when flat."""
    path = rolling_sum((close - lag(close, 1)).abs(), w)
    return safe_div((close - lag(close, w)).abs(), path).clamp(0.0, 1.0)


# --------------------------------------------------------------------------- oscillators
def rsi(close: torch.Tensor, n: int) -> torch.Tensor:
    """Wilder RSI on a 0-100 scale; 50 when there were neither gains nor losses.

    gain/loss = max(+-(c[t] - c[t-1]), 0) (0 at t = 0), each Wilder-smoothed (EMA alpha = 1/n,
    seeded with its t = 0 value, i.e. 0); RSI = 100 * avg_gain / (avg_gain + avg_loss).
    """
    d = close - lag(close, 1)
    gl = torch.stack([d.clamp_min(0.0), (-d).clamp_min(0.0)])
    avg = ema(gl, 1.0 / n)
    return safe_div(100.0 * avg[0], avg[0] + avg[1], fill=50.0)


def stochastic(high: torch.Tensor, low: torch.Tensor, close: torch.Tensor, k: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stochastic oscillator: %K = 100 (C - LL_k) / (HH_k - LL_k) (50 when HH = LL), %D = SMA_d(%K)."""
    hh = rolling_max(high, k)
    ll = rolling_min(low, k)
    pk = safe_div(100.0 * (close - ll), hh - ll, fill=50.0)
    return pk, rolling_mean(pk, d)


# --------------------------------------------------------------------------- trend & bands
def ema_span(x: torch.Tensor, n: int) -> torch.Tensor:
    """Span-n EMA (alpha = 2/(n+1)) seeded with x[0]."""
    return ema(x, 2.0 / (n + 1))


def macd(close: torch.Tensor, fast: int = 12, slow: int = 26, signal: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MACD normalised by price: line = (EMA_fast - EMA_slow) / close, signal = EMA_signal(line), hist = line - signal."""
    line = (ema_span(close, fast) - ema_span(close, slow)) / close
    sig = ema_span(line, signal)
    return line, sig, line - sig


def true_range(high: torch.Tensor, low: torch.Tensor, close: torch.Tensor) -> torch.Tensor:
    """max(H - L, |H - C[t-1]|, |L - C[t-1]|); H - L at t = 0."""
    pc = lag(close, 1)
    return torch.maximum(high - low, torch.maximum((high - pc).abs(), (low - pc).abs()))


def atr(high: torch.Tensor, low: torch.Tensor, close: torch.Tensor, n: int) -> torch.Tensor:
    """Wilder average true range (alpha = 1/n, seeded with TR[0]) divided by close: a fraction of price."""
    return ema(true_range(high, low, close), 1.0 / n) / close


def bollinger(close: torch.Tensor, w: int, k: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Bollinger %b = (C - lower) / (upper - lower) and bandwidth = (upper - lower) / SMA.

    Bands are SMA_w +- k * population std over w bars. %b = 0.5 and bandwidth = 0 when the window's
    std is below 1e-12 of its mean (a flat window).
    """
    m = rolling_mean(close, w)
    sd = torch.sqrt(rolling_var_two_pass(close, w, m))
    width = 2.0 * k * sd
    flat = sd <= 1e-12 * m
    width = torch.where(flat, torch.zeros_like(width), width)
    pctb = safe_div(close - (m - k * sd), width, fill=0.5)
    return pctb, width / m


def dist_from_extremes(high: torch.Tensor, low: torch.Tensor, close: torch.Tensor, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """log(C / max H over w) (<= 0) and log(C / min L over w) (>= 0)."""
    return torch.log(close / rolling_max(high, w)), torch.log(close / rolling_min(low, w))


# --------------------------------------------------------------------------- volume
def volume_zscore(volume: torch.Tensor, w: int) -> torch.Tensor:
    """(v - mean_w) / std_w (population std over w bars); 0 when the window's volume is constant."""
    m, var, _ = rolling_mean_var(volume, w)
    return safe_div(volume - m, torch.sqrt(var))


def vwap_distance(high: torch.Tensor, low: torch.Tensor, close: torch.Tensor, volume: torch.Tensor, w: int) -> torch.Tensor:
    """log(C / VWAP_w), VWAP over typical prices (H+L+C)/3; 0 when the window traded nothing."""
    tp = (high + low + close) / 3.0
    pv = rolling_sum(tp * volume, w)
    vs = rolling_sum(volume, w)
    vwap = safe_div(pv, vs, fill=1.0)
    return torch.where(vs > 0, torch.log(close / vwap), torch.zeros_like(close))


# --------------------------------------------------------------------------- bar shape
def bar_shape(o: torch.Tensor, h: torch.Tensor, lo: torch.Tensor, c: torch.Tensor) -> dict[str, torch.Tensor]:
    """Single-bar features: range / close, close location in [-1, 1] (0 for a zero-range bar),
    upper and lower shadows / close, intrabar log return, gap log(O[t] / C[t-1]) (0 at t = 0)."""
    rng = h - lo
    return {
        "hl_range": rng / c,
        "close_loc": safe_div(2.0 * c - h - lo, rng),
        "upper_shadow": (h - torch.maximum(o, c)) / c,
        "lower_shadow": (torch.minimum(o, c) - lo) / c,
        "ret_intrabar": torch.log(c / o),
        "ret_gap": torch.log(o / lag(c, 1)) * (torch.arange(c.shape[-1], device=c.device) > 0),
    }


# --------------------------------------------------------------------------- calendar
_SECONDS_PER_DAY = 86_400
_NS = 1_000_000_000


@lru_cache(maxsize=1)
def _tod_table() -> tuple[tuple[float, float], ...]:
    """(sin, cos) of 2 pi s / 86400 for every second s of the day."""
    ang = (2 * math.pi * s / _SECONDS_PER_DAY for s in range(_SECONDS_PER_DAY))
    return tuple((math.sin(a), math.cos(a)) for a in ang)


def calendar(timestamps: torch.Tensor, intraday: bool) -> dict[str, torch.Tensor]:
    """Time-of-day (second resolution) and day-of-week (Monday = 0) as sin/cos pairs, float64 [T].

    Lookup tables built from Python's math.sin/cos (exact indexing: prefix-stable on any device).
    For daily bars the time-of-day pair is 0 (the column stays, so the layout is fixed).
    """
    secs = torch.div(timestamps, _NS, rounding_mode="floor")
    day = torch.div(secs, _SECONDS_PER_DAY, rounding_mode="floor")
    dow = torch.remainder(day + 3, 7)  # 1970-01-01 was a Thursday (3)
    dev = timestamps.device
    dow_tab = torch.tensor(
        [[math.sin(2 * math.pi * d / 7), math.cos(2 * math.pi * d / 7)] for d in range(7)], dtype=torch.float64, device=dev
    )
    out = {"dow_sin": dow_tab[dow, 0], "dow_cos": dow_tab[dow, 1]}
    if intraday:
        sod = torch.remainder(secs, _SECONDS_PER_DAY)
        tod_tab = torch.tensor(_tod_table(), dtype=torch.float64, device=dev)
        out["tod_sin"], out["tod_cos"] = tod_tab[sod, 0], tod_tab[sod, 1]
    else:
        zero = torch.zeros(timestamps.shape, dtype=torch.float64, device=dev)
        out["tod_sin"], out["tod_cos"] = zero, zero.clone()
    return out
