"""Timing apart from holding: a window's exposure to the market and what is left of its returns.

An agent whose Sharpe equals buy-and-hold's may time the market or may simply hold it; its Sharpe
cannot tell. This module splits its per-bar returns on a window into the part one fixed exposure to
buy-and-hold earns and the rest, on the host in float64 (once per window, never in a loop over bars
on the device: the runner calls it at the fold's end on the backtest's returns and positions).

Inputs for one window of n bars: the agent's simple per-bar returns ``returns`` [n], its exposure
after each bar's step ``positions`` [n] (signed fraction of the maximum position; 0 = flat), and
buy-and-hold's simple per-bar returns ``market`` [n] on the same bars (``BuyHold.returns``).

Definitions (``timing_block``'s keys; Sharpe ratios annualised as ``backtest.metrics``' Sharpe):

- ``beta``: the least-squares slope of the agent's returns on buy-and-hold's *with an intercept*,
  cov(r, m) / var(m). Degenerate case: when buy-and-hold's returns do not vary on the window
  (var(m) ≤ 1e-20 · Σm², a constant market's rounding residue is not variance) beta is 0, the
  timing returns are the agent's own, and ``note`` says so.
- ``timing returns`` t = r − beta · m [n] (``timing_returns``): the intercept stays in, so t is
  what the agent earns beside its exposure (its alpha plus its timing's noise). A constant exposure
  e gives r ≈ e · m and leaves only its costs.
- ``timing_sharpe``: mean(t) / std(t, ddof = 1) · sqrt(bars_per_year); 0 when every t is equal
  to 0 (nothing is left, e.g. a flat agent, or one that is buy-and-hold bar for bar); ±inf for a
  nonzero constant t (metrics.py's zero-dispersion rule); None for n < 2.
- ``timing_total_return``: prod(1 + t) − 1, the equity of the agent hedged by −beta of
  buy-and-hold rebalanced every bar (as ``total_return`` compounds r).
- ``r_squared``: 1 − Σ(t − mean t)² / Σ(r − mean r)²: the share of the agent's return variance its
  exposure to buy-and-hold explains (None when the agent's returns do not vary).
- ``standard_error``: sqrt(bars_per_year / n), the SE of an annualised Sharpe over n bars when the
  true Sharpe is small (``sharpe_standard_error``).
- ``time_in_market``, ``long_share``, ``short_share``: the share of the n bars with a nonzero,
  positive, negative position (time_in_market = long_share + short_share; it equals the metrics'
  ``exposure_time``).
- ``trades``: the window's round trips (the metrics' ``trade_count``), repeated here for the reader.

Undefined values are None, never NaN (the block goes into JSON as it is). The holding rule
(``verdict``), in this order:

- ``"flat"``: no position on any bar.
- ``"holding"``: the agent holds the market: |beta| ≥ ``HOLDING_MIN_BETA`` (0.5) and what is left is
  nothing, either within noise (|timing Sharpe| ≤ 1 SE) or negligible in size (``r_squared`` ≥
  ``HOLDING_R_SQUARED``, 0.99: the timing returns carry under 1 % of the agent's variance, whatever
  the Sharpe of that residue).
- ``"timing"`` / ``"mistiming"``: timing Sharpe above +1 SE / below −1 SE.
- ``"noise"``: in the market with little exposure (|beta| < 0.5) and a timing Sharpe within 1 SE.
- None: no buy-and-hold on the window (``beta`` and the timing keys are then None too).

One SE describes; it does not test. The scorecard's gates judge timing at 2 SE
(``scorecard.family.gates``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

HOLDING_MIN_BETA = 0.5
"""|beta| at or above this, with nothing left beyond noise, is holding the market (half exposure or more)."""
HOLDING_R_SQUARED = 0.99
"""Buy-and-hold's exposure explaining this share of the agent's return variance leaves a negligible rest."""

TIMING_KEYS = ("beta", "timing_sharpe", "timing_total_return", "r_squared", "standard_error", "time_in_market",
               "long_share", "short_share", "trades", "bars", "verdict", "note")
"""The keys of a ``timing_block``, in the order the JSON and the tables show them."""

CONSTANT_MARKET_NOTE = "buy-and-hold does not vary on these bars: beta 0, the timing returns are the agent's own"
NO_MARKET_NOTE = "no buy-and-hold on these bars: no beta, no timing"


def _vector(name: str, x: Any) -> np.ndarray:
    """x as a 1-d float64 array; ValueError (one line) when it is not 1-d or holds NaN / inf."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"timing: {name} must be one value per bar (1-d), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"timing: {name} holds a non-finite value at bar {int(np.flatnonzero(~np.isfinite(a))[0])}")
    return a


def sharpe_standard_error(steps: int, bars_per_year: float) -> float:
    """SE of an annualised Sharpe ratio measured over ``steps`` bar returns when the true Sharpe is
    small: sqrt(bars_per_year / steps) (annualised units)."""
    return math.sqrt(bars_per_year / max(int(steps), 1))


def beta(returns: np.ndarray, market: np.ndarray) -> tuple[float, bool]:
    """(beta, whether the market varies): the OLS slope of returns [n] on market [n] with an
    intercept, float64; (0.0, False) when the market does not vary (see the module docstring)."""
    r, m = np.asarray(returns, dtype=np.float64), np.asarray(market, dtype=np.float64)
    if r.shape != m.shape:
        raise ValueError(f"timing_returns: returns {r.shape} and market returns {m.shape} differ")
    mc = m - m.mean() if m.size else m
    var = float(mc @ mc)
    varies = var > 1e-20 * float(m @ m)  # relative: a constant market's rounding residue is not variance
    return (float((r - r.mean()) @ mc) / var if varies else 0.0), bool(varies)


def timing_returns(returns: np.ndarray, market: np.ndarray) -> np.ndarray:
    """Per-bar returns [n] less their least-squares regression on the market's (buy-and-hold) returns
    [n] over the same bars: r − β·m, β = cov(r, m) / var(m) (float64; β = 0 when m does not vary).

    What is left is the part of the policy's return that holding a fixed exposure cannot earn: a
    constant exposure e gives r ≈ e·m and leaves only its costs, a policy that times the market keeps
    its timing (``train.select_score = "timing"``, ``timing_block``)."""
    b, _ = beta(returns, market)
    return np.asarray(returns, dtype=np.float64) - b * np.asarray(market, dtype=np.float64)


def annualised_sharpe(x: np.ndarray, bars_per_year: float) -> float:
    """mean / std (ddof = 1) · sqrt(bars_per_year) of per-bar values [n], float64: 0 when every value
    is 0, ±inf when they are an equal nonzero constant, NaN for n < 2."""
    v = np.asarray(x, dtype=np.float64)
    if v.size < 2:
        return math.nan
    if np.all(v == v[0]):  # zero dispersion, exactly (the std's rounding residue is not risk)
        return 0.0 if v[0] == 0.0 else math.copysign(math.inf, float(v[0]))
    return float(v.mean() / v.std(ddof=1) * math.sqrt(bars_per_year))


def exposure_shares(positions: np.ndarray) -> dict[str, float | None]:
    """time_in_market, long_share, short_share of positions [n] (shares of the n bars; None for n = 0)."""
    p = _vector("positions", positions)
    n = p.size
    if n == 0:
        return {"time_in_market": None, "long_share": None, "short_share": None}
    long_, short = float(np.count_nonzero(p > 0)) / n, float(np.count_nonzero(p < 0)) / n
    return {"time_in_market": float(np.count_nonzero(p)) / n, "long_share": long_, "short_share": short}


def verdict(b: float | None, timing_sharpe: float | None, r_squared: float | None, time_in_market: float,
            standard_error: float) -> str | None:
    """The holding rule of the module docstring: "flat", "holding", "timing", "mistiming", "noise",
    or None without a buy-and-hold series (b None)."""
    if not time_in_market > 0:
        return "flat"
    if b is None or timing_sharpe is None:
        return None
    ts = timing_sharpe
    negligible = r_squared is not None and r_squared >= HOLDING_R_SQUARED
    if abs(b) >= HOLDING_MIN_BETA and (abs(ts) <= standard_error or negligible):
        return "holding"
    if ts > standard_error:
        return "timing"
    if ts < -standard_error:
        return "mistiming"
    return "noise"


def timing_block(returns: np.ndarray, positions: np.ndarray | None, market: np.ndarray | None, bars_per_year: float,
                 trades: float | None = None) -> dict[str, Any]:
    """The window's exposure and timing (``TIMING_KEYS``; definitions in the module docstring).

    returns: [n] the agent's; positions: [n] the agent's, or None (a curve known by its returns
    alone: the three shares are None and the agent counts as flat when every return is 0); market:
    [n] buy-and-hold's on the same bars, or None (then beta and the timing keys are None); trades:
    the window's round-trip count, or None. A ValueError (one line) for arrays of other lengths or
    non-finite values."""
    r = _vector("returns", returns)
    n = r.size
    if n == 0:
        raise ValueError("timing: a window of 0 bars has no returns to regress")
    se = sharpe_standard_error(n, bars_per_year)
    if positions is not None:
        p = _vector("positions", positions)
        if p.shape != r.shape:
            raise ValueError(f"timing: positions {p.shape} and returns {r.shape} differ")
        shares: dict[str, Any] = exposure_shares(p)
        in_market = shares["time_in_market"]
    else:
        shares = {"time_in_market": None, "long_share": None, "short_share": None}
        in_market = float(np.any(r != 0.0))
    out: dict[str, Any] = {"beta": None, "timing_sharpe": None, "timing_total_return": None, "r_squared": None,
                           "standard_error": se, **shares, "trades": trades, "bars": n, "verdict": None, "note": None}
    if market is None:
        out["note"] = NO_MARKET_NOTE
        out["verdict"] = verdict(None, None, None, in_market, se)
        return out
    m = _vector("market", market)
    b, varies = beta(r, m)
    t = r - b * m
    rc, tc = r - r.mean(), t - t.mean()
    ss_r = float(rc @ rc)
    ts = annualised_sharpe(t, bars_per_year)
    out.update(beta=b, timing_sharpe=None if math.isnan(ts) else ts, timing_total_return=float(np.prod(1.0 + t) - 1.0),
               r_squared=(1.0 - float(tc @ tc) / ss_r) if ss_r > 0 else None,
               note=None if varies else CONSTANT_MARKET_NOTE)
    out["verdict"] = verdict(b, out["timing_sharpe"], out["r_squared"], in_market, se)
    return out


def window_timing(result: Any, i: int, market: Any | None, j: int) -> dict[str, Any]:
    """``timing_block`` of window i of a ``BacktestResult`` kept with its curves, against window j of
    buy-and-hold's (a ``BacktestResult`` on the same bars, or None)."""
    if result.returns is None or result.positions is None:
        raise ValueError("timing: the backtest did not keep its curves (keep_curves=True)")
    n = int(result.lengths[i])
    trades = result.metrics[i].get("trade_count")
    m = None
    if market is not None:
        if market.returns is None or int(market.lengths[j]) != n:
            raise ValueError(f"timing: buy-and-hold's window {j} is not the {n} bars of window {i} with its curves")
        m = market.returns[j, :n]
    return timing_block(result.returns[i, :n], result.positions[i, :n], m, float(result.bars_per_year),
                        float(trades) if trades is not None and math.isfinite(trades) else None)


def row_fields(block: dict[str, Any]) -> dict[str, Any]:
    """The block as columns of a backtest's metrics row (``foxhunt backtest``'s metrics.json / .csv):
    every key but ``trades`` and ``bars`` (the row's ``trade_count`` and ``bars``), with
    ``standard_error`` and ``note`` named ``timing_standard_error`` and ``timing_note``."""
    rename = {"standard_error": "timing_standard_error", "note": "timing_note"}
    return {rename.get(k, k): block[k] for k in TIMING_KEYS if k not in ("trades", "bars")}


def timing_text(block: dict[str, Any] | None) -> str:
    """The block in a few words for a console line: ``β +0.98 timing Sharpe +0.12 (holding)``; "" without one."""
    if not block or block.get("beta") is None:
        return ""
    ts = block.get("timing_sharpe")
    ts_text = f"{ts:+.2f}" if isinstance(ts, (int, float)) and math.isfinite(ts) else "–"
    return f"β {block['beta']:+.2f} timing Sharpe {ts_text} ({block.get('verdict')})"


__all__ = ["CONSTANT_MARKET_NOTE", "HOLDING_MIN_BETA", "HOLDING_R_SQUARED", "NO_MARKET_NOTE", "TIMING_KEYS",
           "annualised_sharpe", "beta", "exposure_shares", "row_fields", "sharpe_standard_error", "timing_block", "timing_returns",
           "timing_text", "verdict", "window_timing"]
