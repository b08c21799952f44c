"""Float64 reference for ``foxhunt.backtest.metrics``: one window at a time, plain Python loops.

Written from the definitions in ``metrics.py``'s docstring (not from the vectorised code), as the
oracle the device version is tested against. Slow by design: O(n) Python per metric per window.

Defined, never raising, on every window of finite returns the device accepts, wipe-outs included
(a bar with r <= -1: the equity is 0 from there on, or of flipped sign for a leveraged loss beyond
the capital): see "Wipe-outs" in ``metrics.py``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from foxhunt.backtest.metrics import METRIC_NAMES

NAN = math.nan
INF = math.inf


def _ratio(num: float, den: float) -> float:
    """num / den with IEEE semantics for den == 0: ±inf by the sign of num, NaN for 0/0."""
    if math.isnan(num) or math.isnan(den):
        return NAN
    if den == 0.0:
        return NAN if num == 0.0 else math.copysign(INF, num) * math.copysign(1.0, den)
    return num / den


def _pow(base: float, exponent: float) -> float:
    """base ** exponent for base >= 0, +inf on overflow (IEEE, as the device does) instead of raising."""
    try:
        return base**exponent
    except OverflowError:
        return INF


def _percentile(s: list[float], q: float) -> float:
    """np.percentile(values, 100 q), linear interpolation, of the ascending list ``s``."""
    n = len(s)
    h = (n - 1) * q
    k = int(math.floor(h))
    lo_v, hi_v = s[k], s[min(k + 1, n - 1)]
    return lo_v + (h - k) * (hi_v - lo_v)


def window_metrics(
    returns: Sequence[float],
    *,
    bars_per_year: float = 252.0,
    positions: Sequence[float] | None = None,
    trade_returns: Sequence[float] | None = None,
    risk_free: float = 0.0,
    cutoff: float = 0.05,
    traded: Sequence[float] | None = None,
) -> dict[str, float]:
    """Every metric of one window of n >= 1 simple returns (float64). Keys: ``METRIC_NAMES``.

    positions: n exposures (None → exposure_time NaN).
    traded: n traded notionals in units of the initial capital (None → turnover NaN).
    trade_returns: the window's round-trip returns, possibly empty (None → trade columns NaN).
    """
    r = [float(x) for x in returns]
    n = len(r)
    if n < 1:
        raise ValueError("window_metrics: a window needs at least one bar")
    bpy, rf = float(bars_per_year), float(risk_free)
    out: dict[str, float] = {}

    # compounded equity E_0 = 1, E_i = E_{i-1} (1 + r_i)
    equity = [1.0]
    for x in r:
        equity.append(equity[-1] * (1.0 + x))
    final = equity[-1]
    out["final_equity"] = final
    out["total_return"] = final - 1.0
    # CAGR; a wiped-out window (final 0) gives -1; below 0 (a loss beyond the capital) it is undefined:
    # NaN (as empyrical's real power of a negative base, unless bars_per_year / n happens to be whole)
    out["annual_return"] = NAN if final < 0 else _pow(final, 1.0 / (n / bpy)) - 1.0

    # moments
    mean = sum(r) / n
    if n >= 2:
        std = 0.0 if max(r) == min(r) else math.sqrt(sum((x - mean) ** 2 for x in r) / (n - 1))
        out["annual_volatility"] = std * math.sqrt(bpy)
        out["sharpe"] = _ratio(mean - rf, std) * math.sqrt(bpy)
        down = math.sqrt(sum(min(x - rf, 0.0) ** 2 for x in r) / n) * math.sqrt(bpy)
        out["sortino"] = _ratio((mean - rf) * bpy, down)
    else:
        out["annual_volatility"] = out["sharpe"] = out["sortino"] = NAN

    # drawdowns: walk the equity points, tracking the running peak and the current underwater spell
    peak, peak_at = 1.0, 0
    max_dd, trough_at, trough_peak = 0.0, 0, 1.0
    longest = 0
    underwater = False
    for i in range(1, n + 1):
        e = equity[i]
        if e >= peak:  # at or above the running peak: a recovery (if underwater) or a new high
            if underwater:
                longest = max(longest, i - peak_at)
            underwater = False
            peak, peak_at = e, i
        else:
            underwater = True
            longest = max(longest, i - peak_at)  # a spell still open at the end counts to n
            dd = e / peak - 1.0
            if dd < max_dd:
                max_dd, trough_at, trough_peak = dd, i, peak
    out["max_drawdown"] = max_dd
    out["max_drawdown_duration"] = float(longest)
    if max_dd < 0:
        rec = NAN
        for i in range(trough_at + 1, n + 1):
            if equity[i] >= trough_peak:
                rec = float(i - trough_at)
                break
        out["max_drawdown_recovery"] = rec
        calmar = out["annual_return"] / abs(max_dd)
        out["calmar"] = NAN if math.isinf(calmar) else calmar
    else:
        out["max_drawdown_recovery"] = 0.0
        out["calmar"] = NAN

    # historical VaR (linear interpolation between order statistics) and CVaR (empyrical's tail)
    s = sorted(r)
    out["value_at_risk"] = _percentile(s, cutoff)
    k = int(math.floor((n - 1) * cutoff))
    out["conditional_value_at_risk"] = sum(s[: k + 1]) / (k + 1)

    # tail ratio: |95th percentile| / |5th percentile|
    out["tail_ratio"] = _ratio(abs(_percentile(s, 0.95)), abs(_percentile(s, 0.05)))
    # omega ratio (required return 0)
    gains = sum(x - rf for x in r if x - rf > 0)
    losses = -sum(x - rf for x in r if x - rf < 0)
    out["omega_ratio"] = gains / losses if losses > 0 and n >= 2 else NAN
    # stability: R² of the least-squares line through the cumulative log returns. A bar with r <= -1
    # has log(1 + r) = -inf (r = -1) or no real log (r < -1): y, and so R², is undefined: NaN.
    if n >= 2 and min(r) > -1.0:
        ys, acc = [], 0.0
        for x in r:
            acc += math.log1p(x)
            ys.append(acc)
        xm, ym = (n - 1) / 2.0, sum(ys) / n
        sxy = sum((i - xm) * (y - ym) for i, y in enumerate(ys))
        sxx = sum((i - xm) ** 2 for i in range(n))
        syy = sum((y - ym) ** 2 for y in ys)
        out["stability"] = min(1.0, sxy * sxy / (sxx * syy)) if syy > 0 else NAN
    else:
        out["stability"] = NAN

    # positions: the share of bars holding something
    if positions is not None:
        p = [float(x) for x in positions]
        if len(p) != n:
            raise ValueError("window_metrics: positions must have one value per bar")
        out["exposure_time"] = sum(1 for x in p if x != 0.0) / n
    else:
        out["exposure_time"] = NAN
    # turnover: traded notional (initial capital = 1) over the mean of the equity points E_0..E_n
    # (negative when that mean is, after losses beyond the capital; IEEE ±inf / NaN when it is 0)
    if traded is not None:
        tv = [float(x) for x in traded]
        if len(tv) != n:
            raise ValueError("window_metrics: traded must have one value per bar")
        out["turnover"] = _ratio(sum(tv), sum(equity) / (n + 1))
    else:
        out["turnover"] = NAN

    # round trips
    if trade_returns is not None:
        tr = [float(x) for x in trade_returns]
        count = len(tr)
        wins = sum(1 for x in tr if x > 0)
        gross_win = sum(x for x in tr if x > 0)
        gross_loss = -sum(x for x in tr if x < 0)
        out["trade_count"] = float(count)
        out["win_rate"] = wins / count if count else NAN
        out["avg_trade_return"] = sum(tr) / count if count else NAN
        if count == 0:
            out["profit_factor"] = NAN
        elif gross_loss > 0:
            out["profit_factor"] = gross_win / gross_loss
        else:
            out["profit_factor"] = INF if gross_win > 0 else NAN
    else:
        out["trade_count"] = out["win_rate"] = out["avg_trade_return"] = out["profit_factor"] = NAN

    out["bars"] = float(n)
    return {name: out[name] for name in METRIC_NAMES}


def reference_metrics(
    returns: np.ndarray,
    lengths: np.ndarray,
    *,
    bars_per_year: float = 252.0,
    positions: np.ndarray | None = None,
    trade_window: np.ndarray | None = None,
    trade_ret: np.ndarray | None = None,
    trade_valid: np.ndarray | None = None,
    risk_free: float = 0.0,
    cutoff: float = 0.05,
    traded: np.ndarray | None = None,
) -> np.ndarray:
    """[W, M] float64, the same layout as ``compute_metrics``, one window at a time.

    returns, positions, traded: [W, T] (padding beyond lengths[w] ignored); lengths: [W].
    trade_window / trade_ret / trade_valid: [K] records (all three, or None for no trade data);
    records that are invalid or name a window outside [0, W) are ignored.
    """
    returns = np.asarray(returns, dtype=np.float64)
    W = returns.shape[0]
    per_window: list[list[float]] | None = None
    if trade_ret is not None:
        per_window = [[] for _ in range(W)]
        for w, x, ok in zip(np.asarray(trade_window), np.asarray(trade_ret, dtype=np.float64), np.asarray(trade_valid)):
            if ok and 0 <= int(w) < W:
                per_window[int(w)].append(float(x))
    rows = []
    for w in range(W):
        n = int(lengths[w])
        rows.append(list(window_metrics(
            returns[w, :n],
            bars_per_year=bars_per_year,
            positions=None if positions is None else np.asarray(positions, dtype=np.float64)[w, :n],
            trade_returns=None if per_window is None else per_window[w],
            risk_free=risk_free,
            cutoff=cutoff,
            traded=None if traded is None else np.asarray(traded, dtype=np.float64)[w, :n],
        ).values()))
    return np.array(rows, dtype=np.float64).reshape(W, len(METRIC_NAMES))
