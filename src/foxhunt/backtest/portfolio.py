"""Portfolios of per-symbol strategies: a universe's symbols held together, equal-weight or
inverse-volatility-weighted, on one date axis.

Inputs are per-symbol strategy returns on a shared date axis, ``returns`` [S, T] (simple return of
symbol s's strategy realised at date t; NaN where symbol s has no bar at date t). ``union_axis``
builds that grid from each symbol's own (times, returns): the axis is the union of the symbols'
return times, a symbol contributing on the dates it has bars.

Rules (``WEIGHT_RULES``):

* ``equal``: every symbol present on a date gets 1 / (symbols present);
* ``inverse_vol``: symbol s gets (1 / vol_s) / sum over present symbols of (1 / vol_j), where
  vol_s is its *training* volatility (``training_vol`` [S], passed in: the standard deviation of
  its per-bar returns on data before the evaluated dates, never the evaluated dates themselves).

Weights are renormalised over the symbols present on each date, so each date's weights sum to 1
(the portfolio is rebalanced to its rule every date; the sum of per-symbol strategy returns of the
time-series momentum literature, not sub-accounts left to drift). A symbol absent on a date (no
bar: a holiday of its exchange, a gap, before its first or after its last bar) has 0 exposure
there and its weight goes to the symbols present; nothing is carried: its next bar's return
(which spans the gap) counts in full on that next date. A date where no symbol is present (only
possible in a hand-made grid; ``union_axis`` never makes one) earns 0 (all cash).

The portfolio's return is ``sum_s w[s, t] r[s, t]``; its metrics are ``foxhunt.backtest.metrics``'
(``compute_metrics``, float64 input) over all T dates, with the trade, turnover and exposure
columns NaN (they belong to the per-symbol rows). ``portfolio_reference`` is the same thing as a
plain float64 loop over dates and symbols (and ``metrics_reference.window_metrics``), the oracle
tests/backtest/test_portfolio.py checks ``portfolio`` against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from foxhunt.backtest.metrics import compute_metrics, metrics_to_dicts

__all__ = ["WEIGHT_RULES", "PortfolioResult", "base_weights", "portfolio", "portfolios", "portfolio_reference",
           "union_axis", "training_volatility"]

WEIGHT_RULES: tuple[str, ...] = ("equal", "inverse_vol")


@dataclass(frozen=True)
class PortfolioResult:
    """One portfolio over T dates.

    rule: one of ``WEIGHT_RULES``. returns: [T] float64 simple return per date. weights: [S, T]
    float64 (0 where a symbol is absent; each column sums to 1 where any symbol is present).
    present: [T] int64 symbols present per date. metrics: ``METRIC_NAMES`` of ``returns``.
    """

    rule: str
    returns: np.ndarray
    weights: np.ndarray
    present: np.ndarray
    metrics: dict[str, float]

    def equity(self) -> np.ndarray:
        """[T + 1] compounded equity, starting at 1 before the first date."""
        return np.concatenate([[1.0], np.cumprod(1.0 + self.returns)])


def base_weights(rule: str, training_vol: Sequence[float] | np.ndarray) -> np.ndarray:
    """[S] float64 unnormalised weight of each symbol under ``rule``: 1 (equal) or 1 / vol
    (inverse_vol). ValueError for an unknown rule, or a training volatility that is not finite > 0
    under inverse_vol (its weight would be undefined), naming the symbol's index."""
    vol = np.asarray(training_vol, np.float64).reshape(-1)
    if rule == "equal":
        return np.ones_like(vol)
    if rule != "inverse_vol":
        raise ValueError(f"weights_rule {rule!r}: expected one of {', '.join(WEIGHT_RULES)}")
    bad = ~(np.isfinite(vol) & (vol > 0))
    if bad.any():
        s = int(np.flatnonzero(bad)[0])
        raise ValueError(f"inverse_vol: symbol {s}'s training volatility is {float(vol[s])!r}; it must be finite and > 0")
    return 1.0 / vol


def _weights(present: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """[S, T] base weights of the present symbols, renormalised per date (0 where none is present)."""
    raw = torch.where(present, base[:, None], torch.zeros((), dtype=base.dtype, device=base.device))
    total = raw.sum(0, keepdim=True)
    return torch.where(total > 0, raw / torch.where(total > 0, total, 1.0), 0.0)


def portfolios(returns: Mapping[str, np.ndarray | torch.Tensor], training_vol: Sequence[float] | np.ndarray, *,
               bars_per_year: float, rules: Sequence[str] = WEIGHT_RULES) -> dict[tuple[str, str], PortfolioResult]:
    """Every rule's portfolio of every labelled strategy grid, metrics in one ``compute_metrics`` call.

    returns: {label: [S, T] per-symbol returns on one date axis, NaN where absent}; every grid the
    same shape and the same absences (they are strategies on the same bars). training_vol: [S].
    bars_per_year: the annualisation factor. Returns {(label, rule): PortfolioResult}.
    """
    grids = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in returns.items()}
    if not grids:
        raise ValueError("portfolios: no returns given")
    shapes = {tuple(g.shape) for g in grids.values()}
    first = next(iter(grids.values()))
    if len(shapes) != 1 or first.dim() != 2 or first.shape[1] < 1:
        raise ValueError(f"portfolios: every grid must be [S, T] with T >= 1 and one shape, got {sorted(shapes)}")
    s = first.shape[0]
    vol = np.asarray(training_vol, np.float64).reshape(-1)
    if vol.shape[0] != s:
        raise ValueError(f"training_vol: {vol.shape[0]} values for {s} symbols")
    present = torch.isfinite(first)
    for label, g in grids.items():
        if not torch.equal(torch.isfinite(g), present):
            raise ValueError(f"portfolios: {label!r} has bars where the first grid has none (or the reverse)")
    keys, series, weights = [], [], []
    for rule in rules:
        w = _weights(present, torch.as_tensor(base_weights(rule, vol)))
        for label, g in grids.items():
            keys.append((label, rule))
            weights.append(w)
            series.append((w * torch.where(present, g, 0.0)).sum(0))
    port = torch.stack(series)  # [P, T] float64
    t = port.shape[1]
    rows = metrics_to_dicts(compute_metrics(port, torch.full((port.shape[0],), t, dtype=torch.int64),
                                            bars_per_year=bars_per_year))
    n_present = present.sum(0).numpy().astype(np.int64)
    return {k: PortfolioResult(k[1], r.numpy(), w.numpy(), n_present, row)
            for k, r, w, row in zip(keys, port, weights, rows)}


def portfolio(returns: np.ndarray | torch.Tensor, weights_rule: str, training_vol: Sequence[float] | np.ndarray, *,
              bars_per_year: float) -> PortfolioResult:
    """The ``weights_rule`` portfolio of the per-symbol strategy returns [S, T] (NaN where absent)
    with the symbols' training volatilities [S] (used by inverse_vol only). See the module docstring."""
    return portfolios({"": returns}, training_vol, bars_per_year=bars_per_year, rules=(weights_rule,))[("", weights_rule)]


def portfolio_reference(returns: np.ndarray, weights_rule: str, training_vol: Sequence[float], *,
                        bars_per_year: float) -> tuple[list[float], dict[str, float]]:
    """The float64 oracle of ``portfolio``: a plain loop over dates and symbols, then
    ``metrics_reference.window_metrics``. Returns (per-date returns, metrics)."""
    from foxhunt.backtest.metrics_reference import window_metrics

    grid = np.asarray(returns, np.float64)
    vols = [float(v) for v in training_vol]
    out: list[float] = []
    for t in range(grid.shape[1]):
        num, den = 0.0, 0.0
        for s in range(grid.shape[0]):
            r = float(grid[s, t])
            if math.isnan(r):
                continue  # no bar: no exposure, nothing carried
            w = 1.0 if weights_rule == "equal" else 1.0 / vols[s]
            num += w * r
            den += w
        out.append(num / den if den > 0 else 0.0)
    metrics = window_metrics(out, bars_per_year=bars_per_year)
    for k in ("turnover", "exposure_time", "trade_count", "win_rate", "avg_trade_return", "profit_factor"):
        metrics[k] = math.nan  # not given to the portfolio (module docstring)
    return out, metrics


def union_axis(times: Sequence[np.ndarray], returns: Mapping[str, Sequence[np.ndarray]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The union date axis of S symbols and each label's [S, T] grid on it.

    times: S arrays [n_s] int64 ns, strictly increasing: when symbol s's returns are realised.
    returns: {label: S arrays [n_s]} (each aligned with ``times[s]``). Returns (axis [T] int64, the
    sorted union of every time; {label: [S, T] float64, NaN where symbol s has no return})."""
    axis = np.unique(np.concatenate([np.asarray(t, np.int64) for t in times])) if times else np.zeros(0, np.int64)
    cols = [np.searchsorted(axis, np.asarray(t, np.int64)) for t in times]
    grids = {}
    for label, per in returns.items():
        g = np.full((len(times), axis.shape[0]), np.nan)
        for s, (c, r) in enumerate(zip(cols, per)):
            g[s, c] = np.asarray(r, np.float64)
        grids[label] = g
    return axis, grids


def training_volatility(close: np.ndarray) -> float:
    """Standard deviation (ddof 1) of the simple close-to-close returns of ``close`` [n] (n >= 3),
    per bar: a symbol's training volatility for inverse_vol (NaN with fewer than 3 closes)."""
    c = np.asarray(close, np.float64)
    if c.shape[0] < 3:
        return math.nan
    return float(np.std(c[1:] / c[:-1] - 1.0, ddof=1))

