"""A finished backtest on the host: ``BacktestResult``, and the two steps that build it from the
device arrays of either path (the torch backtester, the fused kernel's adapter): ``assemble_result``
(metrics and status, one readback) and ``trade_rows`` (round trips).

Its own module so that ``evaluator`` (which dispatches to the fused path) and ``fused`` (which
builds the same result) both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from foxhunt.backtest.metrics import METRIC_NAMES, TradeRecords, compute_metrics, metrics_to_dicts

STATUS_OK, STATUS_BUST = 0, 1
NO_BARRIER = 2  # trade_barrier code of a round trip closed before any barrier was hit (None in rows)


@dataclass
class BacktestResult:
    """Host-side results. metrics: one dict per window (``METRIC_NAMES`` + status)."""

    metrics: list[dict[str, float]]
    starts: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray | None = None  # [W, T] per-bar simple returns (0 past each length)
    positions: np.ndarray | None = None  # [W, T] exposure after each step
    trades: list[dict[str, float]] | None = None  # round trips, in window then time order
    metrics_tensor: torch.Tensor | None = None  # [W, M] on the device
    bars_per_year: float = float("nan")  # the annualisation factor of these metrics

    def equity(self, w: int) -> np.ndarray:
        """Equity curve of window w starting at 1 (needs returns)."""
        assert self.returns is not None
        return np.concatenate([[1.0], np.cumprod(1.0 + self.returns[w, : self.lengths[w]].astype(np.float64))])


def assemble_result(bt: Any, starts: np.ndarray, lengths: np.ndarray, returns: torch.Tensor,
                    positions: torch.Tensor, trade_ret: torch.Tensor, trade_closed: torch.Tensor,
                    bust: torch.Tensor, keep_curves: bool, *, traded: torch.Tensor | None = None) -> BacktestResult:
    """Metrics and status codes of a finished backtest, read back together (one readback).

    returns, positions: [W, T] (T ≥ every length); trade_ret / trade_closed: [W, T'] per-bar round
    trips; bust: [W] bool; traded: [W, T] traded notional per bar / initial capital (turnover).
    Shared by the torch path and the fused kernel's adapter. Each row also carries ``status`` and
    ``bars_per_year`` (the annualisation used).
    """
    w = returns.shape[0]
    dev = returns.device
    trades = TradeRecords(window=torch.arange(w, device=dev).repeat_interleave(trade_ret.shape[1]),
                          ret=trade_ret.reshape(-1), valid=trade_closed.reshape(-1))
    metrics = compute_metrics(returns, torch.as_tensor(lengths, device=dev), bars_per_year=bt.bars_per_year,
                              positions=positions, trades=trades, traded=traded)
    status = torch.where(bust, float(STATUS_BUST), float(STATUS_OK)).to(metrics.dtype)
    rows = metrics_to_dicts(torch.cat([metrics, status.unsqueeze(1)], 1), (*METRIC_NAMES, "status"))
    for row in rows:
        row["bars_per_year"] = bt.bars_per_year
    res = BacktestResult(rows, starts, lengths, metrics_tensor=metrics, bars_per_year=bt.bars_per_year)
    if keep_curves:
        res.returns = returns.cpu().numpy()
        res.positions = positions.cpu().numpy()
    return res


def trade_rows(closed: torch.Tensor, fields: dict[str, torch.Tensor | np.ndarray]) -> list[dict[str, float]]:
    """Round trips in window then time order from per-bar [W, T] arrays (one readback each)."""
    mask = closed.cpu().numpy()
    host = {k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in fields.items()}
    ints = ("entry_bar", "exit_bar", "side")

    def value(k: str, x: object) -> int | float | None:
        if k == "barrier":
            return None if int(x) == NO_BARRIER else int(x)  # type: ignore[call-overload]
        return int(x) if k in ints else float(x)  # type: ignore[call-overload,arg-type]

    return [
        {"window": int(wi), **{k: value(k, v[wi, ti]) for k, v in host.items()}}
        for wi, ti in zip(*np.nonzero(mask))
    ]


__all__ = ["Backtester", "BacktestResult", "METRIC_NAMES", "bars_per_year", "execution_params", "policy_params"]

__all__ = ["NO_BARRIER", "STATUS_BUST", "STATUS_OK", "BacktestResult", "assemble_result", "trade_rows"]
