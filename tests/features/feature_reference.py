"""Independent float64 reference for all 51 features: plain loops and per-row windows in numpy.

Written from the formulas in the spec's docstrings, not from the torch code: windows are sliced
row by row, standard deviations are numpy's two-pass ``np.std``, EMAs and Wilder smoothing are
Python loops, calendar fields come from ``datetime``. Slow (O(T * w)), so use it on short series.
Values before a feature's lookback are not meaningful here; compare rows >= the warm-up only.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from foxhunt.data.bars import Bars

LN2 = math.log(2.0)


def ema_loop(x: np.ndarray, alpha: float, seed: float | None = None) -> np.ndarray:
    """y[t] = alpha x[t] + (1 - alpha) y[t-1], y[-1] = seed (default x[0])."""
    y = np.empty(len(x))
    s = float(x[0]) if seed is None else seed
    for i, v in enumerate(x):
        s = alpha * float(v) + (1.0 - alpha) * s
        y[i] = s
    return y


def wilder_loop(x: np.ndarray, n: int, seed: float) -> np.ndarray:
    """Wilder smoothing in its textbook form a[t] = (a[t-1] (n-1) + x[t]) / n, a[-1] = seed."""
    y = np.empty(len(x))
    a = seed
    for i, v in enumerate(x):
        a = (a * (n - 1) + float(v)) / n
        y[i] = a
    return y


def _rolling(x: np.ndarray, w: int, f: Callable[[np.ndarray], float]) -> np.ndarray:
    return np.array([f(x[max(0, t - w + 1) : t + 1]) for t in range(len(x))])


def rsi_ref(c: np.ndarray, n: int) -> np.ndarray:
    d = np.diff(c, prepend=c[0])
    ag = wilder_loop(np.maximum(d, 0.0), n, 0.0)
    al = wilder_loop(np.maximum(-d, 0.0), n, 0.0)
    tot = ag + al
    return np.where(tot > 0, 100.0 * ag / np.where(tot > 0, tot, 1.0), 50.0)


def macd_ref(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    line = (ema_loop(c, 2 / 13) - ema_loop(c, 2 / 27)) / c
    sig = ema_loop(line, 2 / 10)
    return line, sig, line - sig


def atr_ref(h: np.ndarray, lo: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
    tr = np.empty(len(c))
    for t in range(len(c)):
        if t == 0:
            tr[t] = h[t] - lo[t]
        else:
            tr[t] = max(h[t] - lo[t], abs(h[t] - c[t - 1]), abs(lo[t] - c[t - 1]))
    return wilder_loop(tr, n, float(tr[0])) / c


def bollinger_ref(c: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    pctb, bw = np.empty(len(c)), np.empty(len(c))
    for t in range(len(c)):
        win = c[max(0, t - w + 1) : t + 1]
        m, sd = win.mean(), win.std()
        lower, upper = m - 2 * sd, m + 2 * sd
        pctb[t] = (c[t] - lower) / (upper - lower) if sd > 1e-12 * m else 0.5
        bw[t] = (upper - lower) / m if sd > 1e-12 * m else 0.0
    return pctb, bw


def stochastic_ref(h: np.ndarray, lo: np.ndarray, c: np.ndarray, k: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    pk = np.empty(len(c))
    for t in range(len(c)):
        hh, ll = h[max(0, t - k + 1) : t + 1].max(), lo[max(0, t - k + 1) : t + 1].min()
        pk[t] = 100.0 * (c[t] - ll) / (hh - ll) if hh > ll else 50.0
    return pk, _rolling(pk, d, np.mean)


def zscore_ref(v: np.ndarray, w: int) -> np.ndarray:
    out = np.empty(len(v))
    for t in range(len(v)):
        win = v[max(0, t - w + 1) : t + 1]
        sd = win.std()
        out[t] = (v[t] - win.mean()) / sd if sd > 0 else 0.0
    return out


def _log_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.log((a + 1e-3 * b) / (1.001 * b))


def _skew_kurt(x: np.ndarray) -> tuple[float, float]:
    d = x - x.mean()
    var = (d * d).mean()
    if var <= 0:
        return 0.0, 0.0
    return float((d**3).mean() / var**1.5), float((d**4).mean() / var**2 - 3.0)


def reference_features(bars: Bars) -> dict[str, np.ndarray]:
    """All 51 features by name, float64 [T] each."""
    with np.errstate(divide="ignore", invalid="ignore"):  # unformed warm-up rows may divide 0 by 0
        return _reference_features(bars)


def _reference_features(bars: Bars) -> dict[str, np.ndarray]:
    o, h, lo, c, v = bars.open, bars.high, bars.low, bars.close, bars.volume
    T = len(c)
    f: dict[str, np.ndarray] = {}
    for hz in (1, 2, 5, 10, 20, 60):
        r = np.zeros(T)
        r[hz:] = np.log(c[hz:] / c[:-hz])
        f[f"ret_log_{hz}"] = r
    r1 = f["ret_log_1"]
    for w in (5, 20, 60):
        f[f"rvol_{w}"] = np.sqrt(_rolling(r1**2, w, np.mean))
    hl2 = np.log(h / lo) ** 2
    co2 = np.log(c / o) ** 2
    f["parkinson_vol_20"] = np.sqrt(_rolling(hl2, 20, np.mean) / (4 * LN2))
    f["garman_klass_vol_20"] = np.sqrt(np.maximum(_rolling(0.5 * hl2 - (2 * LN2 - 1) * co2, 20, np.mean), 0.0))
    f["rvol_log_ratio_5_60"] = _log_ratio(f["rvol_5"], f["rvol_60"])
    sk = [_skew_kurt(r1[max(0, t - 19) : t + 1]) for t in range(T)]
    f["ret_skew_20"] = np.array([s for s, _ in sk])
    f["ret_kurt_20"] = np.array([k for _, k in sk])
    ac = np.zeros(T)
    for t in range(21, T):
        a, b = r1[t - 19 : t + 1], r1[t - 20 : t]
        ac[t] = np.mean((a - a.mean()) * (b - b.mean())) / math.sqrt(a.var() * b.var())
    f["ret_autocorr_20"] = ac
    for w in (20, 60):
        f[f"mom_vol_adj_{w}"] = f[f"ret_log_{w}"] / (f[f"rvol_{w}"] * math.sqrt(w))
    er = np.zeros(T)
    for t in range(20, T):
        er[t] = abs(c[t] - c[t - 20]) / np.abs(np.diff(c[t - 20 : t + 1])).sum()
    f["efficiency_ratio_20"] = er
    f["rsi_7"], f["rsi_14"] = rsi_ref(c, 7), rsi_ref(c, 14)
    f["stoch_k_14"], f["stoch_d_14_3"] = stochastic_ref(h, lo, c, 14, 3)
    f["macd_line"], f["macd_signal"], f["macd_hist"] = macd_ref(c)
    for n in (5, 10, 20, 50, 100):
        f[f"ema_ratio_{n}"] = c / ema_loop(c, 2 / (n + 1)) - 1.0
    f["bb_pctb_20"], f["bb_bandwidth_20"] = bollinger_ref(c, 20)
    f["atr_14"] = atr_ref(h, lo, c, 14)
    for w in (20, 60):
        f[f"dist_max_{w}"] = np.log(c / _rolling(h, w, np.max))
        f[f"dist_min_{w}"] = np.log(c / _rolling(lo, w, np.min))
    f["hl_range"] = (h - lo) / c
    f["close_loc"] = np.where(h > lo, (2 * c - h - lo) / np.where(h > lo, h - lo, 1.0), 0.0)
    f["upper_shadow"] = (h - np.maximum(o, c)) / c
    f["lower_shadow"] = (np.minimum(o, c) - lo) / c
    f["ret_intrabar"] = np.log(c / o)
    f["ret_gap"] = np.concatenate([[0.0], np.log(o[1:] / c[:-1])])
    if bars.has_volume:
        f["volume_z_20"], f["volume_z_60"] = zscore_ref(v, 20), zscore_ref(v, 60)
        f["volume_log_ratio_5_60"] = _log_ratio(_rolling(v, 5, np.mean), _rolling(v, 60, np.mean))
        tp = (h + lo + c) / 3
        vwap = _rolling(tp * v, 20, np.sum) / _rolling(v, 20, np.sum)
        f["vwap_dist_20"] = np.log(c / vwap)
    else:
        for name in ("volume_z_20", "volume_z_60", "volume_log_ratio_5_60", "vwap_dist_20"):
            f[name] = np.zeros(T)
    f.update(calendar_ref(bars.timestamps, bars.is_intraday()))
    return f


def calendar_ref(timestamps: np.ndarray, intraday: bool) -> dict[str, np.ndarray]:
    tod_s, tod_c, dow_s, dow_c = (np.zeros(len(timestamps)) for _ in range(4))
    for i, ts in enumerate(timestamps):
        dt = datetime.fromtimestamp(int(ts) // 1_000_000_000, tz=timezone.utc)
        if intraday:
            a = 2 * math.pi * (dt.hour * 3600 + dt.minute * 60 + dt.second) / 86400
            tod_s[i], tod_c[i] = math.sin(a), math.cos(a)
        b = 2 * math.pi * dt.weekday() / 7
        dow_s[i], dow_c[i] = math.sin(b), math.cos(b)
    return {"tod_sin": tod_s, "tod_cos": tod_c, "dow_sin": dow_s, "dow_cos": dow_c}
