"""The statistics of a report's tearsheet: joined out-of-sample returns, their equity, drawdown,
summary, monthly returns, rolling Sharpe and the holding time of round trips. numpy float64, on
the host (a report is read once); each definition is ``foxhunt.backtest.metrics``' (empyrical's),
and tests/backtest/test_tearsheet.py checks them against the float64 reference
(``metrics_reference.window_metrics``) on random and odd-shaped returns.

Shapes: ``returns`` [n] simple per-bar returns; ``times`` [n] int64 UTC ns, the time each return is
realised at (the bar it ends on); equity [n + 1] starts at 1 before the first return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

SUMMARY_KEYS = ("total_return", "annual_return", "annual_volatility", "sharpe", "max_drawdown")


@dataclass
class Joined:
    """Windows joined in order: ``start`` the time of the first equity point (the first window's
    first bar), ``times`` [n] and ``returns`` {label: [n]} over every window's bars, ``bounds`` the
    index in ``returns`` where each window after the first begins; ``positions`` {label: [n]} the
    exposures of the curves every window gave them for (the timing table's shares)."""

    start: int
    times: np.ndarray
    returns: dict[str, np.ndarray]
    bounds: list[int]
    positions: dict[str, np.ndarray] = field(default_factory=dict)

    def equity_times(self) -> np.ndarray:
        """[n + 1] int64 ns: the equity points' times (``start``, then each return's)."""
        return np.concatenate([[self.start], self.times]).astype(np.int64)


def join(windows: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]],
         positions: Sequence[dict[str, np.ndarray]] | None = None) -> Joined:
    """Join windows given in order as (times [T_k + 1]: the window's bars, the first being the
    equity's starting point; {label: returns [T_k]}), and optionally each window's {label:
    positions [T_k]}. Labels missing from a window are left out of the join (a label is kept only
    if every window has it)."""
    labels = [k for k in windows[0][1] if all(k in w for _, w in windows)]
    times = np.concatenate([np.asarray(t[1:], np.int64) for t, _ in windows])
    rets = {k: np.concatenate([np.asarray(w[k], np.float64) for _, w in windows]) for k in labels}
    bounds = list(np.cumsum([len(t) - 1 for t, _ in windows])[:-1].astype(int))
    pos: dict[str, np.ndarray] = {}
    if positions is not None and len(positions) == len(windows):
        keep = [k for k in labels if all(k in p for p in positions)]
        pos = {k: np.concatenate([np.asarray(p[k], np.float64) for p in positions]) for k in keep}
    return Joined(int(windows[0][0][0]), times, rets, bounds, pos)


def equity(returns: np.ndarray) -> np.ndarray:
    """[n + 1] compounded equity, E_0 = 1, E_i = E_{i-1} (1 + r_i)."""
    return np.concatenate([[1.0], np.cumprod(1.0 + np.asarray(returns, np.float64))])


def drawdown(eq: np.ndarray) -> np.ndarray:
    """[n + 1] underwater curve: E_i / max(E_0..E_i) - 1 (<= 0)."""
    return eq / np.maximum.accumulate(eq) - 1.0


def _sharpe(mean: np.ndarray | float, std: np.ndarray | float, bpy: float) -> np.ndarray:
    """mean / std * sqrt(bpy) with metrics.py's zero-dispersion rule (±inf, NaN for 0 / 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(mean, np.float64) / np.asarray(std, np.float64) * math.sqrt(bpy)


def summary(returns: np.ndarray, bars_per_year: float) -> dict[str, float]:
    """total_return, annual_return (CAGR), annual_volatility, sharpe, max_drawdown of ``returns``
    as ``metrics.py`` defines them (NaN where they are undefined: n < 2, a final equity below 0)."""
    r = np.asarray(returns, np.float64)
    n = r.shape[0]
    eq = equity(r)
    final = float(eq[-1])
    out = {"total_return": final - 1.0, "max_drawdown": float(drawdown(eq).min()) if n else 0.0}
    with np.errstate(over="ignore"):
        out["annual_return"] = math.nan if final < 0 or n == 0 else float(np.power(final, 1.0 / (n / bars_per_year))) - 1.0
    if n >= 2:
        std = 0.0 if r.max() == r.min() else float(np.std(r, ddof=1))
        out["annual_volatility"] = std * math.sqrt(bars_per_year)
        out["sharpe"] = float(_sharpe(float(r.mean()), std, bars_per_year))
    else:
        out["annual_volatility"] = out["sharpe"] = math.nan
    return {k: out[k] for k in SUMMARY_KEYS}


def monthly_returns(times: np.ndarray, returns: np.ndarray) -> dict[tuple[int, int], float]:
    """{(year, month): compounded return of the returns realised in that UTC calendar month}."""
    t = np.asarray(times, np.int64)
    if t.shape[0] == 0:
        return {}
    months = t.astype("datetime64[ns]").astype("datetime64[M]")
    keys, first = np.unique(months, return_index=True)  # times increase, so each month is one run
    growth = np.multiply.reduceat(1.0 + np.asarray(returns, np.float64), first)
    out = {}
    for k, g in zip(keys, growth):
        y, m = divmod(int(k.astype(np.int64)), 12)
        out[(1970 + y, m + 1)] = float(g) - 1.0
    return out


def rolling_window(bars_per_year: float, n: int) -> int:
    """The rolling Sharpe's window: about a quarter of a year of bars, at least 20, and at most
    half the series (so that a short series still shows a curve); n itself below 40 bars."""
    return int(max(2, min(max(20, round(bars_per_year / 4)), max(20, n // 2), n)))


def rolling_sharpe(returns: np.ndarray, window: int, bars_per_year: float) -> np.ndarray:
    """[n - window + 1] annualised Sharpe of each trailing window of ``window`` bars (ending at
    bar window - 1, …, n - 1), by ``metrics.py``'s definition (ddof = 1; equal returns: ±inf / NaN).
    O(n) by running sums of the deviations from the series' mean: a window's variance is good to about
    n · 1e-16 of the series' largest squared deviation, relative to that window's variance (the reference's
    per-window sums resolve it exactly); a window far quieter than the series loses those digits."""
    r = np.asarray(returns, np.float64)
    n = r.shape[0]
    if window < 2 or n < window:
        return np.zeros(0)
    # Centred per window through cumulative sums of the deviations from the global mean, so the
    # variance does not lose digits to a large common mean.
    d = r - r.mean()
    c1 = np.concatenate([[0.0], np.cumsum(d)])
    c2 = np.concatenate([[0.0], np.cumsum(d * d)])
    s1 = c1[window:] - c1[:-window]
    s2 = c2[window:] - c2[:-window]
    mean_d = s1 / window
    var = np.maximum(s2 - window * mean_d * mean_d, 0.0) / (window - 1)
    # Windows of equal returns have exactly zero dispersion (as metrics.py); the sums leave a residue.
    changes = np.concatenate([[0], np.cumsum(r[1:] != r[:-1])])  # changes[i]: value changes in r[0..i]
    flat = changes[window - 1 :] == changes[: n - window + 1]
    std = np.where(flat, 0.0, np.sqrt(var))
    mean = np.where(flat, r[: n - window + 1], mean_d + r.mean())  # exact where flat: 0 / 0 stays NaN
    return _sharpe(mean, std, bars_per_year)


def holding_bars(entry: Sequence[int], exit_: Sequence[int]) -> float:
    """Mean bars a round trip was held (exit bar - entry bar); NaN without trades."""
    e, x = np.asarray(entry, np.float64), np.asarray(exit_, np.float64)
    return float(np.mean(x - e)) if e.shape[0] else math.nan
