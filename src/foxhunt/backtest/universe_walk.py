"""A universe's walk-forward validation as one ``UniverseRun`` (window = fold), for a pooled training
run's report (``foxhunt.train.universe_oos``) and ``foxhunt backtest --run`` on such a run
(``foxhunt.backtest.universe_run_dir``).

* **Per fold** (``FoldWindows``): each member symbol's validation window, one return per bar after
  its first, for every policy (the model, buy-and-hold, the in-sample quant rule), and the members'
  *training* volatilities: the standard deviation of each symbol's simple close-to-close returns over
  its training rows of that fold (``training_volatility``), never a validation bar.
* **Per-fold portfolios** (``fold_portfolios``): every policy's member strategies held together on
  the union of the fold's validation dates, equal-weight and inverse-volatility-weighted with that
  fold's training volatilities (``foxhunt.backtest.portfolio``).
* **Stitched** (``stitch``): the folds' portfolio returns joined in fold order (the validation
  windows follow one another on the union calendar), the out-of-sample record of a walk-forward
  whose weights were always set on data before the dates they weigh; its metrics are computed on
  the joined returns (``compute_metrics``, float64).

``walk_forward_run`` makes the ``UniverseRun`` that ``universe_report.write_universe_report``
draws: rows per symbol and fold, per fold and weighting rule, and stitched ("all"); the symbol ×
fold Sharpe grid (NaN where a symbol sits a fold out); each symbol's validation returns joined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from foxhunt.backtest.metrics import compute_metrics, metrics_to_dicts
from foxhunt.backtest.portfolio import WEIGHT_RULES, PortfolioResult, portfolios, training_volatility, union_axis
from foxhunt.backtest.universe import BENCHMARK, QUANT, UniverseRun

__all__ = ["FoldWindows", "fold_portfolios", "stitch", "walk_forward_run", "fold_training_vols", "quant_fold_exposures",
           "BENCHMARK", "QUANT"]


@dataclass
class FoldWindows:
    """One fold's member windows.

    fold: the fold's number. members: [W] int64 symbol indices. times: W arrays [n_w + 1] int64 UTC
    ns (the window's first bar, then the bar each return is realised at). returns: {label: W arrays
    [n_w] float64}, the model's label first. metrics: {label: W metric rows}. training_vol: [W].
    timing: W dicts of the model's timing fields against buy-and-hold (``timing.row_fields``), or empty.
    """

    fold: int
    members: np.ndarray
    times: list[np.ndarray]
    returns: dict[str, list[np.ndarray]]
    metrics: dict[str, list[dict[str, float]]]
    training_vol: np.ndarray
    timing: list[dict[str, Any]] = field(default_factory=list)


def fold_training_vols(close: Sequence[np.ndarray], offsets: np.ndarray, bounds: np.ndarray, members: np.ndarray) -> np.ndarray:
    """[W] each member's training volatility: ``training_volatility`` of its closes on its training
    rows ``bounds[s, 0] … bounds[s, 1] - 1`` (global rows; ``close[s]`` is symbol s's own array, row
    ``offsets[s]`` its first)."""
    out = []
    for s in members:
        lo, hi = int(bounds[s, 0] - offsets[s]), int(bounds[s, 1] - offsets[s])
        out.append(training_volatility(np.asarray(close[s], np.float64)[lo:hi]))
    return np.asarray(out, np.float64)


def quant_fold_exposures(bars: Sequence[Any], offsets: np.ndarray, windows: Sequence[tuple[int, int, int, int, int]], env: Any,
                         bars_per_year: float) -> tuple[np.ndarray, list[str]]:
    """The in-sample quant rule on member windows: ``windows`` are (symbol, train_start, train_end,
    val_start) global rows, the window's steps ending at the symbol's fold end; the rule is chosen on
    the symbol's training rows (``quant_rules.quant_exposures``). Returns ([W, max steps] exposures in
    [-1, 1], 0 past each window's steps, given by the caller's lengths) and the rule names."""
    from foxhunt.backtest.quant_rules import quant_exposures
    from foxhunt.folds import FoldRange

    per, names = [], []
    for s, a, b, v, n in windows:
        o = int(offsets[s])
        ex, info = quant_exposures(bars[s].close, bars[s].volume, [FoldRange(0, a - o, b - o, v - o, v - o + n + 1)], env,
                                   bars_per_year)
        per.append(np.clip(ex[0][:n], -1.0, 1.0))
        names.append(info["rules"][0])
    out = np.zeros((len(per), max((len(p) for p in per), default=1)))
    for i, p in enumerate(per):
        out[i, : len(p)] = p
    return out, names


def fold_portfolios(n_symbols: int, fw: FoldWindows, bars_per_year: float) -> tuple[np.ndarray, dict[tuple[str, str], PortfolioResult]]:
    """(axis [T] int64: the union of the fold's return times; {(label, rule): PortfolioResult} with
    [S, T] weights, S = ``n_symbols``, 0 for symbols outside the fold)."""
    empty = np.zeros(0, np.int64)
    pos = {int(s): w for w, s in enumerate(fw.members)}
    times = [fw.times[pos[s]][1:] if s in pos else empty for s in range(n_symbols)]
    rets = {k: [v[pos[s]] if s in pos else np.zeros(0) for s in range(n_symbols)] for k, v in fw.returns.items()}
    vol = np.ones(n_symbols)  # a non-member is never present: its weight is never used
    vol[fw.members] = fw.training_vol
    axis, grids = union_axis(times, rets)
    return axis, portfolios(grids, vol, bars_per_year=bars_per_year)


def stitch(parts: Sequence[PortfolioResult], bars_per_year: float) -> PortfolioResult:
    """The folds' portfolios of one policy and rule joined in time order; metrics of the joined returns."""
    r = np.concatenate([p.returns for p in parts])
    row = metrics_to_dicts(compute_metrics(torch.as_tensor(r, dtype=torch.float64)[None], torch.tensor([r.shape[0]]),
                                           bars_per_year=bars_per_year))[0]
    return PortfolioResult(parts[0].rule, r, np.concatenate([p.weights for p in parts], axis=1),
                           np.concatenate([p.present for p in parts]), row)


def _iso(t: int) -> str:
    return str(np.datetime64(int(t), "ns").astype("datetime64[s]")) + "Z"


def walk_forward_run(symbols: Sequence[str], folds: Sequence[FoldWindows], label: str, bars_per_year: float,
                     trades: list[dict[str, Any]] | None = None) -> UniverseRun:
    """The ``UniverseRun`` of a walk-forward on a universe (module docstring). ``folds`` in time order,
    each with at least one member; ValueError when two folds' validation dates overlap."""
    s_count, k = len(symbols), len(folds)
    labels = list(folds[0].returns)
    rows: list[dict[str, Any]] = []
    port_rows: list[dict[str, Any]] = []
    sharpe = np.full((s_count, k), np.nan)
    per: dict[str, list[list[np.ndarray]]] = {lab: [[] for _ in range(s_count)] for lab in labels}
    times: list[list[np.ndarray]] = [[] for _ in range(s_count)]
    axes, by_fold = [], []
    for j, fw in enumerate(folds):
        for w, s in enumerate(fw.members):
            t = fw.times[w]
            for lab in labels:
                extra = fw.timing[w] if lab == label and fw.timing else {}
                rows.append({"symbol": symbols[s], "window": fw.fold, "label": lab, "start": _iso(t[0]), "end": _iso(t[-1]),
                             **fw.metrics[lab][w], **extra})
                per[lab][s].append(np.asarray(fw.returns[lab][w], np.float64))
            sharpe[s, j] = fw.metrics[label][w]["sharpe"]
            times[s].append(t if not times[s] else t[1:])  # the first window's start bar, then return bars
        axis, ports = fold_portfolios(s_count, fw, bars_per_year)
        if axes and axis.size and axes[-1].size and axis[0] <= axes[-1][-1]:
            raise ValueError(f"fold {fw.fold}'s validation dates overlap the previous fold's")
        axes.append(axis)
        by_fold.append(ports)
        start = min(int(t[0]) for t in fw.times)
        for rule in WEIGHT_RULES:
            for lab in labels:
                port_rows.append({"symbol": "portfolio", "window": fw.fold, "label": lab, "weights": rule, "start": _iso(start),
                                  "end": _iso(int(axis[-1])), **ports[(lab, rule)].metrics, "bars_per_year": bars_per_year,
                                  "symbols": int(len(fw.members))})
    stitched = {key: stitch([p[key] for p in by_fold], bars_per_year) for key in by_fold[0]}
    axis = np.concatenate(axes)
    first = min(int(t[0]) for fw in folds for t in fw.times)
    for rule in WEIGHT_RULES:
        for lab in labels:
            port_rows.append({"symbol": "portfolio", "window": "all", "label": lab, "weights": rule, "start": _iso(first),
                              "end": _iso(int(axis[-1])), **stitched[(lab, rule)].metrics, "bars_per_year": bars_per_year,
                              "symbols": s_count})
    returns = {lab: [np.concatenate(x) if x else np.zeros(0) for x in per[lab]] for lab in labels}
    joined = [np.concatenate(t) if t else np.zeros(0, np.int64) for t in times]
    return UniverseRun(tuple(symbols), rows + port_rows, sharpe, returns, joined, axis, stitched, label, bars_per_year,
                       trades or [])
