"""What a pooled universe run writes per fold (``foxhunt.train.universe_runner``): pooled rows, per-symbol
rows, and the per-symbol validation curves the portfolio layer reads.

folds/fold_k/metrics.json keeps the single-file keys (``fold``, ``agent``, ``buy_and_hold``, ``timing``,
``last_epoch``, ``selection`` …) so that the console table and summary.json read it as they read a file's;
there ``agent`` and ``buy_and_hold`` are **pooled rows** over the fold's member symbols (``pooled_row``), and
it adds ``symbols``: one row per member symbol (symbol, its validation bars and times, the agent's and
buy-and-hold's metrics, as a file's ``agent`` / ``buy_and_hold``) and ``pooled`` (the agent's pooled row).

folds/fold_k/curves.safetensors (``train.save_curves``) is the seam for the portfolio
(``foxhunt.backtest.portfolio``): float32 ``agent_returns`` / ``agent_positions`` / ``bh_returns`` /
``bh_positions`` [W, T] (W member symbols in metrics.json's ``symbols`` order, each row's first
``lengths[w]`` entries valid, zero after), int64 ``lengths`` [W] and ``symbol_index`` [W] (into the
universe's symbols). Returns are per-bar simple returns of each symbol's own book, bar val_start + 1 …
val_end − 1 of that symbol.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from foxhunt.train.selection import pooled_sharpe, sharpe_standard_error

__all__ = ["pooled_row", "symbol_rows", "write_universe_curves"]


def pooled_row(metrics: Sequence[dict[str, float]], returns: Sequence[np.ndarray], bars_per_year: float) -> dict[str, Any]:
    """The pooled row of W symbols' windows: ``returns`` [n_w] per-bar returns each, ``metrics`` their rows.

    sharpe: the annualised Sharpe of every symbol-bar return pooled (mean / sample std × √bars_per_year,
    as the held-back selection scores); sharpe_se: its standard error sqrt(bars_per_year / N), N the
    pooled bars (small-Sharpe approximation, the bars taken as independent across symbols and time);
    annual_volatility: the pooled returns' sample std × √bars_per_year; total_return, max_drawdown,
    turnover: the symbols' mean (an equal-weight average of the per-symbol rows); trade_count: their sum.
    """
    r = np.concatenate([np.asarray(x, dtype=np.float64) for x in returns]) if returns else np.zeros(0)
    n = int(r.size)

    def mean(key: str) -> float:
        vals = [float(m.get(key, math.nan)) for m in metrics]
        return float(np.mean(vals)) if vals else math.nan

    vol = float(r.std(ddof=1) * math.sqrt(bars_per_year)) if n > 1 else math.nan
    return {"sharpe": pooled_sharpe(r, bars_per_year), "sharpe_se": sharpe_standard_error(n, bars_per_year),
            "bars": n, "symbols": len(metrics), "total_return": mean("total_return"), "annual_volatility": vol,
            "max_drawdown": mean("max_drawdown"), "turnover": mean("turnover"),
            "trade_count": float(sum(float(m.get("trade_count", 0.0)) for m in metrics))}


def symbol_rows(symbols: Sequence[str], timestamps: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                agent: Sequence[dict[str, float]], bh: Sequence[dict[str, float]] | None) -> list[dict[str, Any]]:
    """metrics.json's ``symbols``: per member symbol its validation window (global rows start … start + length,
    the first and last bar's ISO time) and the agent's and buy-and-hold's metrics."""
    out = []
    for w, sym in enumerate(symbols):
        a, n = int(starts[w]), int(lengths[w])
        out.append({"symbol": sym, "val_bars": n + 1,
                    "val_first_time": str(np.datetime64(int(timestamps[a]), "ns")) + "Z",
                    "val_last_time": str(np.datetime64(int(timestamps[a + n]), "ns")) + "Z",
                    "agent": agent[w], "buy_and_hold": bh[w] if bh is not None else None})
    return out


def write_universe_curves(path: Path, agent: Any, bh_returns: np.ndarray | None, bh_positions: np.ndarray | None,
                          symbol_index: np.ndarray) -> None:
    """curves.safetensors of a universe fold (module docstring), written atomically."""
    from safetensors.numpy import save

    lengths = np.asarray(agent.lengths, dtype=np.int64)
    t = int(lengths.max())
    arrays = {"agent_returns": agent.returns[:, :t], "agent_positions": agent.positions[:, :t]}
    if bh_returns is not None and bh_positions is not None:
        arrays.update(bh_returns=bh_returns[:, :t], bh_positions=bh_positions[:, :t])
    data = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}
    data.update(lengths=lengths, symbol_index=np.asarray(symbol_index, dtype=np.int64))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(save(data))
    os.replace(tmp, path)
