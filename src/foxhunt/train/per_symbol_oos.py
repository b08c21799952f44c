"""A per-symbol universe run's (``train.pool = false``) out-of-sample record: the symbols' runs held
together as the pooled run's ``UniverseRun`` (window = fold), for its summary.json, its report and
``foxhunt backtest --run`` on it.

Per universe fold k and member symbol s, ``SymbolFold`` is s's own run's validation window of fold k
(``symbols/<SYMBOL>/folds/fold_k/``): its bar times, and the returns and metric rows of its greedy
agent, buy-and-hold and the in-sample quant rule (the single-file run's oos.safetensors, which the
per-symbol runner writes for every symbol: ``foxhunt.train.oos.write_oos``). ``universe_walk`` joins
them into ``FoldWindows`` with the members' training volatilities (each symbol's closes on its
training rows of the fold, ``fold_training_vols``: the pooled run's rule) and hands them to
``universe_walk.walk_forward_run``: per-symbol rows, per-fold and stitched portfolios, equal-weight and
inverse-volatility, of every policy. ``read_symbol_fold`` reads a SymbolFold from a symbol run's files
(training); ``foxhunt.backtest.per_symbol_run_dir`` makes them by backtesting the symbols' models, so on
the CPU both give the same rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from foxhunt.backtest.universe_walk import BENCHMARK, QUANT, FoldWindows, fold_training_vols, walk_forward_run
from foxhunt.train.universe_oos import AGENT

__all__ = ["SymbolFold", "universe_walk", "read_symbol_fold", "read_walk_forward"]


@dataclass
class SymbolFold:
    """One symbol's validation window of one fold, from its own run.

    times: [n + 1] int64 UTC ns (the window's first bar, then each return's bar). returns: {AGENT,
    BENCHMARK, QUANT: [n] float64}. metrics: {label: metric row}. timing: the agent's timing fields
    against buy-and-hold (``timing.row_fields``). trades: the agent's round trips (a backtest's), or empty.
    """

    times: np.ndarray
    returns: dict[str, np.ndarray]
    metrics: dict[str, dict[str, Any]]
    timing: dict[str, Any]
    trades: list[dict[str, Any]] = field(default_factory=list)


def universe_walk(universe: Any, universe_folds: list[Any], symbol_fold: Callable[[int, int], SymbolFold | None],
                  bars_per_year: float) -> Any:
    """The ``UniverseRun`` (window = fold) of the members' SymbolFolds (``symbol_fold(s, fold)``), or None
    when one is None (a file missing)."""
    close = [b.close for b in universe.bars]
    folds, trades = [], []
    for uf in universe_folds:
        mem = np.flatnonzero(uf.member).astype(np.int64)
        parts = [symbol_fold(int(s), uf.fold) for s in mem]
        if any(p is None for p in parts):
            return None
        labels = (AGENT, BENCHMARK, QUANT)
        folds.append(FoldWindows(uf.fold, mem, [p.times for p in parts],  # type: ignore[union-attr]
                                 {lab: [p.returns[lab] for p in parts] for lab in labels},  # type: ignore[union-attr]
                                 {lab: [p.metrics[lab] for p in parts] for lab in labels},  # type: ignore[union-attr]
                                 fold_training_vols(close, universe.offsets, uf.bounds, mem),
                                 [p.timing for p in parts]))  # type: ignore[union-attr]
        trades += [{"fold": uf.fold, "symbol": universe.symbols[s], **t, "window": uf.fold}
                   for s, p in zip(mem, parts) for t in p.trades]  # type: ignore[union-attr]
    return walk_forward_run(universe.symbols, folds, AGENT, bars_per_year, trades)


def read_symbol_fold(fold_dir: Path, bars_per_year: float) -> SymbolFold | None:
    """A symbol run's fold (folds/fold_k/: metrics.json, curves.safetensors, oos.safetensors) as a
    SymbolFold; None when a file or buy-and-hold (train.eval_buy_and_hold = false) is missing."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    from foxhunt.backtest.timing import row_fields, timing_block
    from foxhunt.train.oos import OOS_FILE

    need = [fold_dir / n for n in ("metrics.json", "curves.safetensors", OOS_FILE)]
    if not all(p.is_file() for p in need):
        return None
    m = json.loads(need[0].read_text())
    c, o = load_file(str(need[1])), load_file(str(need[2]))
    if "bh_returns" not in c or not m.get("buy_and_hold"):
        return None
    with safe_open(str(need[2]), "np") as fh:
        quant = json.loads(fh.metadata()["quant"])
    ret = {AGENT: c["agent_returns"].astype(np.float64), BENCHMARK: c["bh_returns"].astype(np.float64),
           QUANT: o["quant_returns"].astype(np.float64)}
    trades = m["agent"].get("trade_count")
    timing = row_fields(timing_block(ret[AGENT], c["agent_positions"].astype(np.float64), ret[BENCHMARK], bars_per_year,
                                     float(trades) if trades is not None and math.isfinite(trades) else None))
    return SymbolFold(o["times"].astype(np.int64), ret, {AGENT: m["agent"], BENCHMARK: m["buy_and_hold"], QUANT: quant["metrics"]},
                      timing)


def read_walk_forward(symbol_runs: Sequence[Path], prepared: Any) -> Any:
    """The run's ``UniverseRun`` from its symbols' run files (``PerSymbolPrepared``; symbol_runs[s]: symbol
    s's run directory), or None."""
    u, bpy = prepared.universe, float(prepared.annualisation.bars_per_year)
    return universe_walk(u, prepared.universe_folds, lambda s, k: read_symbol_fold(symbol_runs[s] / "folds" / f"fold_{k}", bpy),
                         bpy)
